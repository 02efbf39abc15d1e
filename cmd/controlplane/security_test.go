package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/testkit"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/proc"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// testPKI is a throwaway CA with the control plane's and a gfe's files.
type testPKI struct {
	ca      *devpki.CA
	dir     string
	cp, gfe devpki.Files
}

func newTestPKI(t *testing.T, dir string) *testPKI {
	t.Helper()
	ca, err := devpki.NewCA("controlplane test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{ca: ca, dir: dir}
	p.cp = p.issue(t, "cp", "127.0.0.1", "cp.spillway.internal")
	p.gfe = p.issue(t, "gfe", "paris-1.gfe.spillway.internal")
	return p
}

func (p *testPKI) issue(t *testing.T, base string, names ...string) devpki.Files {
	t.Helper()
	f, err := p.ca.IssueFiles(p.dir, base, devpki.Leaf{CommonName: base, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func clientCreds(t *testing.T, f devpki.Files) credentials.TransportCredentials {
	t.Helper()
	c, err := mtls.ClientCredentials(mtls.ClientConfig{Files: mtls.Files(f)}, mtls.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// firstPush is testkit.FirstPush within the package's test timeout.
func firstPush(t *testing.T, addr string, creds credentials.TransportCredentials) (*pb.Snapshot, error) {
	return testkit.FirstPush(t, addr, creds, defaultTestTimeout)
}

const secret = "issue-10-the-cookie-secret-0123456789abcdef"

// startTLS starts the real control plane with mutual TLS on a config
// whose service signs affinity cookies with secret, and returns it with
// its gRPC and admin addresses.
func startTLS(t *testing.T, p *testPKI, extra ...string) (*proc.Proc, string, string) {
	t.Helper()
	b1, b2 := newBackend(t), newBackend(t)
	yaml := strings.Replace(configYAML(b1.addr(), b2.addr(), 100), "    health_check:",
		"    session_affinity: {type: generated_cookie, cookie_name: sw, cookie_secret: "+secret+"}\n    health_check:", 1)
	path := filepath.Join(p.dir, "cp.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--config", path, "--node", "cp-sec", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--gossip-addr", "127.0.0.1:0", "--log-format", "json",
		"--tls-ca", p.cp.CA, "--tls-cert", p.cp.Cert, "--tls-key", p.cp.Key, "--tls-allowed-clients", "*.gfe.spillway.internal"}, extra...)
	cp, err := proc.Start("controlplane", bins["controlplane"], proc.Options{}, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(10 * time.Second); err != nil {
			t.Errorf("controlplane exit: %v", err)
		}
		if t.Failed() {
			t.Logf("controlplane output:\n%s", cp.Output())
		}
	})
	grpcAddr := logAddr(t, cp, "grpc listening")
	admin := "http://" + logAddr(t, cp, "admin listening")
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := proc.WaitHTTP(ctx, admin+"/readyz"); err != nil {
		t.Fatal(err)
	}
	return cp, grpcAddr, admin
}

// TestAttackerGetsNoConfig replays finding 2 of the first security review
// (SECURITY.md) against the real binary: dialling the control plane without
// credentials returned the whole configuration with
// session_affinity.cookie_secret. Now a client without a certificate, with
// one from another CA, or with a valid one of an identity not allowed is
// refused; the allowed gfe gets the secret. (That a cookie signed without the
// secret is ignored is checked by lb/affinity TestCookieIgnored and e2e
// TestSessionAffinityEndToEnd.) Then every certificate is replaced under the
// running daemon: the open stream keeps receiving pushes and new connections
// succeed, with no restart.
func TestAttackerGetsNoConfig(t *testing.T) {
	p := newTestPKI(t, t.TempDir())
	_, addr, admin := startTLS(t, p)

	other, err := devpki.NewCA("attacker CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.IssueFiles(t.TempDir(), "forged", devpki.Leaf{Names: []string{"paris-1.gfe.spillway.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	forged.CA = p.cp.CA
	tests := []struct {
		name  string
		creds credentials.TransportCredentials
		ok    bool
	}{
		{"no credentials, as in the finding", insecure.NewCredentials(), false},
		{"certificate from another CA", clientCreds(t, forged), false},
		{"valid certificate of a disallowed identity", clientCreds(t, p.issue(t, "intruder", "intruder.spillway.internal")), false},
		{"allowed gfe", clientCreds(t, p.gfe), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := firstPush(t, addr, tt.creds)
			switch {
			case !tt.ok && err == nil:
				t.Fatalf("got a snapshot with %d bytes of config, want the connection refused", len(m.GetConfigYaml()))
			case tt.ok && err != nil:
				t.Fatal(err)
			case tt.ok && !strings.Contains(string(m.GetConfigYaml()), secret):
				t.Errorf("the allowed gfe's snapshot lacks the cookie secret")
			}
		})
	}
	for _, page := range []string{"/status", "/metrics", "/debug/pprof/cmdline"} {
		if body := get(admin + page); strings.Contains(body, secret) || strings.Contains(body, p.cp.Key) {
			t.Errorf("admin %s shows a secret", page)
		}
	}
	resp, err := http.Get(admin + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/debug/pprof/cmdline without --pprof = %d, want 404", resp.StatusCode)
	}
}

// TestRotationUnderLiveDaemon replaces the control plane's and the gfe's
// certificates while a snapshot stream is open: the stream stays up and
// gets the next push, and a new connection succeeds with the new
// certificates.
func TestRotationUnderLiveDaemon(t *testing.T) {
	p := newTestPKI(t, t.TempDir())
	cp, addr, _ := startTLS(t, p)
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(clientCreds(t, p.gfe)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	stream, err := pb.NewControlPlaneClient(cc).StreamSnapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.SnapshotRequest{Node: &pb.Node{Id: "gfe-live", Site: "paris"}}); err != nil {
		t.Fatal(err)
	}
	m1, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.SnapshotRequest{VersionInfo: m1.GetVersion(), ResponseNonce: m1.GetNonce()}); err != nil {
		t.Fatal(err)
	}

	// Rotate: new leaves for both sides, written over the old files.
	p.issue(t, "cp", "127.0.0.1", "cp.spillway.internal")
	p.issue(t, "gfe", "paris-1.gfe.spillway.internal")
	if m, err := firstPush(t, addr, clientCreds(t, p.gfe)); err != nil || !strings.Contains(string(m.GetConfigYaml()), secret) {
		t.Fatalf("a new connection after rotation: %v", err)
	}
	// The open stream still works: a config change is pushed on it.
	path := filepath.Join(p.dir, "cp.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, path, strings.Replace(string(b), "max_rate_per_instance: 100", "max_rate_per_instance: 60", 1))
	m2, err := stream.Recv()
	if err != nil || m2.GetVersion() == m1.GetVersion() || !strings.Contains(string(m2.GetConfigYaml()), "max_rate_per_instance: 60") {
		t.Fatalf("the stream opened before rotation: %v, %v; want the push of the new config", m2.GetVersion(), err)
	}
	if strings.Contains(cp.Output(), `"level":"error"`) {
		t.Errorf("errors logged during rotation:\n%s", cp.Output())
	}
}

// TestRefusesToStartWithoutTLS: without TLS flags and without
// --insecure-plaintext the control plane exits with a clear error; with
// --insecure-plaintext it starts and says loudly that it is insecure.
func TestRefusesToStartWithoutTLS(t *testing.T) {
	dir := t.TempDir()
	b1, b2 := newBackend(t), newBackend(t)
	path := filepath.Join(dir, "cp.yaml")
	if err := os.WriteFile(path, []byte(configYAML(b1.addr(), b2.addr(), 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--config", path, "--node", "cp-x", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--log-format", "json"}
	p, err := proc.Start("controlplane", bins["controlplane"], proc.Options{}, base...)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(defaultTestTimeout):
		p.Kill()
		t.Fatal("the control plane did not exit without TLS flags")
	}
	if p.Err() == nil || !strings.Contains(p.Output(), "no transport security configured") || !strings.Contains(p.Output(), "--insecure-plaintext") {
		t.Errorf("exit %v, output:\n%s\nwant a failure naming the TLS flags and --insecure-plaintext", p.Err(), p.Output())
	}

	p, err = proc.Start("controlplane", bins["controlplane"], proc.Options{}, append(base, "--insecure-plaintext")...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(10 * time.Second)
	logAddr(t, p, "grpc listening")
	if !strings.Contains(p.Output(), "INSECURE: --insecure-plaintext") {
		t.Errorf("no warning about plain text in:\n%s", p.Output())
	}
}
