package gossip

// Tests over real memberlist on 127.0.0.1 (UDP and TCP, ports picked by the
// kernel). They wait on Node.Changes with a deadline, never sleep, and
// measure with the real clock: memberlist's timers are real, so these tests
// are about real timing.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

const defaultTestTimeout = 20 * time.Second

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// memberlist.Shutdown stops the probe ticker but does not wait
		// for a probe in flight: probeNode returns on its own once the
		// ack wait (up to ProbeInterval) and the TCP fallback ping (up
		// to TCPTimeout) end, seconds after Run returned. Every other
		// memberlist goroutine (listeners, handlers, tickers) is still
		// checked, so a Node that is never shut down is still caught.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
	)
}

// testConfig is DefaultConfig on a kernel-picked loopback port, with fast
// join retries and a short leave so that tests stop quickly.
func testConfig(name string) Config {
	c := DefaultConfig()
	c.Name = name
	c.BindPort = 0
	c.JoinBackoffMin = 20 * time.Millisecond
	c.JoinBackoffMax = 200 * time.Millisecond
	c.LeaveTimeout = 500 * time.Millisecond
	return c
}

// testLogger sends logs at warn and above to the test log, so a failing
// test shows what memberlist complained about. Logs written after the test
// ends (memberlist's goroutines wind down after Run returns) are dropped.
func testLogger(t testing.TB) zerolog.Logger {
	w := &testLogWriter{t: t}
	t.Cleanup(w.close)
	return zerolog.New(w).Level(zerolog.WarnLevel)
}

type testLogWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testLogWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}

// cluster runs nodes until the test ends.
type cluster struct {
	t     testing.TB
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	mu    sync.Mutex
	nodes []*Node
}

func newCluster(t testing.TB) *cluster {
	ctx, cancel := context.WithCancel(context.Background())
	c := &cluster{t: t, ctx: ctx, stop: cancel}
	t.Cleanup(c.shutdown)
	return c
}

// start creates a node from cfg, lets setup adjust it before Run (hooks,
// Publish), runs it and waits until it listens.
func (c *cluster) start(cfg Config, setup func(*Node)) *Node {
	c.t.Helper()
	return c.startOpts(cfg, Options{Logger: testLogger(c.t)}, setup)
}

