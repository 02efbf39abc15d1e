package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/health"
)

// defaultTestTimeout bounds every wait in these tests.
const defaultTestTimeout = 20 * time.Second

// testReplicas are the control-plane names the tests' replicas vouch for
// (Config.Replicas).
var testReplicas = []string{"cp-a", "cp-b", "cp-c"}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// As in internal/gossip: memberlist.Shutdown does not wait for a
		// probe in flight, which returns on its own within ProbeInterval
		// plus TCPTimeout.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
	)
}

// testLogger sends warnings and errors to the test log until the test
// ends, and drops them after (memberlist's goroutines may log a moment after
// a gossip node stopped, when t.Log would panic).
func testLogger(t testing.TB) zerolog.Logger {
	w := &testWriter{w: zerolog.NewTestWriter(t)}
	t.Cleanup(w.close)
	return zerolog.New(w).Level(zerolog.WarnLevel)
}

type testWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return len(p), nil
	}
	return w.w.Write(p)
}

func (w *testWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}

// advanceUntil advances clk by step every 5ms (of real time) until cond
// holds: for conditions that need the code under test to reach its next
// timer first (a probe loop re-arming after a result), without counting
// timers.
func advanceUntil(t testing.TB, clk *clock.Fake, step time.Duration, what string, cond func() bool) {
	t.Helper()
	waitUntil(t, what, func() bool {
		if cond() {
			return true
		}
		clk.Advance(step)
		return false
	})
}

// epoch is the fake clocks' start.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// topo describes a test configuration: groups (each in its own zone of
// region r1 or r2, alternating) with their instance addresses, all used by
// service "web" with a fast health check.
type topo struct {
	groups []topoGroup
	// extra is appended to the service block (indented under "- name: web").
	interval string
}

type topoGroup struct {
	name  string
	addrs []string
}

// yaml renders t.
func (t topo) yaml() string {
	interval := t.interval
	if interval == "" {
		interval = "1s"
	}
	var b strings.Builder
	b.WriteString("regions:\n")
	for ri, region := range []string{"r1", "r2"} {
		var zones []topoGroup
		for i, g := range t.groups {
			if i%2 == ri {
				zones = append(zones, g)
			}
		}
		if len(zones) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  - name: %s\n    zones:\n", region)
		for _, g := range zones {
			fmt.Fprintf(&b, "      - name: z-%s\n        groups:\n          - name: %s\n            instances:\n", g.name, g.name)
			for _, a := range g.addrs {
				fmt.Fprintf(&b, "              - address: %s\n", a)
			}
		}
	}
	b.WriteString("services:\n  - name: web\n    backends:\n")
	for _, g := range t.groups {
		fmt.Fprintf(&b, "      - {group: %s, max_rate_per_instance: 100}\n", g.name)
	}
	fmt.Fprintf(&b, "    health_check: {interval: %s, timeout: 500ms, jitter: 0, healthy_threshold: 1, unhealthy_threshold: 1}\n", interval)
	b.WriteString("routes:\n  - service: web\n")
	return b.String()
}

// manyGroups returns n groups g00.. with two instances each on made-up
// loopback ports (the fake prober answers for them).
func manyGroups(n int) topo {
	var t topo
	for i := range n {
		t.groups = append(t.groups, topoGroup{
			name:  fmt.Sprintf("g%02d", i),
			addrs: []string{fmt.Sprintf("127.0.0.1:%d", 20000+2*i), fmt.Sprintf("127.0.0.1:%d", 20001+2*i)},
		})
	}
	return t
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// replaceFile replaces path with content the way many editors save: write a
// new file beside it and rename it over the old one.
func replaceFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp~"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// loaded parses yaml into a LoadedConfig with the given hash.
func loaded(t testing.TB, yaml, hash string) *LoadedConfig {
	t.Helper()
	c, err := config.Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	canon, red, _, err := canonicalForms(c)
	if err != nil {
		t.Fatal(err)
	}
	return &LoadedConfig{Config: c, YAML: canon, RedactedYAML: red, Source: "test.yaml", Hash: hash, Seq: 1, Version: "1-" + hash, LoadedAt: epoch}
}

// world is the fake backends that fake probers probe: every address passes
// unless marked failing. Safe for concurrent use.
type world struct {
	mu      sync.Mutex
	failing map[string]bool
}

func newWorld() *world { return &world{failing: map[string]bool{}} }

func (w *world) setFailing(addr string, failing bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failing[addr] = failing
}

func (w *world) fails(addr string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failing[addr]
}

// fakeProber answers from a world and records what it probed.
type fakeProber struct {
	w *world

	mu     sync.Mutex
	probed map[string]int
	wake   chan struct{} // closed and replaced at every probe
}

func newFakeProber(w *world) *fakeProber {
	return &fakeProber{w: w, probed: map[string]int{}, wake: make(chan struct{})}
}

func (p *fakeProber) Probe(_ context.Context, t health.Target) health.Result {
	p.mu.Lock()
	p.probed[t.Addr]++
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
	if p.w.fails(t.Addr) {
		return health.Result{Err: errors.New("fake: connection refused")}
	}
	return health.Result{}
}

// probedSet returns the addresses probed since the last takeCounts, sorted.
func (p *fakeProber) probedSet() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.probed))
	for a := range p.probed {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// waitProbed waits until every address in want has been probed since the
// last takeCounts (others may have been too).
func (p *fakeProber) waitProbed(t testing.TB, want []string) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d addresses probed", len(want)), func() bool {
		got := p.probedSet()
		for _, a := range want {
			if _, ok := slices.BinarySearch(got, a); !ok {
				return false
			}
		}
		return true
	})
}

