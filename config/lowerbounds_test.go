package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLowerBounds: the durations whose tiny values empty the plan or keep
// a group from scaling have a lower bound (the second security review),
// and max_pending_requests both bounds: the bound itself is accepted, one
// step beyond is rejected with exactly one error naming the file and the
// field path.
func TestLowerBounds(t *testing.T) {
	web := func(c *Config) *Service { return &c.Services[0] }
	scaled := func(c *Config) *Autoscaling {
		a := &c.Regions[0].Zones[0].Groups[0].Autoscaling
		if !a.Enabled() {
			*a = DefaultAutoscaling()
			a.MaxInstances = 3
		}
		return a
	}
	for _, tc := range []struct {
		name    string
		ok, bad func(*Config)
		want    string // the error of bad
	}{
		{"health_check.interval",
			func(c *Config) {
				web(c).HealthCheck.Interval, web(c).HealthCheck.Timeout = 100*time.Millisecond, 50*time.Millisecond
			},
			func(c *Config) {
				web(c).HealthCheck.Interval, web(c).HealthCheck.Timeout = 99*time.Millisecond, 50*time.Millisecond
			},
			"services[0].health_check.interval: must be at least 100ms (at most ten probes a second per instance), got 99ms"},
		{"health_check.timeout",
			func(c *Config) { web(c).HealthCheck.Timeout = 50 * time.Millisecond },
			func(c *Config) { web(c).HealthCheck.Timeout = 49 * time.Millisecond },
			"services[0].health_check.timeout: must be at least 50ms (healthy instances fail shorter checks), got 49ms"},
		{"routes.timeout",
			func(c *Config) { c.Routes[0].Timeout = 10 * time.Millisecond },
			func(c *Config) { c.Routes[0].Timeout = 9 * time.Millisecond },
			"routes[0].timeout: must be at least 10ms (every request would time out against its backend), got 9ms"},
		{"routes.per_try_timeout",
			func(c *Config) { c.Routes[0].PerTryTimeout = 10 * time.Millisecond },
			func(c *Config) { c.Routes[0].PerTryTimeout = time.Millisecond },
			"routes[0].per_try_timeout: must be at least 10ms (0 = off; every attempt would time out against its backend), got 1ms"},
		{"feedback.queue_delay",
			func(c *Config) { web(c).Feedback.QueueDelay = time.Millisecond },
			func(c *Config) { web(c).Feedback.QueueDelay = 999 * time.Microsecond },
			"services[0].feedback.queue_delay: must be at least 1ms (latency noise would read as queueing), got 999µs"},
		{"autoscaling.cpu_window",
			func(c *Config) { scaled(c).CPUWindow = time.Second },
			func(c *Config) { scaled(c).CPUWindow = 999 * time.Millisecond },
			"regions[0].zones[0].groups[0].autoscaling.cpu_window: must be at least 1s (the controller samples once a second), got 999ms"},
		{"autoscaling.concurrency_window",
			func(c *Config) { scaled(c).ConcurrencyWindow = time.Second },
			func(c *Config) { scaled(c).ConcurrencyWindow = time.Nanosecond },
			"regions[0].zones[0].groups[0].autoscaling.concurrency_window: must be at least 1s (the controller samples once a second, and a group idle that long scales to zero), got 1ns"},
		{"autoscaling.demoted_idle_window",
			func(c *Config) { scaled(c).DemotedIdleWindow = time.Second },
			func(c *Config) { scaled(c).DemotedIdleWindow = 500 * time.Millisecond },
			"regions[0].zones[0].groups[0].autoscaling.demoted_idle_window: must be at least 1s (the controller samples once a second), got 500ms"},
		{"autoscaling.min_pending_wait",
			func(c *Config) { scaled(c).MinPendingWait = 100 * time.Millisecond },
			func(c *Config) { scaled(c).MinPendingWait = 99 * time.Millisecond },
			"regions[0].zones[0].groups[0].autoscaling.min_pending_wait: must be at least 100ms (a shorter wait never asks for an instance), got 99ms"},
		{"max_pending_requests at least 1",
			func(c *Config) { web(c).MaxPendingRequests = 1 },
			func(c *Config) { web(c).MaxPendingRequests = 0 },
			"services[0].max_pending_requests: must be in 1..1000000, got 0"},
		{"max_pending_requests at most 1e6",
			func(c *Config) { web(c).MaxPendingRequests = 1_000_000 },
			func(c *Config) { web(c).MaxPendingRequests = 1_000_001 },
			"services[0].max_pending_requests: must be in 1..1000000, got 1000001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := parseBounds(t, tc.ok); err != nil {
				t.Errorf("at the bound: %v", err)
			}
			err := parseBounds(t, tc.bad)
			if err == nil {
				t.Fatalf("beyond the bound: no error, want %q", tc.want)
			}
			want := "bounds.yaml: " + tc.want
			if err.Error() != want {
				t.Errorf("beyond the bound:\n got %v\nwant %s", err, want)
			}
		})
	}
}