// startOpts is start with the Node's Options.
func (c *cluster) startOpts(cfg Config, opts Options, setup func(*Node)) *Node {
	c.t.Helper()
	n, err := New(cfg, opts)
	if err != nil {
		c.t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	if setup != nil {
		setup(n)
	}
	runErr := make(chan error, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		err := n.Run(c.ctx)
		runErr <- err
		if err != nil {
			c.t.Errorf("Run(%s) = %v", cfg.Name, err)
		}
	}()
	select {
	case <-n.Ready():
	case err := <-runErr:
		c.t.Fatalf("Run(%s) returned before Ready: %v", cfg.Name, err)
	case <-time.After(defaultTestTimeout):
		c.t.Fatalf("Run(%s): not ready after %v", cfg.Name, defaultTestTimeout)
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n
}

// shutdown stops every node (they leave concurrently) and waits for Run.
func (c *cluster) shutdown() {
	c.stop()
	c.wg.Wait()
}

// waitFor blocks until cond holds on n's view, or fails the test at the
// deadline of ctx.
func waitFor(ctx context.Context, t testing.TB, n *Node, what string, cond func(*Snapshot) bool) {
	t.Helper()
	waitForOr(ctx, t, n, what, cond, func() string { return "" })
}

// waitForOr is waitFor that adds more(), evaluated at the deadline, to its
// failure message.
func waitForOr(ctx context.Context, t testing.TB, n *Node, what string, cond func(*Snapshot) bool, more func() string) {
	t.Helper()
	for {
		snap := n.Snapshot()
		if cond(snap) {
			return
		}
		select {
		case <-n.Changes():
		case <-ctx.Done():
			t.Fatalf("%s: no %s before the deadline; view: members %v, states of %v %s",
				n.cfg.Name, what, snap.Members, slices.Sorted(mapKeys(snap.States)), more())
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func hasAll(names []string) func(*Snapshot) bool {
	return func(s *Snapshot) bool {
		if len(s.Members) != len(names) || len(s.States) != len(names) {
			return false
		}
		for _, n := range names {
			if _, ok := s.States[n]; !ok {
				return false
			}
		}
		return true
	}
}

func hasVersion(node string, v uint64) func(*Snapshot) bool {
	return func(s *Snapshot) bool { return s.States[node].Version >= v }
}

func gfeFor(name string, demand float64) NodeState {
	return NodeState{
		Kind:   KindGFE,
		Site:   "site-" + name,
		Demand: map[string]float64{"web": demand},
		RTT:    map[string]float64{"eu-west": 5, "us-east": 80},
	}
}

// cpWithHealthy is a control plane's state whose first group has healthy
// healthy instances: the value tests change to follow a state around.
func cpWithHealthy(healthy int) NodeState {
	return NodeState{
		Kind: KindControlPlane,
		Groups: []GroupState{
			{Group: "eu-west-b", Region: "eu-west", Zone: "b", Instances: 100000, Healthy: healthy},
			{Group: "us-east-b", Region: "us-east", Zone: "b", Instances: 4, Healthy: 3},
		},
	}
}

func mustPublish(t testing.TB, n *Node, s NodeState) uint64 {
	t.Helper()
	v, err := n.Publish(s)
	if err != nil {
		t.Fatalf("Publish(%s): %v", n.cfg.Name, err)
	}
	return v
}

// TestThreeNodes: every node sees every state; a newer version replaces the
// older everywhere; a stale broadcast is ignored.
func TestThreeNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	c := newCluster(t)
	staleSeen := make(chan NodeState, 16)

	n0 := c.start(testConfig("n0"), nil)
	mustPublish(t, n0, cpWithHealthy(100))
	n1 := c.start(withSeeds(testConfig("n1"), n0.Addr()), func(n *Node) { mustPublish(t, n, gfeFor("n1", 10)) })
	n2 := c.start(withSeeds(testConfig("n2"), n0.Addr()), func(n *Node) {
		mustPublish(t, n, gfeFor("n2", 20))
		n.onVerdict = func(s NodeState, v verdict) {
			if v == verdictStale && s.Node == "n0" {
				staleSeen <- s
			}
		}
	})
	nodes := []*Node{n0, n1, n2}
	names := []string{"n0", "n1", "n2"}
	for _, n := range nodes {
		waitFor(ctx, t, n, "all three states", hasAll(names))
	}
	// Everyone holds exactly what each publisher holds for itself.
	want := map[string]NodeState{}
	for _, n := range nodes {
		want[n.cfg.Name] = n.Snapshot().States[n.cfg.Name]
	}
	for _, n := range nodes {
		if diff := cmp.Diff(want, n.States()); diff != "" {
			t.Errorf("%s: States() (-want +got):\n%s", n.cfg.Name, diff)
		}
	}

	// A newer version replaces the older on every node.
	old := n0.Snapshot().States["n0"]
	v2 := mustPublish(t, n0, cpWithHealthy(250))
	for _, n := range nodes {
		waitFor(ctx, t, n, "n0's second state", hasVersion("n0", v2))
		if got := n.Snapshot().States["n0"].Groups[0].Healthy; got != 250 {
			t.Errorf("%s: n0 capacity = %v, want 250", n.cfg.Name, got)
		}
	}

	// A stale broadcast (n0's first state, sent again by n1 to n2) is
	// ignored.
	target, ok := n1.member("n2")
	if !ok {
		t.Fatal("n1 does not know n2")
	}
	if err := n1.ml.Load().SendReliable(&target, gossipMsg(t, old)); err != nil {
		t.Fatalf("SendReliable: %v", err)
	}
	select {
	case s := <-staleSeen:
		if s.Version != old.Version {
			t.Errorf("stale broadcast version = %d, want %d", s.Version, old.Version)
		}
	case <-ctx.Done():
		t.Fatal("n2 never classified the stale broadcast")
	}
	if got := n2.Snapshot().States["n0"].Version; got != v2 {
		t.Errorf("after a stale broadcast, n2 holds n0 version %d, want %d", got, v2)
	}
}

func withSeeds(c Config, seeds ...string) Config {
	c.Seeds = seeds
	return c
}

// TestLateJoinerGetsAllStates: the push/pull of Join carries every state, so
// they are all visible when Join returns, without waiting for gossip.
func TestLateJoinerGetsAllStates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	c := newCluster(t)
	n0 := c.start(testConfig("n0"), func(n *Node) { mustPublish(t, n, cpWithHealthy(100)) })
	n1 := c.start(withSeeds(testConfig("n1"), n0.Addr()), func(n *Node) { mustPublish(t, n, gfeFor("n1", 10)) })
	n2 := c.start(withSeeds(testConfig("n2"), n0.Addr()), func(n *Node) { mustPublish(t, n, gfeFor("n2", 20)) })
	for _, n := range []*Node{n0, n1, n2} {
		waitFor(ctx, t, n, "all three states", hasAll([]string{"n0", "n1", "n2"}))
	}

	late := c.start(testConfig("late"), func(n *Node) { mustPublish(t, n, gfeFor("late", 1)) })
	if k, err := late.Join([]string{n2.Addr()}); err != nil || k != 1 {
		t.Fatalf("Join = %d, %v; want 1, nil", k, err)
	}
	got := late.States()
	for _, n := range []*Node{n0, n1, n2} {
		want := n.Snapshot().States[n.cfg.Name]
		if diff := cmp.Diff(want, got[n.cfg.Name]); diff != "" {
			t.Errorf("right after Join, late's state of %s (-want +got):\n%s", n.cfg.Name, diff)
		}
	}
	if got := late.Members(); got != 4 {
		t.Errorf("right after Join, late.Members() = %d, want 4", got)
	}
}

// TestCrashedNodeDropped: a node that stops without leaving is declared dead
// by failure detection, and its state disappears from the others' views.
func TestCrashedNodeDropped(t *testing.T) {
	const bound = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	c := newCluster(t)
	n0 := c.start(testConfig("n0"), func(n *Node) { mustPublish(t, n, cpWithHealthy(100)) })
	n1 := c.start(withSeeds(testConfig("n1"), n0.Addr()), func(n *Node) { mustPublish(t, n, gfeFor("n1", 10)) })
	n2 := c.start(withSeeds(testConfig("n2"), n0.Addr()), func(n *Node) { mustPublish(t, n, gfeFor("n2", 20)) })
	for _, n := range []*Node{n0, n1, n2} {
		waitFor(ctx, t, n, "all three states", hasAll([]string{"n0", "n1", "n2"}))
	}

	start := time.Now()
	n2.simulateCrash()
	for _, n := range []*Node{n0, n1} {
		waitFor(ctx, t, n, "n2 dropped", func(s *Snapshot) bool {
			_, has := s.States["n2"]
			return !has && len(s.Members) == 2
		})
	}
	took := time.Since(start)
	t.Logf("crashed node dropped by both survivors after %v (ProbeInterval %v, SuspicionMult %d)",
		took.Round(time.Millisecond), n0.cfg.ProbeInterval, n0.cfg.SuspicionMult)
	if took > bound {
		t.Errorf("crash detection took %v, want <= %v", took, bound)
	}
	for _, n := range []*Node{n0, n1} {
		if diff := cmp.Diff([]string{"n0", "n1"}, slices.Sorted(mapKeys(n.States()))); diff != "" {
			t.Errorf("%s: states after the crash (-want +got):\n%s", n.cfg.Name, diff)
		}
	}
}

// TestGracefulLeaveDropsAtOnce: a node that stops through Run's ctx leaves,
// and the others drop it without waiting for failure detection.
func TestGracefulLeaveDropsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	c := newCluster(t)
	n0 := c.start(testConfig("n0"), func(n *Node) { mustPublish(t, n, cpWithHealthy(100)) })

	n1, err := New(withSeeds(testConfig("n1"), n0.Addr()), Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	mustPublish(t, n1, gfeFor("n1", 10))
	runCtx, stopN1 := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n1.Run(runCtx) }()
	waitFor(ctx, t, n0, "n1's state", hasAll([]string{"n0", "n1"}))

	start := time.Now()
	stopN1()
	if err := <-done; err != nil {
		t.Fatalf("Run(n1) = %v", err)
	}
	waitFor(ctx, t, n0, "n1 gone", hasAll([]string{"n0"}))
	// Failure detection alone would take at least the suspicion timeout.
	if took, limit := time.Since(start), 1500*time.Millisecond; took > limit {
		t.Errorf("graceful leave noticed after %v, want <= %v", took, limit)
	}
	if err := n1.Run(ctx); !errors.Is(err, ErrAlreadyStarted) {
		t.Errorf("second Run = %v, want ErrAlreadyStarted", err)
	}
}

func TestEncryption(t *testing.T) {
	const (
		keyA = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // 32 bytes
		keyB = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=" // 32 other bytes
		key6 = "MDEyMzQ1Njc4OWFiY2RlZg=="                     // 16 bytes
	)
	tests := []struct {
		name       string
		key0, key1 string
		wantJoin   bool
	}{
		{name: "same 32-byte key", key0: keyA, key1: keyA, wantJoin: true},
		{name: "same 16-byte key", key0: key6, key1: key6, wantJoin: true},
		{name: "different keys", key0: keyA, key1: keyB, wantJoin: false},
		{name: "joiner without key", key0: keyA, key1: "", wantJoin: false},
		{name: "joiner with key, cluster without", key0: "", key1: keyA, wantJoin: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
			defer cancel()
			c := newCluster(t)
			cfg0, cfg1 := testConfig("n0"), testConfig("n1")
			cfg0.SecretKey, cfg1.SecretKey = tt.key0, tt.key1
			n0 := c.start(cfg0, func(n *Node) { mustPublish(t, n, cpWithHealthy(100)) })
			n1 := c.start(cfg1, func(n *Node) { mustPublish(t, n, gfeFor("n1", 10)) })

			_, err := n1.Join([]string{n0.Addr()})
			if gotJoin := err == nil; gotJoin != tt.wantJoin {
				t.Fatalf("Join error = %v, want join to succeed: %v", err, tt.wantJoin)
			}
			if !tt.wantJoin {
				for _, n := range []*Node{n0, n1} {
					if got := n.Members(); got != 1 {
						t.Errorf("%s: Members() = %d after a rejected join, want 1", n.cfg.Name, got)
					}
					if got := len(n.States()); got != 1 {
						t.Errorf("%s: %d states after a rejected join, want 1 (its own)", n.cfg.Name, got)
					}
				}
				return
			}
			for _, n := range []*Node{n0, n1} {
				waitFor(ctx, t, n, "both states", hasAll([]string{"n0", "n1"}))
			}
			// And a later change still gets through, encrypted.
			v := mustPublish(t, n0, cpWithHealthy(200))
			waitFor(ctx, t, n1, "n0's new state", hasVersion("n0", v))
		})
	}
}

// TestJoinRetriesUntilSeedIsUp: Run keeps retrying the seeds with backoff,
// so start order does not matter.
func TestJoinRetriesUntilSeedIsUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	port := freePort(t)
	c := newCluster(t)
	joiner := c.start(withSeeds(testConfig("joiner"), net.JoinHostPort("127.0.0.1", strconv.Itoa(port))),
		func(n *Node) { mustPublish(t, n, gfeFor("joiner", 1)) })

	seedCfg := testConfig("seed")
	seedCfg.BindPort = port
	seed := c.start(seedCfg, func(n *Node) { mustPublish(t, n, cpWithHealthy(100)) })
	for _, n := range []*Node{joiner, seed} {
		waitFor(ctx, t, n, "both states", hasAll([]string{"joiner", "seed"}))
	}
}

