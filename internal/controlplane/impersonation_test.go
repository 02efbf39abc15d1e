package controlplane

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/autoscale/lease"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/mtls"
)

// replicaPKI issues certificates as deploy/mkcerts.sh does: CN = the node
// name, from one CA that every node's --tls-ca bundle holds.
type replicaPKI struct {
	t   *testing.T
	ca  *devpki.CA
	dir string
}

func newReplicaPKI(t *testing.T, name string) *replicaPKI {
	t.Helper()
	ca, err := devpki.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &replicaPKI{t: t, ca: ca, dir: t.TempDir()}
}

func (p *replicaPKI) files(name string) mtls.Files {
	p.t.Helper()
	f, err := p.ca.IssueFiles(p.dir, name, devpki.Leaf{CommonName: name, Names: []string{"127.0.0.1"}, ValidFor: time.Hour})
	if err != nil {
		p.t.Fatal(err)
	}
	return mtls.Files(f)
}

// seals returns the gossip Options of a member named name that seals with
// key's certificate (another node's, for a stolen key) and verifies
// against p's CA.
func (p *replicaPKI) seals(name, key string) gossip.Options {
	p.t.Helper()
	s, err := mtls.NewGossipSealer(p.files(key), key, zerolog.Nop())
	if err != nil {
		p.t.Fatal(err)
	}
	v, err := mtls.NewGossipVerifier(p.files(name).CA, zerolog.Nop())
	if err != nil {
		p.t.Fatal(err)
	}
	return gossip.Options{Sealer: s, Verifier: v}
}

// impersonatedFacts is what a replica that runs group auto publishes: its
// autoscaled instance at addr, the group's lease with term, and g00's
// instances down.
func impersonatedFacts(addr string, term uint64) gossip.NodeState {
	return gossip.NodeState{
		Kind: gossip.KindControlPlane,
		Groups: []gossip.GroupState{
			{Group: "g00", Region: "r1", Zone: "z-g00", Instances: 2},
			{Group: "auto", Region: "r2", Zone: "z-auto", Instances: 1, Healthy: 1, HealthyInstances: []string{addr}},
		},
		Leases:     map[string]uint64{"auto": term},
		Autoscaled: map[string][]gossip.AutoscaledInstance{"auto": {{Address: addr}}},
	}
}