// TestLowerBoundsAttackValues: the values of the second security review in
// a config file: a 1 ms health check interval (with a timeout under it)
// that made every backend flap and emptied the plan is refused, naming
// both fields.
func TestLowerBoundsAttackValues(t *testing.T) {
	y := strings.Replace(boundsYAML, "    backends: [{group: g1, max_rate_per_instance: 10}]\n",
		"    backends: [{group: g1, max_rate_per_instance: 10}]\n    health_check: {interval: 1ms, timeout: 500us}\n", 1)
	_, err := Parse([]byte(y), "attack.yaml")
	want := []string{
		"attack.yaml: services[0].health_check.interval: must be at least 100ms (at most ten probes a second per instance), got 1ms",
		"attack.yaml: services[0].health_check.timeout: must be at least 50ms (healthy instances fail shorter checks), got 500µs",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("Parse(interval 1ms, timeout 500us) = %v, want\n%s", err, strings.Join(want, "\n"))
	}
}

// TestSecretFileRefused: cookie_secret_file and previous_cookie_secret_file
// name a secret of the operator's, nothing else: a kernel file (under
// /proc, /sys, /dev, directly or through a link), anything but a regular
// file, a file over 4 KiB, content that is not one line of printable ASCII
// and a secret under 32 bytes are refused, each with an error that names
// the field and the file and never shows the content.
func TestSecretFileRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, content []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const good = "a-cookie-secret-of-forty-bytes-0123456789"
	write("good.secret", []byte(good+"\n"))
	if err := os.Symlink("/proc/self/environ", filepath.Join(dir, "environ.secret")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("good.secret", filepath.Join(dir, "link.secret")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir.secret"), 0o700); err != nil {
		t.Fatal(err)
	}
	write("big.secret", []byte(strings.Repeat("x", 4097)))
	write("binary.secret", []byte("0123456789abcdef0123456789abcdef\x00PATH=/usr/bin"))
	write("short.secret", []byte("too-short\n"))
	write("two-lines.secret", []byte(good+"\n"+good+"\n"))

	const field = "services[0].session_affinity.cookie_secret_file: "
	tests := []struct {
		name, file, key string // key: the field (cookie_secret_file by default)
		wantErr         string // "" for a secret read
	}{
		{name: "a secret of its own", file: "good.secret"},
		{name: "a link to one", file: "link.secret"},
		{name: "the process's environment", file: "/proc/self/environ",
			wantErr: field + "/proc/self/environ is under /proc, which holds the kernel's files, not secrets"},
		{name: "a link to it", file: "environ.secret",
			wantErr: field + filepath.Join(dir, "environ.secret") + " is under /proc"},
		{name: "a previous secret from the kernel", file: "/sys/kernel/mm/transparent_hugepage/enabled", key: "previous_cookie_secret_file",
			wantErr: "services[0].session_affinity.previous_cookie_secret_file: /sys/kernel/mm/transparent_hugepage/enabled is under /sys"},
		{name: "a device", file: "/dev/stdin", wantErr: field + "/dev/stdin is under /dev"},
		{name: "a named pipe", file: "fifo.secret", wantErr: field + filepath.Join(dir, "fifo.secret") + " is not a regular file (p---------)"},
		{name: "a directory", file: "dir.secret", wantErr: field + filepath.Join(dir, "dir.secret") + " is not a regular file (d---------)"},
		{name: "over 4 KiB", file: "big.secret", wantErr: field + filepath.Join(dir, "big.secret") + " is larger than 4096 bytes"},
		{name: "binary content", file: "binary.secret",
			wantErr: field + filepath.Join(dir, "binary.secret") + " holds a byte that is not printable ASCII (at offset 32)"},
		{name: "two lines", file: "two-lines.secret",
			wantErr: field + filepath.Join(dir, "two-lines.secret") + " holds a byte that is not printable ASCII (at offset 41)"},
		{name: "too short", file: "short.secret", wantErr: field + filepath.Join(dir, "short.secret") + " holds 9 bytes, want at least 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "cookie_secret_file"
			if tt.key != "" {
				key = tt.key
			}
			aff := key + ": " + tt.file
			if key == "previous_cookie_secret_file" {
				aff = "cookie_secret: " + good + "-current, " + aff
			}
			cfg := write("config.yaml", []byte(affinityYAML(aff)))
			c, err := Load(cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Load = %v", err)
				}
				if got := c.Services[0].SessionAffinity.CookieSecret; got != good {
					t.Errorf("cookie_secret = %q, want the file's line", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Load = %v, want an error containing %q", err, tt.wantErr)
			}
			for _, leak := range []string{"PATH=", "xxxxxxxx", "too-short", good} {
				if strings.Contains(err.Error(), leak) {
					t.Errorf("the error shows the file's content (%q): %v", leak, err)
				}
			}
		})
	}
}
