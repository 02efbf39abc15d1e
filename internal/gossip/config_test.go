package gossip

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr []string
	}{
		{name: "defaults with a name", mutate: func(c *Config) {}},
		{name: "port 0 and a 32-byte key", mutate: func(c *Config) {
			c.BindPort = 0
			c.SecretKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // 32 bytes
		}},
		{name: "missing name", mutate: func(c *Config) { c.Name = "" }, wantErr: []string{"gossip.name: required"}},
		{name: "everything wrong at once", mutate: func(c *Config) {
			c.BindAddr = ""
			c.BindPort = 70000
			c.AdvertisePort = -1
			c.Seeds = []string{"127.0.0.1:7946", ""}
			c.GossipInterval = 0
			c.GossipNodes = 0
			c.RetransmitMult = 0
			c.StateRetransmitMult = -1
			c.SuspicionMult = 0
			c.ProbeTimeout = time.Second
			c.UDPBufferSize = 100
			c.JoinBackoffMax = time.Millisecond
			c.RejoinInterval = -time.Second
			c.LeaveTimeout = -time.Second
			c.StateTTL = 0
		}, wantErr: []string{
			"gossip.bind_addr: required",
			"gossip.bind_port: must be in [0, 65535], got 70000",
			"gossip.advertise_port: must be in [0, 65535], got -1",
			"gossip.seeds[1]: empty address",
			"gossip.gossip_interval: must be > 0, got 0s",
			"gossip.gossip_nodes: must be >= 1, got 0",
			"gossip.retransmit_mult: must be >= 1, got 0",
			"gossip.state_retransmit_mult: must be >= 1, got -1",
			"gossip.suspicion_mult: must be >= 1, got 0",
			"gossip.probe_timeout: must be < probe_interval (500ms), got 1s",
			"gossip.udp_buffer_size: must be in [512, 65507], got 100",
			"gossip.join_backoff_max: must be >= join_backoff_min (100ms), got 1ms",
			"gossip.rejoin_interval: must be >= 0, got -1s",
			"gossip.leave_timeout: must be >= 0, got -1s",
			"gossip.state_ttl: must be > 0, got 0s",
		}},
		// A replay of a departed node's sealed state must be stale by the
		// time the node's last state is forgotten.
		{name: "seal max age above the state ttl", mutate: func(c *Config) { c.SealMaxAge = 3 * time.Minute },
			wantErr: []string{"gossip.seal_max_age: must be in (0, state_ttl=2m0s], got 3m0s"}},
		{name: "seal max age zero", mutate: func(c *Config) { c.SealMaxAge = 0 },
			wantErr: []string{"gossip.seal_max_age: must be in (0, state_ttl=2m0s], got 0s"}},
		{name: "key not base64", mutate: func(c *Config) { c.SecretKey = "not base64!" },
			wantErr: []string{"gossip.secret_key: not valid base64"}},
		{name: "key of the wrong size", mutate: func(c *Config) { c.SecretKey = "c2hvcnQ=" },
			wantErr: []string{"gossip.secret_key: must decode to 16, 24 or 32 bytes, got 5"}},
		// Finding 1 of the first security review (SECURITY.md): gossip beyond
		// loopback must be authenticated.
		{name: "all interfaces without a key", mutate: func(c *Config) { c.BindAddr = "0.0.0.0" },
			wantErr: []string{`gossip.secret_key: required when gossip.bind_addr ("0.0.0.0") is not a loopback address`}},
		{name: "host address without a key", mutate: func(c *Config) { c.BindAddr = "10.0.0.5" },
			wantErr: []string{`gossip.secret_key: required when gossip.bind_addr ("10.0.0.5") is not a loopback address`}},
		{name: "IPv6 any without a key", mutate: func(c *Config) { c.BindAddr = "::" },
			wantErr: []string{`gossip.secret_key: required when gossip.bind_addr ("::") is not a loopback address`}},
		{name: "host address, insecure on purpose", mutate: func(c *Config) { c.BindAddr, c.Insecure = "10.0.0.5", true }},
		{name: "host address with a key", mutate: func(c *Config) {
			c.BindAddr, c.SecretKey = "0.0.0.0", "MDEyMzQ1Njc4OWFiY2RlZg=="
		}},
		{name: "host address with a keyring", mutate: func(c *Config) {
			c.BindAddr, c.Keys = "0.0.0.0", []string{"MDEyMzQ1Njc4OWFiY2RlZg==", "ZmVkY2JhOTg3NjU0MzIxMA=="}
		}},
		{name: "other loopback addresses need no key", mutate: func(c *Config) { c.BindAddr = "127.0.3.1" }},
		{name: "localhost needs no key", mutate: func(c *Config) { c.BindAddr = "localhost" }},
		{name: "IPv6 loopback needs no key", mutate: func(c *Config) { c.BindAddr = "::1" }},
		{name: "key and keyring", mutate: func(c *Config) {
			c.SecretKey, c.Keys = "MDEyMzQ1Njc4OWFiY2RlZg==", []string{"MDEyMzQ1Njc4OWFiY2RlZg=="}
		}, wantErr: []string{"gossip.secret_key and gossip.keys: set one, not both"}},
		{name: "bad keyring entries", mutate: func(c *Config) {
			c.Keys = []string{"MDEyMzQ1Njc4OWFiY2RlZg==", "c2hvcnQ=", "MDEyMzQ1Njc4OWFiY2RlZg=="}
		}, wantErr: []string{
			"gossip.keys[1]: must decode to 16, 24 or 32 bytes, got 5",
			"gossip.keys[2]: same key as gossip.keys[0]",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Name = "n1"
			tt.mutate(&c)
			err := c.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %q, want it to contain %q", err, want)
				}
			}
			if got, want := strings.Count(err.Error(), "\n")+1, len(tt.wantErr); got != want {
				t.Errorf("Validate() reported %d problems, want %d:\n%v", got, want, err)
			}
			if _, nerr := New(c, Options{}); nerr == nil {
				t.Errorf("New accepted a config that Validate rejects")
			}
		})
	}
}

