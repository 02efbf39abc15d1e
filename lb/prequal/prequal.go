package prequal

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"
)

// Config holds Prequal's parameters. Start from DefaultConfig, the
// published ones; the zero value is not valid.
type Config struct {
	// PoolSize is m, the most probes the pool holds. Default 16 ("16
	// suffices" in the paper). Must be in [1, 1024]. The reuse budget is
	// computed with at most half the replicas in its place (ReuseBudget).
	PoolSize int
	// ProbesPerQuery is r_probe, the probes sent per query, rounded at
	// random to an integer each time (2.5 sends 2 or 3). Default 3 (the
	// paper's testbed; YouTube uses 5; below about 1 the tails jump).
	// Must be in [0, 64].
	ProbesPerQuery float64
	// RemovePerQuery is r_remove, the probes deleted from the pool per
	// query, alternately the worst and the oldest, rounded at random.
	// Default 1. Must be in [0, 64].
	RemovePerQuery float64
	// MaxAge drops probes older than this. Default 1s. Must be positive.
	MaxAge time.Duration
	// QRIF is the quantile of the recent requests-in-flight distribution
	// above which a probe is hot. Default 2^−0.25 ≈ 0.84 (recommended 0.6
	// to 0.9). Must be in [0, 1].
	QRIF float64
	// Delta is δ > 0 of the reuse budget b_reuse = max{1, (1+δ) /
	// ((1−m/n)·r_probe − r_remove)}: how fast the pool refills. Default 1
	// (b_reuse ≈ 1.3 for m = 16, n = 100, r_probe = 3, r_remove = 1).
	Delta float64
	// History is how many recent probe answers the RIF quantile is taken
	// over. Default 64 (four pools). Must be in [1, 4096].
	History int
}

// DefaultConfig returns the published parameters (Wydrowski et al., "Load
// is not what you should balance: Introducing Prequal", NSDI 2024, §4–5).
func DefaultConfig() Config {
	return Config{
		PoolSize:       16,
		ProbesPerQuery: 3,
		RemovePerQuery: 1,
		MaxAge:         time.Second,
		QRIF:           math.Pow(2, -0.25),
		Delta:          1,
		History:        64,
	}
}

// ErrInvalidConfig wraps every problem New finds with its arguments.
var ErrInvalidConfig = errors.New("prequal: invalid config")

// Validate reports every problem of c, each naming its field and value,
// joined with errors.Join and wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, rule string, v any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s, got %v", ErrInvalidConfig, field, rule, v))
	}
	if c.PoolSize < 1 || c.PoolSize > 1024 {
		bad("pool_size", "must be in [1, 1024]", c.PoolSize)
	}
	if !(c.ProbesPerQuery >= 0 && c.ProbesPerQuery <= 64) {
		bad("probes_per_query", "must be in [0, 64]", c.ProbesPerQuery)
	}
	if !(c.RemovePerQuery >= 0 && c.RemovePerQuery <= 64) {
		bad("remove_per_query", "must be in [0, 64]", c.RemovePerQuery)
	}
	if c.MaxAge <= 0 {
		bad("max_age", "must be positive", c.MaxAge)
	}
	if !(c.QRIF >= 0 && c.QRIF <= 1) {
		bad("q_rif", "must be in [0, 1]", c.QRIF)
	}
	if !(c.Delta > 0) || math.IsInf(c.Delta, 1) {
		bad("delta", "must be finite and positive", c.Delta)
	}
	if c.History < 1 || c.History > 4096 {
		bad("history", "must be in [1, 4096]", c.History)
	}
	return errors.Join(errs...)
}

// Probe is one probe's answer: replica Index (into the caller's replica
// slice) had RIF requests in flight and estimated its latency at Latency
// (the paper's replicas report the median latency of recent requests
// served at about the current RIF), as received at At.
type Probe struct {
	Index   int
	RIF     int64
	Latency time.Duration
	At      time.Time
}

// entry is a Probe in the pool with its remaining uses.
type entry struct {
	Probe
	at   int64   // At in Unix nanoseconds
	uses float64 // picks left before it is removed
}

// Pool is one client's probe pool over n replicas: the asynchronous mode
// of Prequal. The caller sends the probes Targets asks for after each
// query, off the request's path, hands each answer to Add, and picks with
// Pick. A Pool is built for one replica set (indexes are into it); build a
// new one when the set changes. It is safe for concurrent use: its
// methods take a mutex for a bounded amount of work (O(PoolSize +
// History)) and never block otherwise. Add, Pick and Targets do not
// allocate. A Pool must not be copied.
type Pool struct {
	// Immutable after New.
	cfg    Config
	n      int
	reuse  float64 // b_reuse; +Inf when the pool cannot be refilled
	maxAge int64

	mu sync.Mutex
	// Guarded by mu.
	pool []entry // len ≤ PoolSize
	// hist is a ring of the last History RIFs received, sorted a sorted
	// copy of it: the RIF distribution the hot threshold is taken from.
	hist       []int64
	histNext   int
	sorted     []int64
	worstNext  bool   // the next removal takes the worst probe, else the oldest
	fallbacks  uint64 // picks made at random for want of a probe
	fromPool   uint64
	removedAge uint64
}

