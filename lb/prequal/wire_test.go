package prequal

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseAnswer checks the probe answer's wire format: what is taken,
// what is clamped and what is refused.
func TestParseAnswer(t *testing.T) {
	tests := []struct {
		in      string
		want    Answer
		wantErr bool
	}{
		{in: "rif=3 latency_us=1250\n", want: Answer{RIF: 3, Latency: 1250 * time.Microsecond}},
		{in: "rif=0 latency_us=0", want: Answer{}},
		{in: "rif=2000000 latency_us=5", want: Answer{RIF: MaxRIF, Latency: 5 * time.Microsecond, Clamped: true}},
		{in: "rif=1 latency_us=9999999999", want: Answer{RIF: 1, Latency: MaxLatency, Clamped: true}},
		{in: "rif=9223372036854775807 latency_us=9223372036854775807", want: Answer{RIF: MaxRIF, Latency: MaxLatency, Clamped: true}},
		{in: "", wantErr: true},
		{in: "rif=-1 latency_us=5", wantErr: true},
		{in: "rif=+1 latency_us=5", wantErr: true},
		{in: "rif=1 latency_us=", wantErr: true},
		{in: "rif=1  latency_us=5", wantErr: true},
		{in: "latency_us=5 rif=1", wantErr: true},
		{in: "rif=1 latency_us=5 extra=1", wantErr: true},
		{in: "rif=1 latency_us=5\n\n", wantErr: true},
		{in: "rif=12345678901234567890 latency_us=5", wantErr: true},
		{in: "rif=1 latency_us=5" + strings.Repeat(" ", 60), wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseAnswer([]byte(tt.in))
		if tt.wantErr {
			if !errors.Is(err, ErrAnswer) {
				t.Errorf("ParseAnswer(%q) = %+v, %v; want an error wrapping ErrAnswer", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseAnswer(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

// TestAppendAnswerRoundTrip checks that what AppendAnswer writes parses
// back to the same values.
func TestAppendAnswerRoundTrip(t *testing.T) {
	for _, c := range []struct {
		rif int64
		lat time.Duration
	}{{0, 0}, {7, 3 * time.Millisecond}, {MaxRIF, MaxLatency}, {-5, -time.Second}} {
		b := AppendAnswer(nil, c.rif, c.lat)
		a, err := ParseAnswer(b)
		if err != nil || a.RIF != max(c.rif, 0) || a.Latency != max(c.lat, 0) || a.Clamped {
			t.Errorf("round trip of (%d, %v) through %q = %+v, %v", c.rif, c.lat, b, a, err)
		}
	}
}

// FuzzParseAnswer checks that any bytes parse into an answer within the
// bounds or an error wrapping ErrAnswer, never a panic, and that an
// accepted answer written back parses the same.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{"rif=3 latency_us=1250\n", "rif=0 latency_us=0", "rif=99999999999 latency_us=1", "rif=-1", "", "rif=1 latency_us=2\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseAnswer(b)
		if err != nil {
			if !errors.Is(err, ErrAnswer) {
				t.Fatalf("ParseAnswer(%q): error %v does not wrap ErrAnswer", b, err)
			}
			return
		}
		if a.RIF < 0 || a.RIF > MaxRIF || a.Latency < 0 || a.Latency > MaxLatency || a.Latency%time.Microsecond != 0 {
			t.Fatalf("ParseAnswer(%q) = %+v: out of bounds", b, a)
		}
		b2, err := ParseAnswer(AppendAnswer(nil, a.RIF, a.Latency))
		if err != nil || b2.RIF != a.RIF || b2.Latency != a.Latency {
			t.Fatalf("ParseAnswer(%q) = %+v, written back parses as %+v, %v", b, a, b2, err)
		}
	})
}

// TestParseAnswerAllocs checks that a valid answer parses without
// allocating.
func TestParseAnswerAllocs(t *testing.T) {
	b := []byte("rif=3 latency_us=1250\n")
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseAnswer(b) }); n != 0 {
		t.Errorf("ParseAnswer allocates %v times, want 0", n)
	}
}
