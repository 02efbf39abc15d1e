package gossipbench

import (
	"context"
	"math"
	mrand "math/rand/v2"
	"testing"
	"time"
)

// TestRunSmallCluster runs the benchmark at 20 sealed, encrypted nodes with
// the daemons' configuration and checks that every phase completes and
// that the byte counts are plausible: at least the probes every node
// sends, at most a ceiling computed from the configuration and the
// measured state and view sizes. Timings are not asserted (the machine
// may be busy); that changes spread and the dead node is noticed is.
func TestRunSmallCluster(t *testing.T) {
	const (
		nodes   = 20
		changes = 2
		window  = 3 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Nodes: nodes, Changes: changes, Window: window, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Nodes != nodes || !res.Sealed || !res.Verified || !res.Encrypted {
		t.Errorf("ran %d nodes, sealed %v verified %v encrypted %v; want %d, all true", res.Nodes, res.Sealed, res.Verified, res.Encrypted, nodes)
	}
	if want := changes * (nodes - 1); res.SpreadSamples != want || res.SpreadMissed != 0 {
		t.Errorf("spread: %d samples, %d missed; want %d, 0", res.SpreadSamples, res.SpreadMissed, want)
	}
	if !(res.SpreadP50 > 0 && res.SpreadP50 <= res.SpreadP99 && res.SpreadP99 <= res.SpreadP9999 && res.SpreadP9999 <= res.SpreadMax) {
		t.Errorf("spread quantiles out of order: %v %v %v %v", res.SpreadP50, res.SpreadP99, res.SpreadP9999, res.SpreadMax)
	}
	if res.DeadUndetected != 0 || res.DeadDetectedP99 <= 0 {
		t.Errorf("dead member: %d nodes never noticed, p99 %vs", res.DeadUndetected, res.DeadDetectedP99)
	}
	if res.StateFrameBytes <= 0 || res.PushPullBytes < (nodes-1)*res.StateFrameBytes/2 {
		t.Errorf("state frame %d B, view %d B: implausible for %d sealed states", res.StateFrameBytes, res.PushPullBytes, nodes)
	}

	// The floor: every node sends a ping (at least 20 bytes) every probe
	// interval.
	c := res.Config
	w := res.WindowS
	floor := (w/c.ProbeInterval - 1) * 20 / w
	// The ceiling, per node per second:
	//   membership: at most 8 packets of 300 bytes per probe interval
	//   (ping, acks, indirect pings, nacks);
	//   push/pull and rejoins: each node takes part in at most two
	//   exchanges per interval (one it starts, about one another starts;
	//   counted as (w/interval + 1) · 2), each sending its full view plus
	//   100 bytes of membership per node;
	//   states: each change and seal refresh is sent once directly and
	//   gossiped at most R = StateRetransmitMult · ceil(log10(N+1)) times
	//   by every node, each with 100 bytes of framing and encryption.
	r := 4 * math.Ceil(math.Log10(nodes+1)) // the default StateRetransmitMult
	membership := 8 * 300 / c.ProbeInterval
	exchanges := (w/scaledPushPull(c.PushPullInterval, nodes)+1)*2 + (w/c.RejoinInterval+1)*2
	pushPull := exchanges * float64(res.PushPullBytes+100*nodes) / w
	publishes := changes + w/(c.SealMaxAge/3) + 1
	states := publishes * (1 + r) * float64(res.StateFrameBytes+100) / w
	ceiling := membership + pushPull + states
	t.Logf("bytes per node per second: %.0f (state %.0f), floor %.0f, ceiling %.0f (membership %.0f, push/pull %.0f, states %.0f)",
		res.BytesPerNodePerS, res.StateBytesPerNodePerS, floor, ceiling, membership, pushPull, states)
	if res.BytesPerNodePerS < floor || res.BytesPerNodePerS > ceiling {
		t.Errorf("%.0f bytes per node per second, want in [%.0f, %.0f]", res.BytesPerNodePerS, floor, ceiling)
	}
	if res.StateBytesPerNodePerS <= 0 || res.StateBytesPerNodePerS > res.BytesPerNodePerS {
		t.Errorf("state bytes %.0f per node per second, want in (0, total %.0f]", res.StateBytesPerNodePerS, res.BytesPerNodePerS)
	}
	if res.HeapBytes == 0 || res.HeapBytesPerPair != float64(res.HeapBytes)/(nodes*(nodes-1)) {
		t.Errorf("heap %d B, %.0f B per pair: want > 0, and heap / (nodes × (nodes - 1))", res.HeapBytes, res.HeapBytesPerPair)
	}
	if res.FalseDeaths != 0 {
		t.Logf("%d false deaths in the window (a busy machine)", res.FalseDeaths)
	}
}

// scaledPushPull is memberlist's push/pull interval at n nodes
// (pushPullScale: the interval grows by one multiple for every doubling
// beyond 32 nodes).
func scaledPushPull(seconds float64, n int) float64 {
	if n <= 32 {
		return seconds
	}
	return seconds * (math.Ceil(math.Log2(float64(n))-math.Log2(32)) + 1)
}

// TestHealJoinsOncePerLackingMember starts nodes that know of no one and
// heals them: one join per member some node lacks (at most N), not one per
// lacking pair (N·(N−1)/2 or more), and the joins alone form the cluster.
func TestHealJoinsOncePerLackingMember(t *testing.T) {
	const nodes = 6
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := Options{Nodes: nodes, World: DefaultWorld(), Unsealed: true, isolated: true}
	c, err := newCluster(ctx, o, mrand.New(mrand.NewPCG(1, 2)), func(string, ...any) {})
	if c != nil {
		defer c.stop()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.members {
		if got := m.node.Members(); got != 1 {
			t.Fatalf("%s lists %d members before the heal; want only itself", m.name, got)
		}
	}
	c.heal(ctx)
	if c.healJoins < nodes-1 || c.healJoins > nodes {
		t.Errorf("heal made %d joins for %d isolated nodes; want %d to %d (one per lacking member)", c.healJoins, nodes, nodes-1, nodes)
	}
	if err := c.waitFormed(ctx, func(string, ...any) {}); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}

// TestHealStopsAtDeadline: a heal whose context has ended joins nothing.
func TestHealStopsAtDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := Options{Nodes: 3, World: DefaultWorld(), Unsealed: true, isolated: true}
	c, err := newCluster(ctx, o, mrand.New(mrand.NewPCG(1, 2)), func(string, ...any) {})
	if c != nil {
		defer c.stop()
	}
	if err != nil {
		t.Fatal(err)
	}
	done, stop := context.WithCancel(ctx)
	stop()
	c.heal(done)
	if c.healJoins != 0 {
		t.Errorf("heal after its deadline made %d joins; want 0", c.healJoins)
	}
}