// New returns a Pool for n ≥ 1 replicas, or an error wrapping
// ErrInvalidConfig.
func New(cfg Config, n int) (*Pool, error) {
	err := cfg.Validate()
	if n < 1 {
		err = errors.Join(err, fmt.Errorf("%w: replicas: must be >= 1, got %d", ErrInvalidConfig, n))
	}
	if err != nil {
		return nil, err
	}
	p := &Pool{
		cfg:    cfg,
		n:      n,
		reuse:  ReuseBudget(cfg, n),
		maxAge: int64(cfg.MaxAge),
		pool:   make([]entry, 0, cfg.PoolSize),
		hist:   make([]int64, 0, cfg.History),
		sorted: make([]int64, 0, cfg.History),
	}
	p.worstNext = true
	return p, nil
}

// budgetPoolSize returns the pool size m the reuse budget is computed
// with for n replicas: PoolSize, but at most n/2 (and at least 1). The
// paper's bound assumes a pool much smaller than the replica set (m < n in
// equation 1; m = 16 for hundreds of replicas): with m ≥ n its denominator
// (1−m/n)·r_probe − r_remove is negative and every probe would be reusable
// without bound, so one stale answer could draw every query until it aged
// out. With m ≤ n/2 the denominator is at least r_probe/2 − r_remove,
// positive for the published r_probe = 3, r_remove = 1 (b_reuse = 4 for
// up to 32 replicas). The pool itself still holds up to PoolSize probes.
func budgetPoolSize(cfg Config, n int) int {
	return max(1, min(cfg.PoolSize, n/2))
}

// ReuseBudget returns b_reuse = max{1, (1+δ)/((1−m/n)·r_probe −
// r_remove)}, the times a probe may be used (the paper's equation 1), for
// cfg over n replicas with m = min(PoolSize, n/2); +Inf when the denominator
// is still not positive (r_probe ≤ 2·r_remove for a small replica set, or
// too few probes to refill the pool): probes are then used until they age
// out or are removed.
func ReuseBudget(cfg Config, n int) float64 {
	den := (1-float64(budgetPoolSize(cfg, n))/float64(n))*cfg.ProbesPerQuery - cfg.RemovePerQuery
	if den <= 0 {
		return math.Inf(1)
	}
	return max(1, (1+cfg.Delta)/den)
}

// Targets appends to dst the replicas to probe after one query and
// returns it: ProbesPerQuery rounded at random (from rnd), at most n,
// drawn uniformly without replacement (Floyd's algorithm), as the paper
// samples them. It does not allocate when dst has room.
func (p *Pool) Targets(rnd uint64, dst []int) []int {
	s := rnd
	k := stochasticRound(p.cfg.ProbesPerQuery, splitmix(&s))
	k = min(k, p.n)
	start := len(dst)
	for j := p.n - k; j < p.n; j++ {
		t := reduce(splitmix(&s), j+1)
		if slices.Contains(dst[start:], t) {
			t = j
		}
		dst = append(dst, t)
	}
	return dst
}

// Add puts a probe's answer into the pool (dropping it when its Index is
// out of range): it replaces a probe of the same replica, else takes a
// free place, else evicts the oldest. Its RIF joins the distribution the
// hot threshold is taken from.
func (p *Pool) Add(pr Probe) {
	if pr.Index < 0 || pr.Index >= p.n {
		return
	}
	e := entry{Probe: pr, at: pr.At.UnixNano(), uses: p.reuse}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record(pr.RIF)
	if i := slices.IndexFunc(p.pool, func(x entry) bool { return x.Index == pr.Index }); i >= 0 {
		p.pool[i] = e
		return
	}
	if len(p.pool) < cap(p.pool) {
		p.pool = append(p.pool, e)
		return
	}
	p.pool[p.oldestLocked()] = e
}

// record adds rif to the RIF history. Caller must hold p.mu.
func (p *Pool) record(rif int64) {
	if len(p.hist) < cap(p.hist) {
		p.hist = append(p.hist, rif)
	} else {
		old := p.hist[p.histNext]
		p.hist[p.histNext] = rif
		p.histNext = (p.histNext + 1) % len(p.hist)
		i, _ := slices.BinarySearch(p.sorted, old)
		p.sorted = slices.Delete(p.sorted, i, i+1)
	}
	i, _ := slices.BinarySearch(p.sorted, rif)
	p.sorted = slices.Insert(p.sorted, i, rif)
}

// Threshold returns the hot threshold: the QRIF quantile (nearest rank)
// of the recent RIFs, and false when no probe has answered yet. A probe
// whose RIF is above it is hot.
func (p *Pool) Threshold() (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.thresholdLocked()
}

