package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/topology"
)

// gossipNet is the 127.N/16 of the gossip security test.
const gossipNet = 58

// TestGossipAuthenticatedAndKeyRotation runs the documented deployment (a
// control plane and three gfes, gossip keyed from a file) and checks finding
// 1 of the first security review (SECURITY.md) end to end: a member without
// the key cannot join; the key is rotated in the three steps of the security
// notes (install the new key, make it primary, remove the old one), each
// applied to every process by SIGHUP, without any member ever being dropped;
// afterwards a node with the new key joins and hears every member, and one
// with only the old key cannot join.
func TestGossipAuthenticatedAndKeyRotation(t *testing.T) {
	c := startCluster(t, threeSites(gossipNet))
	ctx, cancel := context.WithTimeout(context.Background(), 2*convergeTimeout)
	defer cancel()
	seed := fmt.Sprintf("127.%d.0.1:7946", gossipNet)
	members := []string{"cp-1", "gfe-lon-1", "gfe-nyc-1", "gfe-tokyo-1"}
	allSee := func(what string, want []string) {
		t.Helper()
		for _, gf := range c.GFEs {
			err := topology.WaitFor(ctx, convergeTimeout, func() (bool, error) {
				st, err := topology.Status(ctx, gf)
				if err != nil {
					return false, err
				}
				return slices.Equal(st.Members, want), nil
			})
			if err != nil {
				t.Fatalf("%s: %s does not see gossip members %v: %v", what, gf.Name, want, err)
			}
		}
	}
	allSee("start", members)

	oldKey, err := os.ReadFile(c.GossipKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	old := strings.TrimSpace(string(oldKey))
	mustNotJoin(t, "a node without key", seed, nil)

	newKey := randomKey(t)
	procs := map[string]*proc.Proc{"cp-1": c.CPs[0]}
	for _, gf := range c.GFEs {
		procs[gf.Name] = gf.Proc
	}
	for step, keys := range [][]string{{old, newKey}, {newKey, old}, {newKey}} {
		if err := os.WriteFile(c.GossipKeyFile, []byte(strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for name, p := range procs {
			if err := p.Signal(syscall.SIGHUP); err != nil {
				t.Fatalf("SIGHUP %s: %v", name, err)
			}
		}
		for name, p := range procs {
			err := topology.WaitFor(ctx, convergeTimeout, func() (bool, error) {
				return strings.Count(p.Output(), "gossip keyring reloaded") == step+1, nil
			})
			if err != nil {
				t.Fatalf("step %d: %s did not reload its keyring:\n%s", step+1, name, tail(p.Output(), 2000))
			}
		}
		allSee(fmt.Sprintf("after step %d", step+1), members)
	}

	// A node with only the new key hears every gfe's state published
	// after it joined, and every gfe sees it: the whole cluster speaks
	// the new key. Nobody was dropped before it came.
	for name, p := range procs {
		if n := strings.Count(p.Output(), "member left or failed"); n != 0 {
			t.Errorf("%s dropped %d members during the rotation", name, n)
		}
	}
	probe := startProbe(ctx, t, "probe-new-key", []string{newKey}, seed)
	joined := time.Now()
	err = topology.WaitFor(ctx, convergeTimeout, func() (bool, error) {
		snap := probe.Snapshot()
		for _, m := range members {
			s, ok := snap.States[m]
			// gfes publish every plan interval; the control plane only
			// when its health view changes (its state came with the join).
			if !ok || (s.Kind == gossip.KindGFE && time.Unix(0, int64(s.Version)).Before(joined)) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		snap := probe.Snapshot()
		var got []string
		for name, s := range snap.States {
			got = append(got, fmt.Sprintf("%s@%s", name, time.Unix(0, int64(s.Version)).Sub(joined)))
		}
		t.Errorf("a node with the new key did not get every gfe's new state: %v (members %v, states %v)", err, snap.Members, got)
	}
	allSee("with the probe", append(slices.Clone(members), "probe-new-key"))
	mustNotJoin(t, "a node with only the retired key", seed, []string{old})
}

func randomKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k)
}

// startProbe runs an in-process gossip node with keys that joins seed; it
// stops when the test ends.
func startProbe(ctx context.Context, t *testing.T, name string, keys []string, seed string) *gossip.Node {
	t.Helper()
	return startGossipNode(ctx, t, probeConfig(name, fmt.Sprintf("127.%d.200.1", gossipNet), keys, seed), gossip.Options{}, nil)
}

// probeConfig is the gossip configuration of an in-process node named name
// on addr (a kernel-picked port) with keys, joining seed.
func probeConfig(name, addr string, keys []string, seed string) gossip.Config {
	cfg := gossip.DefaultConfig()
	cfg.Name, cfg.BindAddr, cfg.BindPort, cfg.Keys = name, addr, 0, keys
	cfg.UDPBufferSize = 8192
	cfg.Seeds = []string{seed}
	return cfg
}

// startGossipNode runs an in-process gossip node with cfg and opts that
// publishes s first (when not nil), until the test ends, and returns it
// once it listens.
func startGossipNode(ctx context.Context, t *testing.T, cfg gossip.Config, opts gossip.Options, s *gossip.NodeState) *gossip.Node {
	t.Helper()
	n, err := gossip.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if s != nil {
		if _, err := n.Publish(*s); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", cfg.Name, err)
		}
	})
	<-n.Ready()
	return n
}

// mustNotJoin checks that a gossip node with keys (none: unencrypted)
// cannot join seed.
func mustNotJoin(t *testing.T, what, seed string, keys []string) {
	t.Helper()
	cfg := gossip.DefaultConfig()
	cfg.Name, cfg.BindPort, cfg.Keys = "intruder", 0, keys
	cfg.BindAddr = fmt.Sprintf("127.%d.200.2", gossipNet)
	cfg.UDPBufferSize = 8192
	n, err := gossip.New(cfg, gossip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}()
	<-n.Ready()
	if _, err := n.Join([]string{seed}); err == nil {
		t.Errorf("%s joined the cluster", what)
	}
	if got := n.Members(); got != 1 {
		t.Errorf("%s sees %d members, want only itself", what, got)
	}
}
