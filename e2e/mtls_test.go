package e2e

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/testkit"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/topology"
)

// mtlsNet is the 127.N.0.0/16 of TestControlPlaneMutualTLSEndToEnd.
const mtlsNet = 57

// TestControlPlaneMutualTLSEndToEnd replays finding 2 of the first security
// review (SECURITY.md) on a deployment started as documented (mutual TLS on
// by default): an attacker on the network who dials the control plane without
// a certificate, or with a genuine certificate of an identity that is not a
// gfe, gets no snapshot (so neither the configuration nor its cookie secret),
// while the gfe serves. Then every certificate is rotated and the control
// plane restarted; the gfe, never restarted, reconnects with its new
// certificate and applies the next configuration.
func TestControlPlaneMutualTLSEndToEnd(t *testing.T) {
	spec := topology.Spec{
		Net:     mtlsNet,
		Regions: []topology.Region{{Name: "us-east", Zones: []string{"b"}, Instances: 2, Rate: 1000}},
		Sites:   []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": time.Millisecond}}},
	}
	c := startCluster(t, spec)
	if c.CA == nil {
		t.Fatal("the deployment runs without mutual TLS; it is on by default")
	}
	addr := c.CPAddrs[0]
	dial := func(creds credentials.TransportCredentials) error {
		_, err := testkit.FirstPush(t, addr, creds, 20*time.Second)
		return err
	}
	intruder, err := c.CA.IssueFiles(t.TempDir(), "intruder", devpki.Leaf{Names: []string{"intruder.spillway.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := mtls.ClientCredentials(mtls.ClientConfig{Files: mtls.Files(intruder)}, mtls.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(insecure.NewCredentials()); err == nil {
		t.Error("a client without credentials got a snapshot")
	}
	if err := dial(creds); err == nil {
		t.Error("a client with a genuine certificate of a non-gfe identity got a snapshot")
	}

	// Rotate every certificate in place, then restart the control plane
	// (which is how it picks up a new key at the latest; it also re-reads
	// them at each handshake). The gfe keeps running.
	gf := c.GFEs[0]
	for _, x := range []struct {
		base  string
		names []string
	}{
		{"cp-1", []string{c.Spec.ControlPlaneIP(0), "cp-1.cp.spillway.internal"}},
		{gf.Name, []string{gf.Name + topology.GFEIdentitySuffix}},
	} {
		if _, err := c.CA.IssueFiles(c.PKIDir, x.base, devpki.Leaf{CommonName: x.base, Names: x.names}); err != nil {
			t.Fatal(err)
		}
	}
	c.CPs[0].Stop(10 * time.Second)
	if err := c.StartControlPlane(0); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(c.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.ConfigPath, []byte(strings.ReplaceAll(string(b), "max_rate_per_instance: 1000", "max_rate_per_instance: 900")), 0o644); err != nil {
		t.Fatal(err)
	}
	err = topology.WaitFor(context.Background(), 60*time.Second, func() (bool, error) {
		st, err := topology.Status(context.Background(), gf)
		if err != nil {
			return false, err
		}
		for _, s := range st.Services {
			for _, g := range s.Groups {
				if g.DeclaredRPS == 2*900 {
					return true, nil
				}
			}
		}
		return false, errors.New("the gfe does not serve the edited configuration yet")
	})
	if err != nil {
		t.Fatalf("after rotating certificates and restarting the control plane: %v", err)
	}
	if out := gf.Proc.Output(); strings.Contains(out, "rejected snapshot") {
		t.Errorf("the gfe rejected a snapshot:\n%s", tail(out, 3000))
	}
}
