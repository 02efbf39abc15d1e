package routing_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/prequal"
	"github.com/spillway-lb/spillway/lb/routing"
)

// instantProber answers every probe at once from its table of answers by
// backend address, on the clock's time, until it is stopped; it counts
// the probes asked for by address.
type instantProber struct {
	clk     *clock.Fake
	answers map[string]prequal.Answer
	stopped bool
	asked   map[string]int
}

func (p *instantProber) Probe(t routing.ProbeTarget) {
	p.asked[t.Backend.Addr()]++
	if a, ok := p.answers[t.Backend.Addr()]; ok && !p.stopped {
		t.Answer(a, p.clk.Now())
	}
}

// prequalTable builds a table for service web with policy prequal over
// perRegion instances in us-east (127.0.0.1) and as many in eu-west
// (127.0.0.2), ports from 1001, probed by p.
func prequalTable(t *testing.T, p routing.Prober, clk *clock.Fake, perRegion int) *routing.Service {
	t.Helper()
	var east, west []string
	for i := range perRegion {
		east = append(east, fmt.Sprintf("127.0.0.1:%d", 1001+i))
		west = append(west, fmt.Sprintf("127.0.0.2:%d", 1001+i))
	}
	cfg := gfetest.TwoRegionConfig(t, "prequal", east, west, 1000)
	b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1},
		routing.Options{Now: clk.Now, Rand: gfetest.Rand(), Prober: p})
	tbl, problems := b.Build(routing.Input{Fleet: &snapshot.FromConfig("v1", cfg).Fleet,
		Self: routing.Peer{Node: "gfe-nyc", Site: "nyc", RTT: map[string]float64{"us-east": 5, "eu-west": 80}}, Now: clk.Now()})
	if len(problems) > 0 {
		t.Fatalf("build: %v", problems)
	}
	return tbl.Services["web"]
}

// pickN makes n picks at the clock's time, releasing each, and counts them
// by backend address.
func pickN(t *testing.T, svc *routing.Service, clk *clock.Fake, n int, rnd func() uint64) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		pk, err := svc.PickAt(rnd(), routing.Flow{}, clk.Now())
		if err != nil {
			t.Fatalf("pick: %v", err)
		}
		got[pk.Backend.Addr()]++
		pk.Done()
	}
	return got
}

// TestPrequalPicksColdLowestLatency: over probes of every region, the pick
// goes to the cold instance of least latency (in the far region: prequal
// ignores regions), not to the hot one whose latency is lower still. Hot
// is relative (above the 84th percentile of the last 64 answers): with one
// instance in sixteen loaded it is hot unless chance gives it more than
// 16% of a window's answers, which happens in a few windows of a
// thousand picks.
func TestPrequalPicksColdLowestLatency(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	const best, hot = "127.0.0.2:1003", "127.0.0.1:1002"
	p := &instantProber{clk: clk, asked: map[string]int{}, answers: map[string]prequal.Answer{}}
	for i := range 8 {
		p.answers[fmt.Sprintf("127.0.0.1:%d", 1001+i)] = prequal.Answer{RIF: 1, Latency: time.Duration(30+i) * time.Millisecond}
		p.answers[fmt.Sprintf("127.0.0.2:%d", 1001+i)] = prequal.Answer{RIF: 2, Latency: time.Duration(40+i) * time.Millisecond}
	}
	p.answers[best] = prequal.Answer{RIF: 2, Latency: 5 * time.Millisecond}
	p.answers[hot] = prequal.Answer{RIF: 50, Latency: time.Millisecond}
	svc := prequalTable(t, p, clk, 8)
	rnd := gfetest.Rand()
	pickN(t, svc, clk, 10, rnd) // fill the pool
	got := pickN(t, svc, clk, 1000, rnd)
	t.Logf("picks: %v", got)
	// Over sixteen instances a probe serves at most b_reuse = 4 queries
	// (lb/prequal.ReuseBudget): the best instance takes the queries after
	// each of its probes (3 in 16 queries probe it), not all.
	most := 0
	for a, n := range got {
		if a != best {
			most = max(most, n)
		}
	}
	if got[best] < 400 || got[best] <= most || got[hot] > 20 {
		t.Errorf("%s (cold, 5 ms) got %d of 1000 picks (next most %d), %s (hot, 1 ms) %d; want at least 400 and the most, and at most 20 (2%%) for the hot one, not the most, as by latency alone", best, got[best], most, hot, got[hot])
	}
	// Three probes per pick, spread over all sixteen instances.
	total := 0
	for a, n := range p.asked {
		total += n
		if n < 100 {
			t.Errorf("%s asked for %d probes in 1010 picks, want every instance probed (≥ 100)", a, n)
		}
	}
	if total != 3030 || len(p.asked) != 16 {
		t.Errorf("%d probes of %d instances for 1010 picks, want 3 per pick of all 16", total, len(p.asked))
	}
	st, ok := svc.PrequalStats()
	if !ok || st.Fallbacks != 1 || st.FromPool != 1009 {
		t.Errorf("stats %+v, %v; want 1 fallback (the first pick) and 1009 from the pool", st, ok)
	}
}

// TestPrequalPoolAges: probes older than a second leave the pool; with no
// new answer the picks fall back to least request, counted, and the pool
// refills as soon as probes answer again.
func TestPrequalPoolAges(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	p := &instantProber{clk: clk, asked: map[string]int{}, answers: map[string]prequal.Answer{}}
	for i := range 4 {
		p.answers[fmt.Sprintf("127.0.0.1:%d", 1001+i)] = prequal.Answer{RIF: 1, Latency: 10 * time.Millisecond}
		p.answers[fmt.Sprintf("127.0.0.2:%d", 1001+i)] = prequal.Answer{RIF: 1, Latency: 10 * time.Millisecond}
	}
	svc := prequalTable(t, p, clk, 4)
	rnd := gfetest.Rand()
	pickN(t, svc, clk, 5, rnd)
	p.stopped = true
	clk.Advance(999 * time.Millisecond)
	pickN(t, svc, clk, 1, rnd)
	st, _ := svc.PrequalStats()
	if st.Fallbacks != 1 || st.Probes == 0 {
		t.Fatalf("at 999 ms: %+v; want the pool still holding probes and only the first pick's fallback", st)
	}
	clk.Advance(2 * time.Millisecond)
	pickN(t, svc, clk, 10, rnd)
	st, _ = svc.PrequalStats()
	if st.Probes != 0 || st.Fallbacks != 11 || st.Expired == 0 {
		t.Fatalf("after 1.001 s without answers: %+v; want an empty pool, 11 fallbacks, expired probes", st)
	}
	p.stopped = false
	pickN(t, svc, clk, 2, rnd)
	st, _ = svc.PrequalStats()
	if st.Fallbacks != 12 || st.Probes == 0 {
		t.Errorf("answers again: %+v; want one more fallback, then picks from the refilled pool", st)
	}
}

// TestPrequalWithoutProber: with no Prober a prequal service still picks,
// by least request, over every region.
func TestPrequalWithoutProber(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	svc := prequalTable(t, nil, clk, 4)
	got := pickN(t, svc, clk, 800, gfetest.Rand())
	if len(got) != 8 {
		t.Errorf("picks %v, want all 8 instances of both regions", got)
	}
	if st, _ := svc.PrequalStats(); st.Fallbacks != 800 {
		t.Errorf("stats %+v, want 800 fallbacks", st)
	}
}
