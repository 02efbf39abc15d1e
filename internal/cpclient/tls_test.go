package cpclient

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/clock"
)

// TestSnapshotsOnlyFromAuthenticatedControlPlane reproduces the last part of
// finding 2 of the first security review, SECURITY.md (gfes apply snapshots
// from whoever answers): an impostor at the control plane's address — in
// clear text, with a certificate from another CA, or with a genuine
// certificate issued to another name — never gets a request, let alone a
// snapshot applied; the genuine control plane's push is applied.
func TestSnapshotsOnlyFromAuthenticatedControlPlane(t *testing.T) {
	dir := t.TempDir()
	ca, err := devpki.NewCA("spillway test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	evil, err := devpki.NewCA("attacker CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *devpki.CA, base string, names ...string) mtls.Files {
		f, err := ca.IssueFiles(dir, base, devpki.Leaf{CommonName: base, Names: names})
		if err != nil {
			t.Fatal(err)
		}
		return mtls.Files(f)
	}
	gfe := issue(ca, "gfe", "gfe-1.gfe.spillway.internal")
	serverOpt := func(f mtls.Files) grpc.ServerOption {
		creds, err := mtls.ServerCredentials(mtls.ServerConfig{Files: f, AllowedClients: []string{"*"}}, mtls.Options{Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		return grpc.Creds(creds)
	}
	// Issue every file before any server reads the shared ca.crt.
	genuine := issue(ca, "cp", "cp-a")
	otherName := issue(ca, "cp-b", "cp-b")
	forged := issue(evil, "forged", "cp-a")
	forged.CA = gfe.CA // written by the evil CA: restore the real bundle's path and content
	if _, err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}

	impostors := []struct {
		name string
		opts []grpc.ServerOption
	}{
		{"plain text", nil},
		{"certificate from another CA", []grpc.ServerOption{serverOpt(forged)}},
		{"genuine certificate of another name", []grpc.ServerOption{serverOpt(otherName)}},
	}
	for _, tt := range impostors {
		t.Run(tt.name, func(t *testing.T) {
			n := newNetwork(t)
			f, stop := n.serve("cp-a", tt.opts...)
			defer stop()
			c := startClientTLS(t, n, clock.Real{}, mtls.ClientConfig{Files: gfe}, nil, "cp-a")
			deadline := time.Now().Add(defaultTestTimeout)
			for c.Status().Failures < 2 {
				if time.Now().After(deadline) {
					t.Fatalf("the client did not try twice: %+v", c.Status())
				}
				time.Sleep(10 * time.Millisecond) // another goroutine's dial attempts; nothing to wait on
			}
			select {
			case r := <-f.reqs:
				t.Fatalf("the impostor received %v", r)
			default:
			}
			if st := c.Status(); c.Current() != nil || st.Connects != 0 {
				t.Errorf("client status %+v with snapshot %v, want no stream and no snapshot", st, c.Current())
			}
		})
	}

	t.Run("genuine control plane", func(t *testing.T) {
		n := newNetwork(t)
		f, stop := n.serve("cp-a", serverOpt(genuine))
		defer stop()
		c := startClientTLS(t, n, clock.Real{}, mtls.ClientConfig{Files: gfe}, func(*snapshot.Snapshot) error { return nil }, "cp-a")
		next(t, f)
		send(t, f, push("v1", "1", 100, true))
		wantAck(t, next(t, f), "v1", "1")
		if cur := c.Current(); cur == nil || cur.Version != "v1" {
			t.Errorf("Current() = %v, want v1", cur)
		}
	})
}
