package gossip

import (
	"context"
	"fmt"
	"github.com/spillway-lb/spillway/internal/quantile"
	"slices"
	"sync"
	"testing"
	"time"
)

// propagationConfig is testConfig with failure detection relaxed: 50
// memberlists in one process under -race on a shared 2-core machine stall
// for hundreds of milliseconds at times, which 200ms probe timeouts would
// read as failures (50 hosts would not). State propagation does not depend
// on these settings; the gossip settings stay at their defaults.
func propagationConfig(name string) Config {
	c := testConfig(name)
	c.ProbeInterval = 2 * time.Second
	c.ProbeTimeout = time.Second
	c.SuspicionMult = 4
	c.TCPTimeout = 3 * time.Second
	return c
}

// propagationCluster starts size nodes on loopback: node "cp" is a control
// plane, the others gfes. It returns once every node sees every member and
// every state.
func propagationCluster(ctx context.Context, tb testing.TB, size int) (*cluster, []*Node) {
	tb.Helper()
	c := newCluster(tb)
	start := time.Now()
	cp := c.start(propagationConfig("cp"), func(n *Node) { mustPublish(tb, n, cpWithHealthy(100)) })
	nodes := []*Node{cp}
	names := []string{"cp"}
	for i := 1; i < size; i++ {
		name := fmt.Sprintf("gfe-%02d", i)
		names = append(names, name)
		// Seeds form a binary tree (node i joins node i/2) rather than a
		// star, so that no single node serves 49 concurrent joins.
		nodes = append(nodes, c.start(withSeeds(propagationConfig(name), nodes[i/2].Addr()),
			func(n *Node) { mustPublish(tb, n, gfeFor(name, float64(i))) }))
	}
	started := time.Since(start)
	for _, n := range nodes {
		waitFor(ctx, tb, n, fmt.Sprintf("all %d states", size), hasAll(names))
	}
	tb.Logf("%d nodes started in %v, converged %v later", size, started.Round(time.Millisecond),
		(time.Since(start) - started).Round(time.Millisecond))
	return c, nodes
}

// measureChange publishes a health change on nodes[0] and returns, for
// every other node, how long it took to see it.
func measureChange(ctx context.Context, tb testing.TB, nodes []*Node, healthy int) []time.Duration {
	tb.Helper()
	pub := nodes[0]
	// Drop notifications of earlier changes so that each waiter starts
	// from the current view.
	for _, n := range nodes[1:] {
		drain(n)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		lats  = make([]time.Duration, 0, len(nodes)-1)
		wrong []string // nodes that saw the new version with other content
	)
	start := time.Now()
	v := mustPublish(tb, pub, cpWithHealthy(healthy))
	for _, n := range nodes[1:] {
		wg.Go(func() {
			for {
				if s, ok := n.Snapshot().States[pub.cfg.Name]; ok && s.Version >= v {
					// Checked as seen: under load memberlist may declare
					// the publisher failed later and drop its state.
					mu.Lock()
					lats = append(lats, time.Since(start))
					if len(s.Groups) == 0 || s.Groups[0].Healthy != healthy {
						wrong = append(wrong, fmt.Sprintf("%s: %+v", n.cfg.Name, s.Groups))
					}
					mu.Unlock()
					return
				}
				select {
				case <-n.Changes():
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	if len(lats) != len(nodes)-1 {
		tb.Fatalf("change %v reached %d of %d nodes before the deadline", healthy, len(lats), len(nodes)-1)
	}
	if len(wrong) > 0 {
		tb.Fatalf("nodes saw change %v with other groups: %v", healthy, wrong)
	}
	slices.Sort(lats)
	return lats
}

// TestPropagation50 checks that every one of several health changes
// published on one node of 50 reaches all 50. Its bound separates lost from
// slow: a change still missing somewhere after it was not delivered, while
// how fast changes spread is a speed figure, which BenchmarkPropagation50
// measures (a timed unit test fails on a busy machine: under the race
// detector with both cores loaded, one change in ten took 2.5 s). The log
// lines are this run's figures, for information.
func TestPropagation50(t *testing.T) {
	const (
		size    = 50
		changes = 10
		bound   = 15 * time.Second
	)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, nodes := propagationCluster(ctx, t, size)

	var all, perNode []time.Duration
	for i := range changes {
		lats := measureChange(ctx, t, nodes, 1000+i)
		last := lats[len(lats)-1]
		all = append(all, last)
		perNode = append(perNode, lats...)
		if last > bound {
			t.Errorf("change %d reached all %d nodes after %v, want <= %v", i, size, last, bound)
		}
	}
	slices.Sort(all)
	slices.Sort(perNode)
	t.Logf("time for all %d nodes to see a change, over %d changes: median %v, p99 %v, max %v",
		size, changes, quantile.Of(all, 0.5).Round(time.Millisecond), quantile.Of(all, 0.99).Round(time.Millisecond),
		all[len(all)-1].Round(time.Millisecond))
	t.Logf("per-node latency over %d samples: p50 %v, p90 %v, p99 %v",
		len(perNode), quantile.Of(perNode, 0.5).Round(time.Millisecond), quantile.Of(perNode, 0.9).Round(time.Millisecond),
		quantile.Of(perNode, 0.99).Round(time.Millisecond))
	var relayed, received uint64
	for _, n := range nodes {
		s := n.Stats()
		relayed += s.Relayed
		received += s.Received
	}
	t.Logf("broadcasts received %d, relayed %d (all nodes)", received, relayed)
}

// BenchmarkPropagation50 reports the time for a change on one node to reach
// all 50 (all-p50/all-p99 ms) and the per-node latency (node-p50/node-p99
// ms). Run with:
//
//	go test ./internal/gossip -run '^$' -bench Propagation50 -benchtime 20x
func BenchmarkPropagation50(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, nodes := propagationCluster(ctx, b, 50)
	var all, perNode []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		lats := measureChange(ctx, b, nodes, 1000+i)
		all = append(all, lats[len(lats)-1])
		perNode = append(perNode, lats...)
	}
	b.StopTimer()
	slices.Sort(all)
	slices.Sort(perNode)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(quantile.Of(all, 0.5)), "all-p50-ms")
	b.ReportMetric(ms(quantile.Of(all, 0.99)), "all-p99-ms")
	b.ReportMetric(ms(quantile.Of(perNode, 0.5)), "node-p50-ms")
	b.ReportMetric(ms(quantile.Of(perNode, 0.99)), "node-p99-ms")
}
