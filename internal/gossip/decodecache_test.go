package gossip

import (
	"fmt"
	"reflect"
	"runtime"
	"testing"

	"github.com/hashicorp/memberlist"
)

// worldGFEState is a gfe's state in a world of 20 services and 40 regions
// with load on 20 groups, the gossip benchmark's default world.
func worldGFEState(i int) NodeState {
	s := NodeState{
		Node: fmt.Sprintf("gfe-%04d", i), Kind: KindGFE, Site: fmt.Sprintf("site-%03d", i/5), Version: uint64(1000 + i),
		Demand: map[string]float64{}, RTT: map[string]float64{}, Load: map[string]GroupLoad{},
	}
	for j := range 20 {
		s.Demand[fmt.Sprintf("service-%02d", j)] = 10 + 990*float64(i*20+j)/1e4 + 1e-9
	}
	for j := range 40 {
		s.RTT[fmt.Sprintf("region-%02d", j)] = 1 + 250*float64(i*40+j)/4e4 + 1e-9
	}
	for j := range 20 {
		s.Load[fmt.Sprintf("service-%02d-region-%02d", j, (i+j)%40)] = GroupLoad{InFlight: 0.1 + float64(j)/7, Requests: 10.3 + float64(i)/3}
	}
	return s
}

// TestDecodeCacheHeapPerPair has 100 nodes receive the states of 40 others
// (each node by a direct message and again in a push/pull payload, as
// members that join do) and measures the heap they hold afterwards per
// (node, peer) pair. With a shared DecodeCache the nodes hold one decoded
// copy of each state between them, so that a thousand nodes fit in one
// process (package gossipbench); without, each holds its own (about 11 kB
// per pair here: the maps of the decoded state and its JSON), which is
// what a daemon holds per peer. Every node still sees every state, equal
// to what was published.
func TestDecodeCacheHeapPerPair(t *testing.T) {
	const nodes, peers = 100, 40
	msgs := make([][]byte, peers)
	want := make([]NodeState, peers)
	var view rawStateList
	for i := range peers {
		want[i] = worldGFEState(i)
		msgs[i] = directMsg(t, want[i])
		view.States = append(view.States, mustJSON(t, want[i]))
	}
	pushPull, err := encodeFrame(view)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		cache    bool
		min, max float64 // bytes per pair
	}{
		{name: "shared cache", cache: true, max: 2_500},
		{name: "each node its own", cache: false, min: 8_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			var cache *DecodeCache
			if tc.cache {
				cache = NewDecodeCache(4 * peers)
			}
			receivers := make([]*Node, nodes)
			for r := range receivers {
				cfg := DefaultConfig()
				cfg.Name = fmt.Sprintf("receiver-%02d", r)
				n, err := New(cfg, Options{Clock: clk, DecodeCache: cache})
				if err != nil {
					t.Fatal(err)
				}
				for i := range peers {
					n.memberJoined(&memberlist.Node{Name: want[i].Node})
					n.handleMessage(msgs[i])
				}
				n.handlePushPull(pushPull)
				receivers[r] = n
			}
			for _, n := range receivers {
				snap := n.Snapshot()
				for i := range peers {
					if got := snap.States[want[i].Node]; !reflect.DeepEqual(got, want[i]) {
						t.Fatalf("%s holds %+v for %s, want %+v", n.cfg.Name, got, want[i].Node, want[i])
					}
				}
			}
			a, b := receivers[0].Snapshot().States[want[0].Node], receivers[1].Snapshot().States[want[0].Node]
			if shared := reflect.ValueOf(a.RTT).UnsafePointer() == reflect.ValueOf(b.RTT).UnsafePointer(); shared != tc.cache {
				t.Errorf("two nodes share the decoded RTT map: %v, want %v", shared, tc.cache)
			}
			if tc.cache {
				if hits, misses := cache.Stats(); misses != peers || hits != 2*nodes*peers-peers {
					t.Errorf("cache: %d hits, %d misses; want %d, %d", hits, misses, 2*nodes*peers-peers, peers)
				}
			}
			// The heap they hold (their snapshots built): with them,
			// less without them (and the cache), measured back to back
			// so that what other tests' goroutines free meanwhile stays
			// small.
			held := heapAlloc()
			runtime.KeepAlive(receivers)
			runtime.KeepAlive(cache)
			perPair := (float64(held) - float64(heapAlloc())) / (nodes * peers)
			t.Logf("%s: %.0f B of heap per (node, peer) pair", tc.name, perPair)
			if perPair < tc.min || (tc.max > 0 && perPair > tc.max) {
				t.Errorf("%.0f B per pair, want in [%.0f, %.0f]", perPair, tc.min, tc.max)
			}
		})
	}
}

func mustJSON(t *testing.T, s NodeState) []byte {
	t.Helper()
	b, err := encodeFrame(s)
	if err != nil {
		t.Fatal(err)
	}
	js, err := frameJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
