package lease

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/gossip"
)

const gossipTestTimeout = 30 * time.Second

// replica is a control plane's gossip node and Elector, running until
// stop.
type replica struct {
	name    string
	node    *gossip.Node
	elector *Elector
	stop    context.CancelFunc
	done    sync.WaitGroup
}

func startReplica(t *testing.T, name string, seeds []string, names []string) *replica {
	t.Helper()
	cfg := gossip.DefaultConfig()
	cfg.Name, cfg.BindPort, cfg.Seeds = name, 0, seeds
	cfg.JoinBackoffMin, cfg.JoinBackoffMax, cfg.LeaveTimeout = 20*time.Millisecond, 200*time.Millisecond, 500*time.Millisecond
	node, err := gossip.New(cfg, gossip.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Self: name, TTL: time.Second, RenewEvery: 200 * time.Millisecond},
		&GossipMedium{Node: node, Self: name, ChangesCh: node.Changes()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.SetNames(names)
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{name: name, node: node, elector: e, stop: cancel}
	nodeCtx, stopNode := context.WithCancel(context.Background())
	r.done.Add(2)
	electorDone := make(chan struct{})
	go func() {
		defer r.done.Done()
		defer close(electorDone)
		if err := e.Run(ctx); err != nil {
			t.Errorf("%s: Elector.Run: %v", name, err)
		}
	}()
	go func() {
		defer r.done.Done()
		go func() { <-electorDone; stopNode() }() // the node outlives the Elector, to carry its release
		if err := node.Run(nodeCtx); err != nil {
			t.Errorf("%s: gossip Run: %v", name, err)
		}
	}()
	select {
	case <-node.Ready():
	case <-time.After(gossipTestTimeout):
		t.Fatalf("%s: gossip not ready after %v", name, gossipTestTimeout)
	}
	t.Cleanup(r.shutdown)
	return r
}

func (r *replica) shutdown() {
	r.stop()
	r.done.Wait()
}

// waitHolders waits until the replicas' leases are exactly want (lease →
// holder), each held once, or fails at the deadline.
func waitHolders(t *testing.T, rs []*replica, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(gossipTestTimeout)
	for {
		es := map[string]*Elector{}
		for _, r := range rs {
			es[r.name] = r.elector
		}
		got := holders(es)
		if cmp.Equal(want, got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("holders after %v (-want +got):\n%s", gossipTestTimeout, cmp.Diff(want, got))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGossipTwoReplicas runs two Electors over real memberlist on
// loopback: the leases split between them as the candidates say, each
// held once with term 1; when one replica stops, the other takes its
// leases, with term 2, and holds them all.
func TestGossipTwoReplicas(t *testing.T) {
	r0 := startReplica(t, "cp-0", nil, groupNames)
	r1 := startReplica(t, "cp-1", []string{r0.node.Addr()}, groupNames)
	both := []*replica{r0, r1}

	waitHolders(t, both, candidates(t, []string{"cp-0", "cp-1"}, groupNames))
	for _, r := range both {
		for l, term := range r.elector.Held() {
			if term != 1 {
				t.Errorf("%s holds %s with term %d, want 1", r.name, l, term)
			}
		}
	}
	// What cp-1 publishes is what cp-0 sees as its claims.
	moved := r1.elector.Held()
	deadline := time.Now().Add(gossipTestTimeout)
	for !maps.Equal((&GossipMedium{Node: r0.node, Self: "cp-0"}).View().Claims["cp-1"], moved) {
		if time.Now().After(deadline) {
			t.Fatalf("cp-0 never saw cp-1's claims %v", moved)
		}
		time.Sleep(20 * time.Millisecond)
	}

	r1.shutdown() // releases, then leaves
	all := map[string]string{}
	for _, l := range groupNames {
		all[l] = "cp-0"
	}
	waitHolders(t, []*replica{r0}, all)
	for _, l := range slices.Sorted(maps.Keys(moved)) {
		if term, _ := r0.elector.Holds(l); term != 2 {
			t.Errorf("cp-0 took %s with term %d, want 2", l, term)
		}
	}
}
