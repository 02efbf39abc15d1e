package gossip

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hashicorp/memberlist"

	"github.com/spillway-lb/spillway/internal/clock"
)

func newFakeClock() *clock.Fake { return clock.NewFake(time.Unix(1_700_000_000, 0)) }

// newOfflineNode returns a Node that is never Run: the tests drive its
// memberlist callbacks directly.
func newOfflineNode(t *testing.T, name string, clk clock.Clock) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Name = name
	n, err := New(cfg, Options{Clock: clk})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return n
}

// gossipMsg and directMsg encode s as a message arriving by that route.
func gossipMsg(t testing.TB, s NodeState) []byte { return mustMsg(t, routeGossip, s) }
func directMsg(t testing.TB, s NodeState) []byte { return mustMsg(t, routeDirect, s) }

func mustMsg(t testing.TB, route byte, s NodeState) []byte {
	t.Helper()
	b, err := encodeFrame(s)
	if err != nil {
		t.Fatal(err)
	}
	return withRoute(route, b)
}

// drain empties Changes and reports whether a notification was pending.
func drain(n *Node) bool {
	select {
	case <-n.Changes():
		return true
	default:
		return false
	}
}

func TestPublishAssignsNodeAndVersion(t *testing.T) {
	clk := newFakeClock()
	n := newOfflineNode(t, "gfe-1", clk)
	drain(n)

	in := gfeState()
	in.Node, in.Version = "someone-else", 42
	v1, err := n.Publish(in)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if want := uint64(clk.Now().UnixNano()); v1 != want {
		t.Errorf("first version = %d, want the clock in ns %d", v1, want)
	}
	if !drain(n) {
		t.Errorf("Publish did not notify Changes")
	}
	// The clock stands still: versions still increase. (A clock behind the
	// last version is TestRefuteNewerStateUnderOwnName.)
	v2, _ := n.Publish(in)
	v3, _ := n.Publish(in)
	if v2 != v1+1 || v3 != v2+1 {
		t.Errorf("versions with a stopped clock = %d, %d, %d; want consecutive", v1, v2, v3)
	}
	// Forward clock: the version follows it.
	clk.Advance(time.Hour)
	v4, _ := n.Publish(in)
	if want := uint64(clk.Now().UnixNano()); v4 != want {
		t.Errorf("version after the clock moved = %d, want %d", v4, want)
	}

	want := in.Clone()
	want.Node, want.Version = "gfe-1", v4
	if diff := cmp.Diff(map[string]NodeState{"gfe-1": want}, n.States()); diff != "" {
		t.Errorf("States() (-want +got):\n%s", diff)
	}
	// Publish copied the maps: changing the caller's does not leak in.
	in.Demand["web"] = 1e6
	if got := n.Snapshot().States["gfe-1"].Demand["web"]; got != 120.5 {
		t.Errorf("stored demand = %v after the caller changed its map, want 120.5", got)
	}
	if got := n.queue.NumQueued(); got != 1 {
		t.Errorf("queued broadcasts = %d, want 1 (each publish replaces the last)", got)
	}
}

func TestPublish(t *testing.T) {
	tests := []struct {
		name        string
		in          NodeState
		wantErr     error
		wantVisible bool
		wantQueued  int
	}{
		{name: "small state is gossiped", in: gfeState(), wantVisible: true, wantQueued: 1},
		{name: "invalid state is not published", in: NodeState{Kind: KindGFE}, wantErr: ErrInvalidState},
		{name: "state larger than a packet is published but not gossiped", in: bigGFEState(100, 10), wantVisible: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newOfflineNode(t, "gfe-1", newFakeClock())
			_, err := n.Publish(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Publish() = %v, want %v", err, tt.wantErr)
			}
			if _, got := n.States()["gfe-1"]; got != tt.wantVisible {
				t.Errorf("state visible = %v, want %v", got, tt.wantVisible)
			}
			if got := n.queue.NumQueued(); got != tt.wantQueued {
				t.Errorf("queued broadcasts = %d, want %d", got, tt.wantQueued)
			}
			n.mu.Lock()
			fanout := n.fanout
			n.mu.Unlock()
			if fanout != tt.wantVisible {
				t.Errorf("sender asked to fan out = %v, want %v", fanout, tt.wantVisible)
			}
		})
	}
}