func (p *Pool) thresholdLocked() (int64, bool) {
	k := len(p.sorted)
	if k == 0 {
		return 0, false
	}
	r := int(math.Ceil(p.cfg.QRIF*float64(k))) - 1
	return p.sorted[min(max(r, 0), k-1)], true
}

// Pick chooses a replica for one query at now by the hot-cold
// lexicographic rule, from rnd: probes older than MaxAge are dropped;
// among the remaining probes whose RIF is at most the threshold (cold),
// the one of least latency (ties: fewer in flight, then the older
// probe); when every probe is hot, the one of fewest requests in flight.
// The chosen probe is used once more and leaves the pool when its reuse
// budget is spent; then RemovePerQuery probes (rounded at random) leave
// it, alternately the worst (by the same rule) and the oldest. With no
// probe in the pool Pick returns a replica drawn uniformly from rnd and
// false: the paper's fallback. It does not allocate.
func (p *Pool) Pick(now time.Time, rnd uint64) (int, bool) {
	t := now.UnixNano()
	s := rnd
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pool = slices.DeleteFunc(p.pool, func(e entry) bool {
		old := t-e.at > p.maxAge
		if old {
			p.removedAge++
		}
		return old
	})
	if len(p.pool) == 0 {
		p.fallbacks++
		return reduce(splitmix(&s), p.n), false
	}
	theta, _ := p.thresholdLocked()
	best := p.bestLocked(theta)
	idx := p.pool[best].Index
	p.fromPool++
	if p.pool[best].uses--; p.pool[best].uses < 1 && stochasticRound(p.pool[best].uses, splitmix(&s)) < 1 {
		p.removeLocked(best)
	}
	for range stochasticRound(p.cfg.RemovePerQuery, splitmix(&s)) {
		if len(p.pool) == 0 {
			break
		}
		if p.worstNext {
			p.removeLocked(p.worstLocked(theta))
		} else {
			p.removeLocked(p.oldestLocked())
		}
		p.worstNext = !p.worstNext
	}
	return idx, true
}

// better reports whether a ranks before b by the hot-cold lexicographic
// rule with threshold theta.
func better(a, b *entry, theta int64) bool {
	ah, bh := a.RIF > theta, b.RIF > theta
	switch {
	case ah != bh:
		return !ah // cold before hot
	case !ah: // both cold: least latency
		if a.Latency != b.Latency {
			return a.Latency < b.Latency
		}
	}
	if a.RIF != b.RIF {
		return a.RIF < b.RIF
	}
	return a.at < b.at
}

// bestLocked returns the index in p.pool of the best probe. Caller must
// hold p.mu; the pool is not empty.
func (p *Pool) bestLocked(theta int64) int {
	b := 0
	for i := 1; i < len(p.pool); i++ {
		if better(&p.pool[i], &p.pool[b], theta) {
			b = i
		}
	}
	return b
}

// worstLocked returns the index in p.pool of the worst probe. Caller must
// hold p.mu; the pool is not empty.
func (p *Pool) worstLocked(theta int64) int {
	w := 0
	for i := 1; i < len(p.pool); i++ {
		if better(&p.pool[w], &p.pool[i], theta) {
			w = i
		}
	}
	return w
}

// oldestLocked returns the index in p.pool of the oldest probe. Caller
// must hold p.mu; the pool is not empty.
func (p *Pool) oldestLocked() int {
	o := 0
	for i := 1; i < len(p.pool); i++ {
		if p.pool[i].at < p.pool[o].at {
			o = i
		}
	}
	return o
}

// removeLocked deletes p.pool[i]. Caller must hold p.mu.
func (p *Pool) removeLocked(i int) { p.pool = slices.Delete(p.pool, i, i+1) }

// Stats are a Pool's counters since New.
type Stats struct {
	// Probes is how many probes the pool holds now.
	Probes int
	// FromPool counts picks made from a probe, Fallbacks picks made at
	// random for want of one (a pool starved of probes degrades to
	// random choice: watch this), Expired probes dropped for age.
	FromPool, Fallbacks, Expired uint64
}

// Stats returns the Pool's counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Probes: len(p.pool), FromPool: p.fromPool, Fallbacks: p.fallbacks, Expired: p.removedAge}
}

// stochasticRound returns ⌊x⌋ or ⌈x⌉, the latter with probability equal
// to x's fractional part, from the uniform value u.
func stochasticRound(x float64, u uint64) int {
	if math.IsInf(x, 1) {
		return math.MaxInt
	}
	f := math.Floor(x)
	if float64(u>>11)*0x1p-53 < x-f {
		f++
	}
	return int(f)
}

// splitmix advances the SplitMix64 state s and returns its next value.
func splitmix(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	x := *s
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// reduce maps a uniform 64-bit value to [0, n) (Lemire's multiply-shift).
func reduce(x uint64, n int) int {
	hi, _ := bits.Mul64(x, uint64(n))
	return int(hi)
}
