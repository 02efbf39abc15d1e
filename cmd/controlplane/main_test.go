package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/cpclient"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/internal/testkit"
)

const defaultTestTimeout = 30 * time.Second

// bins holds the controlplane binary, built once for the package.
var bins map[string]string

func TestMain(m *testing.M) { testkit.RunWithBinaries(m, &bins, "controlplane", "testbackend") }

// backend is a test HTTP server whose /healthz can be made to fail.
type backend struct {
	srv     *httptest.Server
	failing atomic.Bool
}

func newBackend(t *testing.T) *backend {
	b := &backend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && b.failing.Load() {
			http.Error(w, "failing on purpose", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) addr() string { return strings.TrimPrefix(b.srv.URL, "http://") }

func configYAML(a, b string, rate int) string {
	return fmt.Sprintf(`regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - name: g1
            instances:
              - address: %s
              - address: %s
services:
  - name: web
    backends:
      - group: g1
        max_rate_per_instance: %d
    health_check: {interval: 300ms, timeout: 250ms, jitter: 0, healthy_threshold: 1, unhealthy_threshold: 2}
routes:
  - service: web
`, a, b, rate)
}

// replaceFile saves content the way editors do: a new file renamed over the
// old one.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// logAddr waits for the JSON log line with message msg and returns its addr.
func logAddr(t *testing.T, p *proc.Proc, msg string) string {
	t.Helper()
	var addr string
	poll(t, "log line "+msg, func() bool {
		sc := bufio.NewScanner(strings.NewReader(p.Output()))
		for sc.Scan() {
			var l struct{ Message, Addr string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == msg && l.Addr != "" {
				addr = l.Addr
				return true
			}
		}
		return false
	})
	return addr
}

// poll checks cond every 10ms until it holds or the test times out; for
// conditions in another process, which has no way to notify us.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func get(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// startClient runs a gfe's control-plane client named node (site paris)
// against addr until the test ends.
func startClient(t *testing.T, ctx context.Context, addr, node string, tls mtls.ClientConfig) *cpclient.Client {
	t.Helper()
	cfg := cpclient.DefaultConfig()
	cfg.Addresses, cfg.Node, cfg.Site = []string{addr}, node, "paris"
	cfg.TLS = tls
	c, err := cpclient.New(cfg, cpclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cpclient Run() = %v", err)
		}
	})
	return c
}

// waitSnapshot waits until the client serves a snapshot for which cond holds.
func waitSnapshot(t *testing.T, c *cpclient.Client, what string, cond func(*snapshot.Snapshot) bool) *snapshot.Snapshot {
	t.Helper()
	timeout := time.After(defaultTestTimeout)
	for {
		if s := c.Current(); s != nil && cond(s) {
			return s
		}
		select {
		case <-c.Changes():
		case <-timeout:
			t.Fatalf("timed out waiting for a snapshot where %s (current %+v)", what, c.Current())
		}
	}
}

func rate(s *snapshot.Snapshot) float64 { return s.Config.Services[0].Backends[0].MaxRatePerInstance }

// TestEndToEnd builds the real binary, runs it on a config whose instances
// are real HTTP servers, and follows it with a gfe client over real gRPC
// through an invalid edit, a valid edit and a health check failure.
func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*defaultTestTimeout)
	defer cancel()
	b1, b2 := newBackend(t), newBackend(t)
	path := filepath.Join(dir, "cp.yaml")
	if err := os.WriteFile(path, []byte(configYAML(b1.addr(), b2.addr(), 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start("controlplane", bins["controlplane"], proc.Options{},
		"--config", path, "--node", "cp-e2e", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--gossip-addr", "127.0.0.1:0", "--log-format", "json",
		"--tls-ca", pki.cp.CA, "--tls-cert", pki.cp.Cert, "--tls-key", pki.cp.Key, "--tls-allowed-clients", "*.gfe.spillway.internal")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Stop(10 * time.Second); err != nil {
			t.Errorf("controlplane exit: %v\n%s", err, p.Output())
		}
		if t.Failed() {
			t.Logf("controlplane output:\n%s", p.Output())
		}
	}()
	grpcAddr := logAddr(t, p, "grpc listening")
	admin := "http://" + logAddr(t, p, "admin listening")
	if err := proc.WaitHTTP(ctx, admin+"/readyz"); err != nil {
		t.Fatal(err)
	}

	c := startClient(t, ctx, grpcAddr, "gfe-e2e", mtls.ClientConfig{Files: mtls.Files(pki.gfe)})

	s1 := waitSnapshot(t, c, "both instances healthy", func(s *snapshot.Snapshot) bool {
		return s.Healthy(b1.addr()) && s.Healthy(b2.addr())
	})
	if rate(s1) != 100 || s1.ControlPlane != "cp-e2e" {
		t.Fatalf("first snapshot %+v, want rate 100 from cp-e2e", s1)
	}

	// An invalid edit is rejected: the admin metrics count it, the version
	// served does not change.
	replaceFile(t, path, strings.Replace(configYAML(b1.addr(), b2.addr(), 100), "healthy_threshold: 1", "healthy_threshold: 0", 1))
	poll(t, "the reload failure in /metrics and a log line naming the field path", func() bool {
		return strings.Contains(get(admin+"/metrics"), `spillway_controlplane_config_reloads_total{result="failure"} 1`) &&
			strings.Contains(p.Output(), `"field":"services[0].health_check.healthy_threshold","problem":"must be in 1..100, got 0"`)
	})
	var status struct {
		ConfigVersion   string `json:"config_version"`
		SnapshotVersion string `json:"snapshot_version"`
	}
	if err := json.Unmarshal([]byte(get(admin+"/status")), &status); err != nil {
		t.Fatal(err)
	}
	if status.SnapshotVersion != s1.Version || !strings.HasPrefix(status.ConfigVersion, "1-") {
		t.Errorf("/status after the invalid edit = %+v, want snapshot %s and config version 1", status, s1.Version)
	}
	if cur := c.Current(); cur.Version != s1.Version {
		t.Errorf("gfe serves %s after the invalid edit, want %s", cur.Version, s1.Version)
	}

	// A valid edit arrives as a new version.
	replaceFile(t, path, configYAML(b1.addr(), b2.addr(), 50))
	s2 := waitSnapshot(t, c, "rate 50", func(s *snapshot.Snapshot) bool { return rate(s) == 50 })
	if s2.Version == s1.Version {
		t.Errorf("version %s did not change with the config", s2.Version)
	}

	// A failing /healthz flips the instance in a pushed snapshot, and back.
	b2.failing.Store(true)
	s3 := waitSnapshot(t, c, "b2 unhealthy", func(s *snapshot.Snapshot) bool { return !s.Healthy(b2.addr()) })
	if !s3.Healthy(b1.addr()) || !strings.Contains(s3.Health[b2.addr()].Detail, "503") {
		t.Errorf("snapshot %+v, want b1 healthy and b2's detail naming status 503", s3.Health)
	}
	b2.failing.Store(false)
	waitSnapshot(t, c, "b2 healthy again", func(s *snapshot.Snapshot) bool { return s.Healthy(b2.addr()) })

	// SIGHUP is harmless with an unchanged file.
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if m := get(admin + "/metrics"); !strings.Contains(m, `spillway_controlplane_config_reloads_total{result="success"} 2`) ||
		!strings.Contains(m, "spillway_controlplane_snapshot_acks_total") {
		t.Errorf("/metrics lacks 2 successful reloads or the ACK counter:\n%s", m)
	}
}