func TestHandleMessage(t *testing.T) {
	n := newOfflineNode(t, "self", newFakeClock())
	var verdicts []verdict
	n.onVerdict = func(_ NodeState, v verdict) { verdicts = append(verdicts, v) }
	a5, a4, a6, a7 := st("a", 5), st("a", 4), st("a", 6), st("a", 7)

	n.handleMessage(gossipMsg(t, a5)) // before a's alive message: hidden
	if got := n.Members(); got != 1 {
		t.Errorf("Members() = %d, want 1", got)
	}
	if _, ok := n.States()["a"]; ok {
		t.Errorf("state of a non-member is visible")
	}
	drain(n)
	n.memberJoined(&memberlist.Node{Name: "a"})
	if !drain(n) {
		t.Errorf("join did not notify Changes")
	}
	n.handleMessage(gossipMsg(t, a4))                       // stale
	n.handleMessage(gossipMsg(t, a6))                       // newer
	n.handleMessage(withRoute(routeGossip, []byte{1, '{'})) // malformed frame
	n.handleMessage([]byte{9, codecJSON, '{', '}'})         // unknown route
	n.handleMessage(gossipMsg(t, st("b", 1)))               // another non-member
	n.handleMessage(directMsg(t, a7))                       // newer, straight from a: not relayed

	want := []verdict{verdictHidden, verdictStale, verdictVisible, verdictHidden, verdictVisible}
	if diff := cmp.Diff(want, verdicts); diff != "" {
		t.Errorf("verdicts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]NodeState{"a": a7}, n.States(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("States() (-want +got):\n%s", diff)
	}
	wantStats := Stats{Received: 7, Accepted: 4, Stale: 1, Invalid: 2, Relayed: 3}
	if diff := cmp.Diff(wantStats, n.Stats()); diff != "" {
		t.Errorf("Stats() (-want +got):\n%s", diff)
	}
	// Relays: one queued message per publisher (a6 replaced a5; a7 came
	// directly and is not relayed).
	if got := n.queue.NumQueued(); got != 2 {
		t.Errorf("queued relays = %d, want 2", got)
	}

	before := n.Snapshot()
	drain(n)
	n.memberLeft("a")
	if !drain(n) {
		t.Errorf("leave did not notify Changes")
	}
	if len(n.States()) != 0 || n.Members() != 1 {
		t.Errorf("after a left: States() = %v, Members() = %d; want empty, 1", n.States(), n.Members())
	}
	if _, ok := before.States["a"]; !ok || len(before.Members) != 2 {
		t.Errorf("an earlier Snapshot changed after a left: %+v", before)
	}
	n.handleMessage(gossipMsg(t, a6)) // an old message, still in flight
	if got := verdicts[len(verdicts)-1]; got != verdictStale {
		t.Errorf("in-flight message of a departed node: verdict %v, want stale", got)
	}
	n.memberJoined(&memberlist.Node{Name: "a"}) // a comes back
	if got := n.Snapshot().States["a"].Version; got != 7 {
		t.Errorf("after a came back, its visible version = %d, want 7", got)
	}
}

func TestRefuteNewerStateUnderOwnName(t *testing.T) {
	clk := newFakeClock()
	n := newOfflineNode(t, "self", clk)
	v, err := n.Publish(gfeState())
	if err != nil {
		t.Fatal(err)
	}
	echo := n.Snapshot().States["self"]
	n.handleMessage(gossipMsg(t, echo)) // our own state, relayed back
	if got := n.Snapshot().States["self"].Version; got != v {
		t.Fatalf("an echo changed our version to %d, want %d", got, v)
	}
	impostor := gfeState()
	impostor.Node, impostor.Version, impostor.Site = "self", v+1000, "elsewhere"
	n.handleMessage(gossipMsg(t, impostor))
	got := n.Snapshot().States["self"]
	if got.Version != v+1001 || got.Site != "paris" {
		t.Errorf("after refuting: own state version %d site %q, want %d %q", got.Version, got.Site, v+1001, "paris")
	}
	if next, _ := n.Publish(gfeState()); next != v+1002 {
		t.Errorf("next Publish version = %d, want %d", next, v+1002)
	}
}

func TestPushPullRoundTrip(t *testing.T) {
	a := newOfflineNode(t, "a", newFakeClock())
	for _, s := range []NodeState{st("x", 3), st("y", 9), cpState()} {
		a.memberJoined(&memberlist.Node{Name: s.Node})
		a.handleMessage(gossipMsg(t, s))
	}
	if _, err := a.Publish(gfeState()); err != nil {
		t.Fatal(err)
	}
	view := a.localView()
	if again := a.localView(); &again[0] != &view[0] {
		t.Errorf("localView re-encoded an unchanged view")
	}

	b := newOfflineNode(t, "b", newFakeClock())
	for _, m := range []string{"a", "x", "y", "cp-1"} {
		b.memberJoined(&memberlist.Node{Name: m})
	}
	b.handlePushPull(view)
	if diff := cmp.Diff(a.States(), b.States(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("b's view after push/pull differs from a's (-a +b):\n%s", diff)
	}
	if got := b.Stats(); got.PushPulls != 1 || got.Accepted != 4 || got.Relayed != 0 {
		t.Errorf("b.Stats() = %+v, want 1 push/pull, 4 accepted, none relayed", got)
	}
	b.handlePushPull(view) // the same view again changes nothing
	if got := b.Stats().Stale; got != 4 {
		t.Errorf("stale after a repeated push/pull = %d, want 4", got)
	}
	b.handlePushPull([]byte{7})
	if got := b.Stats().Invalid; got != 1 {
		t.Errorf("invalid after a garbage push/pull = %d, want 1", got)
	}
}

// holds describes what n holds of node: nothing, or its state's version
// and whether memberlist reported the node departed.
func (n *Node) holds(node string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, ok := n.tab.states[node]
	if !ok {
		return "nothing"
	}
	return fmt.Sprintf("version %d, departed %v", h.state.Version, h.departed)
}
