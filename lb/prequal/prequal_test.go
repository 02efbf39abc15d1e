package prequal

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return epoch.Add(d) }

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func mustPool(t testing.TB, cfg Config, n int) *Pool {
	t.Helper()
	p, err := New(cfg, n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReuseBudget(t *testing.T) {
	tests := []struct {
		name string
		m, n int
		r    float64
		want float64
	}{
		{"paper: m=16 n=100 r=3", 16, 100, 3, 2 / (0.84*3 - 1)},
		{"n = m: budget as for m = n/2", 16, 16, 3, 2 / (0.5*3 - 1)},
		{"n = 14 < m: budget as for m = 7", 16, 14, 3, 4},
		{"m = n/2, too few probes to refill", 16, 16, 2, math.Inf(1)},
		{"many probes: at least 1", 16, 1000, 5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.PoolSize, cfg.ProbesPerQuery = tt.m, tt.r
			got := ReuseBudget(cfg, tt.n)
			if math.IsInf(tt.want, 1) != math.IsInf(got, 1) || (!math.IsInf(got, 1) && math.Abs(got-tt.want) > 1e-9) {
				t.Errorf("ReuseBudget = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestReuseBoundedWhenPoolCoversReplicas: with more pool places than
// replicas (m = 16, n = 14) a probe serves at most b_reuse = 4 queries
// (the budget computed as for m = n/2); unbounded, the best probe drew
// every query until the pool emptied around it (14 of 14 picks).
func TestReuseBoundedWhenPoolCoversReplicas(t *testing.T) {
	const n = 14
	p := mustPool(t, DefaultConfig(), n)
	for i := range n {
		lat := 50 + i
		if i == 3 {
			continue
		}
		p.Add(Probe{Index: i, RIF: 1, Latency: ms(lat), At: at(time.Duration(i) * time.Millisecond)})
	}
	// Replica 3 answers last (the newest probe) and fastest.
	p.Add(Probe{Index: 3, RIF: 1, Latency: ms(10), At: at(20 * time.Millisecond)})
	if s := p.Stats(); s.Probes != n {
		t.Errorf("pool holds %d probes of 14 replicas, want 14", s.Probes)
	}
	picks := 0
	for q := range n {
		got, ok := p.Pick(at(30*time.Millisecond), uint64(q))
		if ok && got == 3 {
			picks++
		}
	}
	if picks != 4 {
		t.Errorf("replica 3's probe served %d queries, want b_reuse = 4", picks)
	}
}

// TestPickHotCold checks the hot-cold lexicographic rule on hand-made
// pools.
func TestPickHotCold(t *testing.T) {
	type pr struct {
		idx int
		rif int64
		lat int // ms
	}
	tests := []struct {
		name    string
		qrif    float64
		history []int64 // RIFs received before the pool's probes (probes of replica 9, then aged out)
		probes  []pr
		want    int
		wantThr int64
	}{
		{"all cold: least latency", 0.84, nil, []pr{{0, 2, 50}, {1, 3, 10}, {2, 10, 1}}, 2, 10},
		{"hot one skipped", 0.5, nil, []pr{{0, 2, 50}, {1, 3, 10}, {2, 10, 1}}, 1, 3},
		{"cold latency tie: fewer in flight", 0.84, nil, []pr{{0, 3, 10}, {1, 2, 10}}, 1, 3},
		{"all hot: fewest in flight", 0.5, []int64{0, 0, 0, 0, 0, 0}, []pr{{0, 8, 1}, {1, 5, 90}, {2, 7, 2}}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.QRIF, cfg.RemovePerQuery = tt.qrif, 0
			p := mustPool(t, cfg, 10)
			for _, r := range tt.history {
				p.Add(Probe{Index: 9, RIF: r, At: at(0)})
			}
			if len(tt.history) > 0 {
				p.Pick(at(2*time.Second), 0) // ages the history's probe out of the pool
			}
			for _, q := range tt.probes {
				p.Add(Probe{Index: q.idx, RIF: q.rif, Latency: ms(q.lat), At: at(2 * time.Second)})
			}
			if thr, _ := p.Threshold(); thr != tt.wantThr {
				t.Errorf("Threshold = %d, want %d", thr, tt.wantThr)
			}
			if got, ok := p.Pick(at(2*time.Second), 0); !ok || got != tt.want {
				t.Errorf("Pick = %d, %v, want %d, true", got, ok, tt.want)
			}
		})
	}
}

// TestPoolLifecycle: a probe replaces one of the same replica, a full
// pool evicts its oldest, probes past MaxAge are dropped, an empty pool
// falls back to a random replica, and a probe is used b_reuse times.
func TestPoolLifecycle(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PoolSize, cfg.RemovePerQuery = 2, 0
	p := mustPool(t, cfg, 16) // n = 16 > m = 2: b_reuse = 2/((1−2/16)·3) ≈ 0.76 → 1
	p.Add(Probe{Index: 0, RIF: 1, Latency: ms(5), At: at(0)})
	p.Add(Probe{Index: 0, RIF: 1, Latency: ms(9), At: at(10 * time.Millisecond)}) // replaces
	p.Add(Probe{Index: 1, RIF: 1, Latency: ms(7), At: at(20 * time.Millisecond)})
	if s := p.Stats(); s.Probes != 2 {
		t.Fatalf("probes = %d, want 2 (the second probe of replica 0 replaced the first)", s.Probes)
	}
	p.Add(Probe{Index: 2, RIF: 1, Latency: ms(8), At: at(30 * time.Millisecond)}) // evicts replica 0's
	if got, _ := p.Pick(at(30*time.Millisecond), 0); got != 1 {
		t.Errorf("Pick = %d, want 1 (7ms; replica 0's probe was the oldest and evicted)", got)
	}
	// Replica 1's probe is spent (b_reuse = 1): next is replica 2.
	if got, _ := p.Pick(at(30*time.Millisecond), 0); got != 2 {
		t.Errorf("second Pick = %d, want 2", got)
	}
	if got, ok := p.Pick(at(30*time.Millisecond), 0); ok {
		t.Errorf("Pick on an empty pool = %d, true, want the random fallback", got)
	}
	p.Add(Probe{Index: 3, RIF: 1, Latency: ms(8), At: at(0)})
	if _, ok := p.Pick(at(1100*time.Millisecond), 0); ok {
		t.Error("Pick used a probe older than MaxAge")
	}
	s := p.Stats()
	if s.FromPool != 2 || s.Fallbacks != 2 || s.Expired != 1 {
		t.Errorf("Stats = %+v, want 2 from the pool, 2 fallbacks, 1 expired", s)
	}
}

// TestRemoveAlternates: with r_remove = 1 each query deletes the worst
// probe, then the oldest, in turn.
func TestRemoveAlternates(t *testing.T) {
	cfg := DefaultConfig()
	p := mustPool(t, cfg, 16) // b_reuse = 4: two picks of a probe do not remove it
	for i, l := range []int{10, 20, 30, 40, 50} {
		p.Add(Probe{Index: i, RIF: 1, Latency: ms(l), At: at(time.Duration(i) * time.Millisecond)})
	}
	// Query 1 takes replica 0 (10ms), then removes the worst: replica 4.
	// Query 2 takes replica 0, removes the oldest: replica 0 itself.
	// Query 3 takes replica 1, removes the worst: replica 3.
	want := []int{0, 0, 1, 1}
	for q, w := range want {
		if got, _ := p.Pick(at(10*time.Millisecond), 0); got != w {
			t.Errorf("query %d picked %d, want %d", q+1, got, w)
		}
	}
	if s := p.Stats(); s.Probes != 1 {
		t.Errorf("probes left = %d, want 1 (replica 2)", s.Probes)
	}
}

// TestTargets: the count is ProbesPerQuery rounded at random, the targets
// are distinct and cover the replicas evenly.
func TestTargets(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ProbesPerQuery = 2.5
	p := mustPool(t, cfg, 10)
	hits := make([]int, 10)
	var total int
	dst := make([]int, 0, 8)
	const rounds = 20000
	s := uint64(7)
	for range rounds {
		dst = p.Targets(splitmix(&s), dst[:0])
		if len(dst) != 2 && len(dst) != 3 {
			t.Fatalf("Targets gave %d, want 2 or 3", len(dst))
		}
		seen := map[int]bool{}
		for _, x := range dst {
			if x < 0 || x >= 10 || seen[x] {
				t.Fatalf("Targets = %v: out of range or repeated", dst)
			}
			seen[x] = true
			hits[x]++
		}
		total += len(dst)
	}
	if mean := float64(total) / rounds; math.Abs(mean-2.5) > 0.02 {
		t.Errorf("mean probes per query = %.3f, want 2.5", mean)
	}
	for i, h := range hits {
		if f := float64(h) / float64(total); math.Abs(f-0.1) > 0.01 {
			t.Errorf("replica %d got %.3f of the probes, want 0.1", i, f)
		}
	}
	if got := mustPool(t, DefaultConfig(), 2).Targets(1, nil); len(got) != 2 {
		t.Errorf("Targets over 2 replicas = %v, want both", got)
	}
}

// TestPrequalAvoidsLoadedReplica: replicas report RIF equal to the queue
// they hold; one of ten has a standing queue of 20 and a 100ms latency.
// Over 10000 queries with 3 probes each, answered at once, it gets well
// under a tenth of the queries.
func TestPrequalAvoidsLoadedReplica(t *testing.T) {
	p := mustPool(t, DefaultConfig(), 10)
	s := uint64(3)
	var slow int
	var dst []int
	for q := range 10000 {
		now := at(time.Duration(q) * time.Millisecond)
		dst = p.Targets(splitmix(&s), dst[:0])
		for _, r := range dst {
			rif, lat := int64(2), ms(10)
			if r == 0 {
				rif, lat = 20, ms(100)
			}
			p.Add(Probe{Index: r, RIF: rif, Latency: lat, At: now})
		}
		if i, _ := p.Pick(now, splitmix(&s)); i == 0 {
			slow++
		}
	}
	if slow > 100 {
		t.Errorf("the loaded replica got %d of 10000 queries, want at most 100", slow)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := Config{PoolSize: 0, ProbesPerQuery: -1, RemovePerQuery: math.NaN(), MaxAge: 0, QRIF: 2, Delta: 0, History: 0}
	_, err := New(bad, 0)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New = %v, want ErrInvalidConfig", err)
	}
	for _, f := range []string{"pool_size", "probes_per_query", "remove_per_query", "max_age", "q_rif", "delta", "history", "replicas"} {
		if !strings.Contains(err.Error(), f+":") {
			t.Errorf("error %q does not name %s", err, f)
		}
	}
}

// TestPoolConcurrent: concurrent Add, Pick and Targets (run with -race).
func TestPoolConcurrent(t *testing.T) {
	p := mustPool(t, DefaultConfig(), 32)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := uint64(g)
			dst := make([]int, 0, 4)
			for q := range 3000 {
				now := at(time.Duration(q) * time.Millisecond)
				for _, r := range p.Targets(splitmix(&s), dst[:0]) {
					p.Add(Probe{Index: r, RIF: int64(r % 5), Latency: ms(r), At: now})
				}
				if i, _ := p.Pick(now, splitmix(&s)); i < 0 || i >= 32 {
					t.Errorf("Pick = %d, out of range", i)
				}
			}
		}()
	}
	wg.Wait()
	if s := p.Stats(); s.FromPool+s.Fallbacks != 12000 {
		t.Errorf("picks counted = %d, want 12000", s.FromPool+s.Fallbacks)
	}
}

func TestAllocs(t *testing.T) {
	p := mustPool(t, DefaultConfig(), 100)
	dst := make([]int, 0, 8)
	var s uint64
	q := 0
	if n := testing.AllocsPerRun(1000, func() {
		now := at(time.Duration(q) * time.Millisecond)
		q++
		for _, r := range p.Targets(splitmix(&s), dst[:0]) {
			p.Add(Probe{Index: r, RIF: int64(r % 7), Latency: ms(r), At: now})
		}
		p.Pick(now, splitmix(&s))
	}); n != 0 {
		t.Errorf("a query (Targets, Add, Pick) allocates %v times, want 0", n)
	}
}

// BenchmarkQuery is one query: its probes' targets, their answers added,
// and the pick, over 100 replicas from parallel goroutines.
func BenchmarkQuery(b *testing.B) {
	p := mustPool(b, DefaultConfig(), 100)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := uint64(1)
		dst := make([]int, 0, 8)
		now := at(0)
		for pb.Next() {
			for _, r := range p.Targets(splitmix(&s), dst[:0]) {
				p.Add(Probe{Index: r, RIF: int64(r % 7), Latency: ms(r), At: now})
			}
			p.Pick(now, splitmix(&s))
		}
	})
}
