package testbackend

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/prequal"
)

// The Prequal probe (GET /.well-known/spillway-probe, config
// prequal.probe_path's default): the instance answers its requests in
// flight (served and queued) and its latency estimate, the median of the
// last latencyWindow normal requests' times from admission to the end of
// service (queueing, hold and slowdown included; 0 before the first), in
// lb/prequal's wire format ("rif=N latency_us=M\n"). The probe gets the
// emulated RTT of its source, like /rtt, but takes no capacity and is not
// a normal request; it counts in Stats.Probes.

// latencyWindow is how many recent requests the latency estimate is the
// median of.
const latencyWindow = 16

// latencies is a ring of the last latencyWindow request times. Safe for
// concurrent use.
type latencies struct {
	mu   sync.Mutex
	ring [latencyWindow]time.Duration
	n    int // filled entries, up to latencyWindow
	next int
}

// observe records one request's time.
func (l *latencies) observe(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[l.next] = d
	l.next = (l.next + 1) % latencyWindow
	l.n = min(l.n+1, latencyWindow)
}

// median returns the median of the recorded times (the lower one of an
// even count), 0 when none is.
func (l *latencies) median() time.Duration {
	l.mu.Lock()
	s := l.ring
	n := l.n
	l.mu.Unlock()
	v := s[:n]
	if n == 0 {
		return 0
	}
	slices.Sort(v)
	return v[(n-1)/2]
}

// serveProbe answers a Prequal probe (see above).
func (in *instance) serveProbe(w http.ResponseWriter, r *http.Request) {
	if in.delay(r, source(r)) != nil {
		return
	}
	in.probes.Add(1)
	inFlight, queued, _, _ := in.lim.load()
	var buf [prequal.MaxAnswerSize]byte
	b := prequal.AppendAnswer(buf[:0], int64(inFlight+queued), in.latency.median())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// probeRoute is the probe's route pattern on the instance's mux.
const probeRoute = "GET " + config.DefaultPrequalProbePath
