package lease

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/gossip"
)

const (
	gossipTestTimeout = 30 * time.Second
	gossipTTL         = time.Second
	gossipRenew       = 200 * time.Millisecond
)

// replica is a control plane's gossip node and Elector.
type replica struct {
	name        string
	node        *gossip.Node
	elector     *Elector
	stopElector context.CancelFunc
	stopNode    context.CancelFunc
	electorDone chan struct{}
	nodeDone    chan struct{}
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
	e, err := New(Config{Self: name, TTL: gossipTTL, RenewEvery: gossipRenew},
		&GossipMedium{Node: node, Self: name, ChangesCh: node.Changes()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.SetNames(names)
	r := &replica{name: name, node: node, elector: e, electorDone: make(chan struct{}), nodeDone: make(chan struct{})}
	ectx, ecancel := context.WithCancel(context.Background())
	nctx, ncancel := context.WithCancel(context.Background())
	r.stopElector, r.stopNode = ecancel, ncancel
	go func() {
		defer close(r.nodeDone)
		if err := node.Run(nctx); err != nil {
			t.Errorf("%s: gossip Run: %v", name, err)
		}
	}()
	select {
	case <-node.Ready():
	case <-time.After(gossipTestTimeout):
		t.Fatalf("%s: gossip not ready after %v", name, gossipTestTimeout)
	}
	go func() {
		defer close(r.electorDone)
		if err := e.Run(ectx); err != nil {
			t.Errorf("%s: Elector.Run: %v", name, err)
		}
	}()
	t.Cleanup(r.shutdown)
	return r
}

// shutdown stops the Elector (which releases its leases), then the node,
// which carries the release before it leaves.
func (r *replica) shutdown() {
	r.stopElector()
	<-r.electorDone
	r.stopNode()
	<-r.nodeDone
}

// leave stops the node only: the others drop the replica from their views
// without having seen it release anything, as after a crash.
func (r *replica) leave() {
	r.stopNode()
	<-r.nodeDone
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

// TestGossipHolderGoneWithoutRelease: a holder drops out of gossip without
// releasing (its node stops, as in a crash); the other replica takes its
// leases, with term 2, but not before their claims lapse: TTL after the
// last renewal it saw, which is at most RenewEvery before the node
// stopped.
func TestGossipHolderGoneWithoutRelease(t *testing.T) {
	r0 := startReplica(t, "cp-0", nil, groupNames)
	r1 := startReplica(t, "cp-1", []string{r0.node.Addr()}, groupNames)
	waitHolders(t, []*replica{r0, r1}, candidates(t, []string{"cp-0", "cp-1"}, groupNames))
	orphans := r1.elector.Held()
	if len(orphans) == 0 {
		t.Fatal("cp-1 holds nothing; pick other names")
	}
	// The scenario: cp-0 has seen cp-1's claims (a claim nobody has seen
	// protects nothing; see the package doc).
	deadline := time.Now().Add(gossipTestTimeout)
	for !maps.Equal((&GossipMedium{Node: r0.node, Self: "cp-0"}).View().Claims["cp-1"], orphans) {
		if time.Now().After(deadline) {
			t.Fatalf("cp-0 never saw cp-1's claims %v", orphans)
		}
		time.Sleep(10 * time.Millisecond)
	}

	stopped := time.Now()
	r1.leave()
	all := map[string]string{}
	for _, l := range groupNames {
		all[l] = "cp-0"
	}
	waitHolders(t, []*replica{r0}, all)
	if took, earliest := time.Since(stopped), gossipTTL-gossipRenew; took < earliest {
		t.Errorf("cp-0 took cp-1's leases %v after cp-1 stopped, before the earliest lapse %v", took, earliest)
	}
	for _, l := range slices.Sorted(maps.Keys(orphans)) {
		if term, _ := r0.elector.Holds(l); term != 2 {
			t.Errorf("cp-0 took %s with term %d, want 2", l, term)
		}
	}
}