func TestRunFailsOnTakenPort(t *testing.T) {
	c := newCluster(t)
	n0 := c.start(testConfig("n0"), nil)
	_, portStr, _ := net.SplitHostPort(n0.Addr())
	cfg := testConfig("n1")
	cfg.BindPort, _ = strconv.Atoi(portStr)
	n1, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := n1.Run(context.Background()); err == nil {
		t.Fatalf("Run on a taken port = nil, want an error")
	}
	if _, err := n1.Join([]string{n0.Addr()}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Join on a node that failed to start = %v, want ErrNotRunning", err)
	}
}

// freePort returns a port that was free on 127.0.0.1 for both TCP and UDP.
func freePort(t testing.TB) int {
	t.Helper()
	for range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatal("no free TCP+UDP port")
	return 0
}

// TestMembershipRepair: a node whose state reaches a member before the
// member learns of it (here: a node outside the cluster sends its state
// straight to one member) is joined through the address in its state.
func TestMembershipRepair(t *testing.T) {
	// outsider joined no one, so no push/pull ever reaches it: only repair
	// can close the gap. The deadline is generous (a loaded machine may
	// fail a join or two, which repair retries); how fast it closes is
	// logged, not asserted.
	ctx, cancel := context.WithTimeout(context.Background(), 3*defaultTestTimeout)
	defer cancel()
	c := newCluster(t)
	a := c.start(testConfig("a"), func(n *Node) { mustPublish(t, n, cpWithHealthy(100)) })
	b := c.start(withSeeds(testConfig("b"), a.Addr()), func(n *Node) { mustPublish(t, n, gfeFor("b", 1)) })
	waitFor(ctx, t, b, "a and b", hasAll([]string{"a", "b"}))
	outsider := c.start(testConfig("outsider"), func(n *Node) { mustPublish(t, n, gfeFor("outsider", 2)) })

	host, portStr, err := net.SplitHostPort(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portStr)
	start := time.Now()
	to := memberlist.Node{Name: "a", Addr: net.ParseIP(host), Port: uint16(port)}
	if err := outsider.ml.Load().SendReliable(&to, directMsg(t, outsider.Snapshot().States["outsider"])); err != nil {
		t.Fatalf("SendReliable: %v", err)
	}
	all := []string{"a", "b", "outsider"}
	for _, n := range []*Node{a, b, outsider} {
		if ctx.Err() == nil {
			waitForOr(ctx, t, n, "all three states", hasAll(all), func() string {
				return fmt.Sprintf("a's stats %+v, a holds outsider's state: %v", a.Stats(), a.holds("outsider"))
			})
		}
	}
	took := time.Since(start)
	st := a.Stats()
	t.Logf("membership gap closed and states everywhere after %v (repair every %v; a: %d repairs, %d failed joins)",
		took.Round(time.Millisecond), a.repairEvery(), st.Repairs, st.RepairErrors)
	if st.Repairs < 1 {
		t.Errorf("a made %d repairs, want at least 1 (it held outsider's state without the membership)", st.Repairs)
	}
}

