package testbackend

import (
	"cmp"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/prequal"
)

// The Prequal probe (GET /.well-known/spillway-probe, config
// prequal.probe_path's default): the instance answers its requests in
// flight (served and queued) and its latency estimate in lb/prequal's wire
// format ("rif=N latency_us=M\n"). The estimate follows the paper's rule
// (Wydrowski et al., NSDI 2024, §4: a replica answers the median latency
// of its recently completed queries at about its current RIF): the median
// time, from admission to the end of service (queueing, hold and slowdown
// included), of the requests completed in the last latencyMaxAge that
// arrived at about the RIF the instance has now (latencies.estimate); 0
// before the first. So a slowing instance whose queue grows answers the
// time of the requests that met that queue, not of the fast ones before
// it, and a recovered one the time of its requests since, not of the slow
// ones that drained. The probe gets the emulated RTT of its source, like
// /rtt, but takes no capacity and is not a normal request; it counts in
// Stats.Probes.

const (
	// latencyWindow is how many recent completions the estimate is drawn
	// from.
	latencyWindow = 64
	// latencyMaxAge is how recent a completion must be to count; with
	// none that recent the estimate is drawn from the whole window.
	latencyMaxAge = 500 * time.Millisecond
	// latencyNear is how many completions of the nearest RIF the median
	// is taken over, at most.
	latencyNear = 8
)

// latencySample is one completed request: when it ended, the requests in
// flight and queued when it arrived (itself not counted), and its time.
type latencySample struct {
	done time.Time
	rif  int64
	d    time.Duration
}

// latencies is a ring of the last latencyWindow completions. Safe for
// concurrent use.
type latencies struct {
	mu   sync.Mutex
	ring [latencyWindow]latencySample
	n    int // filled entries, up to latencyWindow
	next int
}

// observe records one request that arrived at rif requests in flight and
// queued, took d and ended at done.
func (l *latencies) observe(done time.Time, rif int64, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[l.next] = latencySample{done: done, rif: rif, d: d}
	l.next = (l.next + 1) % latencyWindow
	l.n = min(l.n+1, latencyWindow)
}

// estimate returns the latency estimate at now for an instance with rif
// requests in flight and queued: of the completions in the last
// latencyMaxAge (all recorded ones when none is that recent), those whose
// arrival RIF is nearest rif, within max(1, rif/4) of the nearest, the
// latencyNear newest of them; their median (the lower one of an even
// count). 0 when nothing is recorded.
func (l *latencies) estimate(now time.Time, rif int64) time.Duration {
	l.mu.Lock()
	s := l.ring
	n := l.n
	l.mu.Unlock()
	v := s[:n]
	if n == 0 {
		return 0
	}
	recent := slices.DeleteFunc(slices.Clone(v), func(x latencySample) bool { return now.Sub(x.done) > latencyMaxAge })
	if len(recent) > 0 {
		v = recent
	}
	dist := func(x latencySample) int64 { return max(x.rif-rif, rif-x.rif) }
	slices.SortFunc(v, func(a, b latencySample) int {
		if c := cmp.Compare(dist(a), dist(b)); c != 0 {
			return c
		}
		return b.done.Compare(a.done) // newer first
	})
	tol := dist(v[0]) + max(1, rif/4)
	k := 0
	for k < len(v) && k < latencyNear && dist(v[k]) <= tol {
		k++
	}
	ds := make([]time.Duration, k)
	for i := range k {
		ds[i] = v[i].d
	}
	slices.Sort(ds)
	return ds[(k-1)/2]
}

// serveProbe answers a Prequal probe (see above).
func (in *instance) serveProbe(w http.ResponseWriter, r *http.Request) {
	if in.delay(r, source(r)) != nil {
		return
	}
	in.probes.Add(1)
	inFlight, queued, _, _ := in.lim.load()
	rif := int64(inFlight + queued)
	var buf [prequal.MaxAnswerSize]byte
	b := prequal.AppendAnswer(buf[:0], rif, in.latency.estimate(in.clock.Now(), rif))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// probeRoute is the probe's route pattern on the instance's mux.
const probeRoute = "GET " + config.DefaultPrequalProbePath