// takeCounts returns the probe counts and resets them.
func (p *fakeProber) takeCounts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.probed
	p.probed = map[string]int{}
	return c
}

// waitProbes waits until the prober has probed exactly the addresses in
// want (each at least once) since the last takeCounts, and returns what it
// probed.
func (p *fakeProber) waitProbes(t testing.TB, want []string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for {
		p.mu.Lock()
		got := make([]string, 0, len(p.probed))
		for a := range p.probed {
			got = append(got, a)
		}
		wake := p.wake
		p.mu.Unlock()
		slices.Sort(got)
		if slices.Equal(got, want) {
			return p.takeCounts()
		}
		select {
		case <-wake:
		case <-ctx.Done():
			t.Fatalf("probed %v, want %v", got, want)
		}
	}
}

// fakeGossip is an in-memory gossiper: other nodes' states are set by the
// test; Publish records this node's states.
type fakeGossip struct {
	self    string
	changes chan struct{}

	mu        sync.Mutex
	states    map[string]gossip.NodeState
	published []gossip.NodeState
	pubWake   chan struct{}
	seq       uint64
}

func newFakeGossip(self string) *fakeGossip {
	return &fakeGossip{self: self, changes: make(chan struct{}, 1), states: map[string]gossip.NodeState{}, pubWake: make(chan struct{})}
}

func (g *fakeGossip) Snapshot() *gossip.Snapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := &gossip.Snapshot{Seq: g.seq, States: map[string]gossip.NodeState{}}
	for k, v := range g.states {
		s.States[k] = v
		s.Members = append(s.Members, k)
	}
	slices.Sort(s.Members)
	return s
}

func (g *fakeGossip) Changes() <-chan struct{} { return g.changes }

func (g *fakeGossip) Publish(s gossip.NodeState) (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	s.Node, s.Version = g.self, g.seq
	s = s.Clone()
	g.states[g.self] = s
	g.published = append(g.published, s)
	close(g.pubWake)
	g.pubWake = make(chan struct{})
	return s.Version, nil
}

// set makes s the state of node s.Node (or removes it when s.Kind is "").
func (g *fakeGossip) set(name string, s *gossip.NodeState) {
	g.mu.Lock()
	g.seq++
	if s == nil {
		delete(g.states, name)
	} else {
		c := s.Clone()
		c.Node = name
		g.states[name] = c
	}
	g.mu.Unlock()
	notify(g.changes)
}

// lastPublished returns the last state this node published.
func (g *fakeGossip) lastPublished() (gossip.NodeState, int, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.published) == 0 {
		return gossip.NodeState{}, 0, g.pubWake
	}
	return g.published[len(g.published)-1], len(g.published), g.pubWake
}

// waitState waits until the hub holds a State for which cond is true and
// returns it.
func waitState(t testing.TB, load func() (*State, <-chan struct{}), what string, cond func(*State) bool) *State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for {
		st, ch := load()
		if st != nil && cond(st) {
			return st
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for a state where %s; last: %s", what, describeState(st))
		}
	}
}

func describeState(st *State) string {
	if st == nil {
		return "<nil>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "version %s ready %t:", st.Version, st.Ready)
	for _, ih := range st.Health {
		fmt.Fprintf(&b, " %s/%s=%s(%s)", ih.Group, ih.Address, ih.Status, ih.Source)
	}
	return b.String()
}

// statusOf returns the status of addr in st.
func statusOf(st *State, addr string) health.Status {
	for _, ih := range st.Health {
		if ih.Address == addr {
			return ih.Status
		}
	}
	return ""
}

// waitUntil polls cond every 5ms until it holds; for conditions that have
// no notification (memberlist membership, recorded ACKs).
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// metricValue returns the value of a counter or gauge.
func metricValue(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