// TestMembershipRepairRetriesFailedJoins: a state whose node cannot be
// joined (its address refuses connections) is not given up after one try:
// every repair round joins it again until it answers or its state is
// pruned.
func TestMembershipRepairRetriesFailedJoins(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*defaultTestTimeout)
	defer cancel()
	c := newCluster(t)
	a := c.start(testConfig("a"), func(n *Node) { mustPublish(t, n, cpWithHealthy(100)) })
	outsider := c.start(testConfig("outsider"), func(n *Node) { mustPublish(t, n, gfeFor("outsider", 2)) })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there any more: joins are refused
	ghost := gfeFor("ghost", 3)
	ghost.Node, ghost.Addr, ghost.Version = "ghost", dead, 1

	host, portStr, err := net.SplitHostPort(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portStr)
	to := memberlist.Node{Name: "a", Addr: net.ParseIP(host), Port: uint16(port)}
	if err := outsider.ml.Load().SendReliable(&to, directMsg(t, ghost)); err != nil {
		t.Fatalf("SendReliable: %v", err)
	}
	for a.Stats().RepairErrors < 3 {
		select {
		case <-ctx.Done():
			t.Fatalf("a tried to join the ghost %d times, want it retried every round (at least 3)", a.Stats().RepairErrors)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if st := a.Stats(); st.Repairs != 0 {
		t.Errorf("a counted %d repairs of a node that never answered", st.Repairs)
	}
}

// TestKeyRotation rotates a running cluster's key in the three steps of
// Node.SetKeys, one node at a time within each step (the window an
// operator's rollout leaves), and checks after every node's change that a
// new state from every node still reaches every other and that no member
// was ever dropped. At the end a node with only the old key cannot join.
func TestKeyRotation(t *testing.T) {
	const (
		oldKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
		newKey = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*defaultTestTimeout)
	defer cancel()
	c := newCluster(t)
	names := []string{"n0", "n1", "n2"}
	var nodes []*Node
	for i, name := range names {
		cfg := testConfig(name)
		cfg.Keys = []string{oldKey}
		if i > 0 {
			cfg.Seeds = []string{nodes[0].Addr()}
		}
		nodes = append(nodes, c.start(cfg, func(n *Node) { mustPublish(t, n, gfeFor(name, 1)) }))
	}
	for _, n := range nodes {
		waitFor(ctx, t, n, "every state", hasAll(names))
	}
	everyoneHearsEveryone := func(step string) {
		t.Helper()
		versions := map[string]uint64{}
		for i, n := range nodes {
			versions[names[i]] = mustPublish(t, n, gfeFor(names[i], float64(len(versions)+2)))
		}
		for _, n := range nodes {
			for name, v := range versions {
				waitFor(ctx, t, n, step+": "+name+"'s new state", hasVersion(name, v))
			}
		}
	}
	steps := []struct {
		name string
		keys []string
	}{
		{"install the new key", []string{oldKey, newKey}},
		{"make it primary", []string{newKey, oldKey}},
		{"remove the old key", []string{newKey}},
	}
	for _, st := range steps {
		for i, n := range nodes {
			if err := n.SetKeys(st.keys); err != nil {
				t.Fatalf("%s: %s.SetKeys: %v", st.name, names[i], err)
			}
			everyoneHearsEveryone(fmt.Sprintf("%s on %d of %d nodes", st.name, i+1, len(nodes)))
		}
	}
	if got, want := nodes[0].PrimaryKeyID(), KeyID(mustDecode(t, newKey)); got != want {
		t.Errorf("primary key %s, want the new key %s", got, want)
	}
	for i, n := range nodes {
		if st := n.Stats(); st.Departures != 0 || n.Members() != len(nodes) {
			t.Errorf("%s: %d departures and %d members during the rotation, want 0 and %d", names[i], st.Departures, n.Members(), len(nodes))
		}
	}
	stale := testConfig("stale")
	stale.Keys = []string{oldKey}
	s := c.start(stale, nil)
	if _, err := s.Join([]string{nodes[0].Addr()}); err == nil {
		t.Errorf("a node with only the retired key joined")
	}
	if got := nodes[0].Members(); got != len(nodes) {
		t.Errorf("n0 has %d members after the retired key's join attempt, want %d", got, len(nodes))
	}
}

func mustDecode(t testing.TB, s string) []byte {
	t.Helper()
	k, err := DecodeKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSetKeys: a bad keyring is refused whole, naming the entry; a node
// without encryption cannot take one.
func TestSetKeys(t *testing.T) {
	cfg := testConfig("n0")
	cfg.Keys = []string{"MDEyMzQ1Njc4OWFiY2RlZg=="}
	n, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := n.PrimaryKeyID()
	for _, tt := range []struct {
		keys []string
		want string
	}{
		{nil, "empty keyring"},
		{[]string{"ZmVkY2JhOTg3NjU0MzIxMA==", "c2hvcnQ="}, "keys[1]: must decode to 16, 24 or 32 bytes, got 5"},
		{[]string{"not base64!"}, "keys[0]: not valid base64"},
	} {
		if err := n.SetKeys(tt.keys); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("SetKeys(%d keys) = %v, want an error containing %q", len(tt.keys), err, tt.want)
		}
	}
	if got := n.PrimaryKeyID(); got != before {
		t.Errorf("a refused SetKeys changed the primary key: %s → %s", before, got)
	}
	plain, err := New(testConfig("n1"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.SetKeys([]string{"MDEyMzQ1Njc4OWFiY2RlZg=="}); !errors.Is(err, ErrNotEncrypted) {
		t.Errorf("SetKeys on an unencrypted node = %v, want ErrNotEncrypted", err)
	}
}