// TestImpersonatedReplicaIsRefused replays the gossip-insider finding on a
// real replica: with --replicas cp-a,cp-b,cp-c and cp-c down, a gossip-key
// holder joins as cp-c and publishes an autoscaled instance at its own
// address, a lease on the group with a huge term and every instance of g00
// down. Once without a seal, once sealed with a compromised gfe's key, once
// sealed by another CA's certificate named cp-c. Meanwhile the real cp-b
// publishes its own instance and lease, sealed. cp-a serves cp-b's instance
// and not the impostor's, counts the impostor's refusals, shares health
// checks and leases with cp-b only (the lease view holds cp-b's claim, not
// the huge term) and serves g00 healthy by its own checks. Without seals
// cp-a served the impostor's instance (its checks passed) and saw cp-c
// claim the lease with term 2^64-2.
func TestImpersonatedReplicaIsRefused(t *testing.T) {
	const rogueAddr, realAddr = "127.0.0.1:6666", "127.0.0.1:7777"
	for _, tt := range []struct {
		name string
		opts func(p *replicaPKI) gossip.Options
	}{
		{"unsealed", func(*replicaPKI) gossip.Options { return gossip.Options{} }},
		{"sealed with a gfe's key", func(p *replicaPKI) gossip.Options { return p.seals("cp-c", "gfe-nyc-1") }},
		{"sealed by another CA as cp-c", func(*replicaPKI) gossip.Options { return newReplicaPKI(t, "attacker CA").seals("cp-c", "cp-c") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pki := newReplicaPKI(t, "cp test CA")
			clk := clock.NewFake(epoch)
			path := writeFile(t, t.TempDir(), "cp.yaml", autoscaledYAML)
			a := startDaemonWith(t, "cp-a", path, nil, clk, newWorld(), false, func(c *Config) {
				c.TLS = mtls.ServerConfig{Files: pki.files("cp-a"), AllowedClients: []string{"*"}}
			})
			startGossipMember(t, "cp-c", a.d.GossipAddr(), tt.opts(pki), impersonatedFacts(rogueAddr, math.MaxUint64-1))
			// The real cp-b: its verdicts on both groups (whichever it owns
			// of the checks), its instance and its lease.
			startGossipMember(t, "cp-b", a.d.GossipAddr(), pki.seals("cp-b", "cp-b"), gossip.NodeState{
				Kind: gossip.KindControlPlane,
				Groups: []gossip.GroupState{
					{Group: "g00", Region: "r1", Zone: "z-g00", Instances: 2, Healthy: 2, HealthyInstances: []string{"127.0.0.1:20000", "127.0.0.1:20001"}},
					{Group: "auto", Region: "r2", Zone: "z-auto", Instances: 1, Healthy: 1, HealthyInstances: []string{realAddr}},
				},
				Leases:     map[string]uint64{"auto": 2},
				Autoscaled: map[string][]gossip.AutoscaledInstance{"auto": {{Address: realAddr}}},
			})
			served := func(addr string) (in, healthy bool) {
				st, _ := a.d.State()
				if st == nil {
					return false, false
				}
				if ref, ok := st.Config.Config.Group("auto"); ok {
					for _, i := range ref.Group.Instances {
						in = in || i.Address == addr
					}
				}
				return in, statusOf(st, addr) == "healthy"
			}
			// Decided: cp-a refused the impostor's state or serves its
			// instance, next to cp-b's; then one of the two is checked
			// healthy.
			waitUntil(t, "the impostor refused or served, and cp-b's instance served", func() bool {
				real, _ := served(realAddr)
				in, _ := served(rogueAddr)
				var refused uint64
				for _, n := range a.d.node.Stats().Refused() {
					refused += n
				}
				return real && (refused > 0 || in)
			})
			advanceUntil(t, clk, 500*time.Millisecond, "an autoscaled instance and g00 decided", func() bool {
				_, real := served(realAddr)
				_, rogue := served(rogueAddr)
				st, _ := a.d.State()
				return (real || rogue) && statusOf(st, "127.0.0.1:20000") != "unknown" && statusOf(st, "127.0.0.1:20001") != "unknown"
			})
			if in, healthy := served(rogueAddr); in || healthy {
				t.Errorf("cp-a serves the impostor's instance %s (healthy %v), want it unknown", rogueAddr, healthy)
			}
			if _, healthy := served(realAddr); !healthy {
				t.Errorf("cp-b's instance %s is not healthy", realAddr)
			}
			if members, _ := a.d.Ownership(); !slices.Equal(members, []string{"cp-a", "cp-b"}) {
				t.Errorf("health checks shared among %v, want cp-a and cp-b", members)
			}
			st, _ := a.d.State()
			for _, ih := range st.Health {
				if ih.Group == "g00" && (ih.Status != "healthy" || ih.Source == "cp-c") {
					t.Errorf("g00 instance %s: %s by %q, want healthy, not by cp-c", ih.Address, ih.Status, ih.Source)
				}
			}
			medium := &lease.GossipMedium{Node: a.d.pub, Self: "cp-a", Replicas: a.d.health.replicas}
			if v := medium.View(); !slices.Equal(v.Members, []string{"cp-a", "cp-b"}) || len(v.Claims) != 1 || v.Claims["cp-b"]["auto"] != 2 {
				t.Errorf("lease view: members %v, claims %v; want cp-a and cp-b, cp-b's term 2 only", v.Members, v.Claims)
			}
		})
	}
}
