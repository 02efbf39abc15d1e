package poller

import "testing"

func TestParseMode(t *testing.T) {
	cases := []struct {
		in   string
		want Mode
		ok   bool
	}{
		{"auto", Auto, true}, {"on", On, true}, {"off", Off, true},
		{"", Auto, false}, {"On", Auto, false}, {"true", Auto, false},
	}
	for _, tc := range cases {
		m, err := ParseMode(tc.in)
		if (err == nil) != tc.ok || (tc.ok && m != tc.want) {
			t.Errorf("ParseMode(%q) = %v, %v; want %v, ok %v", tc.in, m, err, tc.want, tc.ok)
		}
		if tc.ok && m.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", m, m.String(), tc.in)
		}
	}
}
