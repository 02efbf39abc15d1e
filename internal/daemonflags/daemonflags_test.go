package daemonflags

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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
	c, warn, err := Gossip(GossipSettings{Name: "n1", Addr: "127.0.1.1:7946", Join: "127.0.0.1:7946, 127.0.0.2:7946", Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "n1" || c.BindAddr != "127.0.1.1" || c.BindPort != 7946 || c.UDPBufferSize != 8192 || len(warn) != 0 {
		t.Errorf("Gossip = name %q addr %q port %d udp %d, warnings %q", c.Name, c.BindAddr, c.BindPort, c.UDPBufferSize, warn)
	}
	if d := cmp.Diff([]string{"127.0.0.1:7946", "127.0.0.2:7946"}, c.Seeds); d != "" {
		t.Errorf("seeds mismatch (-want +got):\n%s", d)
	}
	for _, bad := range []string{"nope", "127.0.0.1:x"} {
		if _, _, err := Gossip(GossipSettings{Name: "n", Addr: bad, Getenv: noEnv}); err == nil {
			t.Errorf("Gossip(addr %q) succeeded, want an error", bad)
		}
	}
}

func noEnv(string) string { return "" }

const (
	key1 = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	key2 = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
)

// TestGossipKeys: finding 1 of the first security review (SECURITY.md) and
// the gossip half of finding 8. Beyond loopback a daemon refuses to start
// without a key unless told --gossip-insecure; the key comes from a file or
// the environment, and a key on the command line draws a warning.
func TestGossipKeys(t *testing.T) {
	dir := t.TempDir()
	ring := filepath.Join(dir, "ring")
	writeFile(t, ring, "# primary first\n"+key2+"\n\n"+key1+"\n", 0o600)
	open := filepath.Join(dir, "open")
	writeFile(t, open, key1+"\n", 0o644)
	bad := filepath.Join(dir, "bad")
	writeFile(t, bad, key1+"\nc2hvcnQ=\n", 0o600)
	empty := filepath.Join(dir, "empty")
	writeFile(t, empty, "# nothing\n", 0o600)

	tests := []struct {
		name     string
		s        GossipSettings
		env      string
		wantKeys []string
		wantKey  string
		wantWarn string
		wantErr  string
	}{
		{name: "loopback without key", s: GossipSettings{Addr: "127.0.0.1:7946"}},
		{name: "all interfaces without key", s: GossipSettings{Addr: "0.0.0.0:7946"},
			wantErr: `gossip.secret_key: required when gossip.bind_addr ("0.0.0.0") is not a loopback address`},
		{name: "host address, insecure", s: GossipSettings{Addr: "10.1.2.3:7946", Insecure: true},
			wantWarn: "neither encrypted nor authenticated"},
		{name: "key file", s: GossipSettings{Addr: "0.0.0.0:7946", KeyFile: ring}, wantKeys: []string{key2, key1}},
		{name: "key file readable by others", s: GossipSettings{Addr: "0.0.0.0:7946", KeyFile: open},
			wantKeys: []string{key1}, wantWarn: "lets other users read the key"},
		{name: "bad key file", s: GossipSettings{Addr: "0.0.0.0:7946", KeyFile: bad},
			wantErr: "--gossip-key-file " + bad + ": line 2: must decode to 16, 24 or 32 bytes, got 5"},
		{name: "empty key file", s: GossipSettings{Addr: "0.0.0.0:7946", KeyFile: empty}, wantErr: "no key in it"},
		{name: "missing key file", s: GossipSettings{Addr: "0.0.0.0:7946", KeyFile: filepath.Join(dir, "nope")},
			wantErr: "--gossip-key-file: open"},
		{name: "environment", s: GossipSettings{Addr: "0.0.0.0:7946"}, env: key1 + "," + key2, wantKeys: []string{key1, key2}},
		{name: "file and environment", s: GossipSettings{Addr: "0.0.0.0:7946", KeyFile: ring}, env: key1,
			wantErr: "gossip key given by --gossip-key-file and SPILLWAY_GOSSIP_KEY: set only one"},
		{name: "command line", s: GossipSettings{Addr: "0.0.0.0:7946", Key: key1, KeyOnCommandLine: true},
			wantKey: key1, wantWarn: "--gossip-key puts the gossip key on the command line"},
		{name: "flag from the daemon's own environment variable", s: GossipSettings{Addr: "0.0.0.0:7946", Key: key1},
			wantKey: key1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.s.Name = "n1"
			tt.s.Getenv = func(k string) string {
				if k == GossipKeyEnv {
					return tt.env
				}
				return ""
			}
			c, warn, err := Gossip(tt.s)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Gossip() error = %v, want it to contain %q", err, tt.wantErr)
				}
				for _, k := range []string{key1, key2} {
					if strings.Contains(err.Error(), k) {
						t.Errorf("error %q reveals a key", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Gossip() = %v", err)
			}
			if d := cmp.Diff(tt.wantKeys, c.Keys); d != "" {
				t.Errorf("Keys mismatch (-want +got):\n%s", d)
			}
			if c.SecretKey != tt.wantKey {
				t.Errorf("SecretKey = %q, want %q", c.SecretKey, tt.wantKey)
			}
			if got := strings.Join(warn, "\n"); (tt.wantWarn == "") != (got == "") || !strings.Contains(got, tt.wantWarn) {
				t.Errorf("warnings %q, want one containing %q", got, tt.wantWarn)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // whatever the umask
		t.Fatal(err)
	}
}

type fakeNode struct {
	keys []string
	err  error
}

func (f *fakeNode) SetKeys(keys []string) error {
	if f.err != nil {
		return f.err
	}
	f.keys = keys
	return nil
}
func (f *fakeNode) PrimaryKeyID() string { return "id" }

func TestReloadGossipKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ring")
	writeFile(t, path, key1+"\n"+key2+"\n", 0o600)
	n := &fakeNode{}
	if id, _, err := ReloadGossipKeys(n, path); err != nil || id != "id" || !cmp.Equal(n.keys, []string{key1, key2}) {
		t.Fatalf("ReloadGossipKeys = %q, %v; keys %q", id, err, n.keys)
	}
	writeFile(t, path, "garbage\n", 0o600)
	if _, _, err := ReloadGossipKeys(n, path); err == nil || !strings.Contains(err.Error(), "line 1: not valid base64") {
		t.Errorf("ReloadGossipKeys(bad file) = %v, want a line 1 error", err)
	}
	if !cmp.Equal(n.keys, []string{key1, key2}) {
		t.Errorf("a bad file changed the keys to %q", n.keys)
	}
	writeFile(t, path, key1+"\n", 0o600)
	n.err = errors.New("refused")
	if _, _, err := ReloadGossipKeys(n, path); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("ReloadGossipKeys = %v, want the node's error", err)
	}
}

func TestOnCommandLine(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want bool
	}{
		{[]string{"--gossip-key", "x"}, true},
		{[]string{"--gossip-key=x"}, true},
		{[]string{"-gossip-key=x"}, true},
		{[]string{"--gossip-key-file", "x"}, false},
		{[]string{"--site", "nyc"}, false},
		{[]string{"--", "--gossip-key=x"}, false},
	} {
		if got := OnCommandLine(tt.args, "gossip-key"); got != tt.want {
			t.Errorf("OnCommandLine(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}