func TestMemberlistConfig(t *testing.T) {
	c := DefaultConfig()
	c.Name = "n1"
	c.BindPort = 0
	mc := c.memberlistConfig(nil, &bytes.Buffer{})
	got := []any{mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertisePort, mc.GossipInterval, mc.GossipNodes,
		mc.RetransmitMult, mc.PushPullInterval, mc.ProbeInterval, mc.ProbeTimeout, mc.SuspicionMult,
		mc.TCPTimeout, mc.UDPBufferSize, mc.SecretKey == nil, mc.LogOutput == nil, mc.Logger != nil}
	want := []any{"n1", "127.0.0.1", 0, 0, 100 * time.Millisecond, 3,
		4, 10 * time.Second, 500 * time.Millisecond, 200 * time.Millisecond, 3,
		time.Second, 1400, true, true, true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("memberlistConfig (-want +got):\n%s", diff)
	}
}

func TestBroadcastBudget(t *testing.T) {
	tests := []struct {
		name string
		udp  int
		key  string
		want int
	}{
		{name: "plain", udp: 1400, want: 1395},
		{name: "encrypted", udp: 1400, key: "MDEyMzQ1Njc4OWFiY2RlZg==", want: 1350},
		{name: "loopback jumbo", udp: 65507, want: 65502},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.UDPBufferSize, c.SecretKey = tt.udp, tt.key
			if got := c.broadcastBudget(); got != tt.want {
				t.Errorf("broadcastBudget() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParseLogLine(t *testing.T) {
	tests := []struct {
		line      string
		wantLevel zerolog.Level
		wantMsg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:5", zerolog.DebugLevel, "Stream connection from=127.0.0.1:5"},
		{"[INFO] memberlist: Marking n2 as failed", zerolog.InfoLevel, "Marking n2 as failed"},
		{"[WARN] memberlist: Refuting a suspect message", zerolog.WarnLevel, "Refuting a suspect message"},
		{"[ERR] memberlist: Failed to send", zerolog.ErrorLevel, "Failed to send"},
		{"[ERROR] memberlist: boom", zerolog.ErrorLevel, "boom"},
		{"[ERR] Failed to shutdown transport", zerolog.ErrorLevel, "Failed to shutdown transport"},
		{"[TRACE] something", zerolog.InfoLevel, "[TRACE] something"},
		{"no tag at all", zerolog.InfoLevel, "no tag at all"},
	}
	for _, tt := range tests {
		gotLevel, gotMsg := parseLogLine(tt.line)
		if gotLevel != tt.wantLevel || gotMsg != tt.wantMsg {
			t.Errorf("parseLogLine(%q) = %v, %q, want %v, %q", tt.line, gotLevel, gotMsg, tt.wantLevel, tt.wantMsg)
		}
	}
}

func TestLogWriter(t *testing.T) {
	var buf bytes.Buffer
	w := logWriter{log: zerolog.New(&buf)}
	in := "[WARN] memberlist: first\n[DEBUG] memberlist: second\n\n" +
		"[ERR] memberlist: Failed to send ping: write udp 127.0.0.1:1->127.0.0.1:2: use of closed network connection\n"
	n, err := w.Write([]byte(in))
	if err != nil || n != len(in) {
		t.Fatalf("Write = %d, %v, want %d, nil", n, err, len(in))
	}
	want := `{"level":"warn","message":"first"}` + "\n" + `{"level":"debug","message":"second"}` + "\n" +
		`{"level":"debug","message":"Failed to send ping: write udp 127.0.0.1:1->127.0.0.1:2: use of closed network connection"}` + "\n"
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("log output (-want +got):\n%s", diff)
	}
}
