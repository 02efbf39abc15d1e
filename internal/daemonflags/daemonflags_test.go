package daemonflags

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"a", []string{"a"}},
		{" a , ,b,", []string{"a", "b"}},
	}
	for _, tt := range tests {
		if d := cmp.Diff(tt.want, List(tt.in)); d != "" {
			t.Errorf("List(%q) mismatch (-want +got):\n%s", tt.in, d)
		}
	}
}

func TestGossip(t *testing.T) {
	c, err := Gossip("n1", "127.0.1.1:7946", "127.0.0.1:7946, 127.0.0.2:7946", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "n1" || c.BindAddr != "127.0.1.1" || c.BindPort != 7946 || c.UDPBufferSize != 8192 {
		t.Errorf("Gossip = name %q addr %q port %d udp %d", c.Name, c.BindAddr, c.BindPort, c.UDPBufferSize)
	}
	if d := cmp.Diff([]string{"127.0.0.1:7946", "127.0.0.2:7946"}, c.Seeds); d != "" {
		t.Errorf("seeds mismatch (-want +got):\n%s", d)
	}
	for _, bad := range []string{"nope", "127.0.0.1:x"} {
		if _, err := Gossip("n", bad, "", ""); err == nil {
			t.Errorf("Gossip(addr %q) succeeded, want an error", bad)
		}
	}
}
