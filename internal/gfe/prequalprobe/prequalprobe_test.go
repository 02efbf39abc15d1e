package prequalprobe

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/routing"
)

// answering is a RoundTripper that answers every probe at once with a
// valid answer, without the network, and counts them.
type answering struct{ n atomic.Int64 }

func (a *answering) RoundTrip(r *http.Request) (*http.Response, error) {
	a.n.Add(1)
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("rif=1 latency_us=10\n")), Request: r}, nil
}

func target(service string, rate float64, addr string) routing.ProbeTarget {
	q := config.DefaultPrequal()
	q.ProbeRate = rate
	return routing.ProbeTarget{Service: service, Config: q, Backend: backend.New(addr, 0)}
}

// TestRateCap: however many probes the picks ask for, a service sends at
// most its burst at once and then probe_rate per second, on the injected
// clock; the excess is counted as dropped, and another service has a
// bucket of its own.
func TestRateCap(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	tr := &answering{}
	// Room for every probe in flight: only the rate drops any.
	s, err := New(Options{Transport: tr, Clock: clk, MaxOutstanding: 10000})
	if err != nil {
		t.Fatal(err)
	}
	const rate = 100
	for range 1000 { // a burst of requests at one instant
		s.Probe(target("web", rate, "127.0.0.1:1"))
	}
	s.wg.Wait()
	if got, want := tr.n.Load(), int64(Burst); got != want {
		t.Errorf("a burst of 1000 probes at once sent %d, want the burst %d", got, want)
	}
	// One second of requests every 10 ms, ten each: one token per 10 ms.
	for range 100 {
		clk.Advance(10 * time.Millisecond)
		for range 10 {
			s.Probe(target("web", rate, "127.0.0.1:1"))
		}
	}
	s.wg.Wait()
	if got, want := tr.n.Load(), int64(Burst+rate); got != want {
		t.Errorf("after 1 s more of 1000 probes asked for: %d sent, want burst + rate = %d", got, want)
	}
	m := s.metrics.of("web")
	if sent, limited := testutil.ToFloat64(m.sent), testutil.ToFloat64(m.limited); sent != Burst+rate || limited != 2000-Burst-rate {
		t.Errorf("metrics: sent %v, dropped for rate %v; want %d and %d", sent, limited, Burst+rate, 2000-Burst-rate)
	}
	// A low rate caps the burst too, and another service is not affected.
	for range 50 {
		s.Probe(target("slow", 2, "127.0.0.1:2"))
	}
	s.wg.Wait()
	if got := testutil.ToFloat64(s.metrics.of("slow").sent); got != 2 {
		t.Errorf("service slow (probe_rate 2) sent %v of a burst, want 2", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = s.Run(ctx)
	s.Probe(target("web", rate, "127.0.0.1:1"))
	if got := tr.n.Load(); got != Burst+rate+2 {
		t.Errorf("after Run returned a probe was sent (%d)", got)
	}
}

// TestBusyCap: no more than MaxOutstanding probes are in flight at once;
// the others are dropped as busy, not queued.
func TestBusyCap(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		<-release
		fmt.Fprint(w, "rif=0 latency_us=1")
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	s, err := New(Options{Transport: tr, MaxOutstanding: 3})
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(srv.URL, "http://")
	for range 10 {
		s.Probe(target("web", 1000, addr))
	}
	m := s.metrics.of("web")
	if sent, busy := testutil.ToFloat64(m.sent), testutil.ToFloat64(m.busy); sent != 3 || busy != 7 {
		t.Errorf("10 probes with 3 outstanding at most: sent %v, busy %v; want 3 and 7", sent, busy)
	}
	close(release)
	s.wg.Wait()
	if got := testutil.ToFloat64(m.answered); got != 3 {
		t.Errorf("answered %v, want 3", got)
	}
}

// TestLyingBackends: what a backend answers a probe with, from valid to
// garbage; only a valid answer (clamped if need be) counts as answered,
// every other is counted by reason and never reaches the pool.
func TestLyingBackends(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   string // the counter expected at 1
	}{
		{"valid", 200, "rif=3 latency_us=1500\n", "answered"},
		{"clamped", 200, "rif=99999999 latency_us=999999999999", "clamped"},
		{"garbage", 200, "<html>hello</html>", "invalid"},
		{"negative", 200, "rif=-5 latency_us=0", "invalid"},
		{"oversize", 200, "rif=1 latency_us=1" + strings.Repeat(" ", 1<<16), "invalid"},
		{"empty", 200, "", "invalid"},
		{"status", 503, "rif=0 latency_us=0", "status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != config.DefaultPrequalProbePath || r.Method != http.MethodGet {
					http.Error(w, "wrong probe", 400)
					return
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			s, err := New(Options{Transport: tr})
			if err != nil {
				t.Fatal(err)
			}
			s.Probe(target("web", 1000, strings.TrimPrefix(srv.URL, "http://")))
			s.wg.Wait()
			m := s.metrics.of("web")
			got := map[string]float64{
				"answered": testutil.ToFloat64(m.answered), "clamped": testutil.ToFloat64(m.clamped),
				"invalid": testutil.ToFloat64(m.invalid), "status": testutil.ToFloat64(m.status), "transport": testutil.ToFloat64(m.transport),
			}
			want := map[string]float64{"answered": 0, "clamped": 0, "invalid": 0, "status": 0, "transport": 0}
			want[tt.want] = 1
			if tt.want == "clamped" {
				want["answered"] = 1
			}
			for k := range want {
				if got[k] != want[k] {
					t.Errorf("%s = %v, want %v (all: %v)", k, got[k], want[k], got)
				}
			}
		})
	}
	// No answer at all: a closed port.
	s, _ := New(Options{Transport: &http.Transport{}})
	s.Probe(target("web", 1000, "127.0.0.1:1"))
	s.wg.Wait()
	if got := testutil.ToFloat64(s.metrics.of("web").transport); got != 1 {
		t.Errorf("probe of a closed port: transport errors %v, want 1", got)
	}
}

// TestAnswersReachThePool: through a real table, the Sender's answers
// from real backends fill the service's probe pool, and the pick goes to
// the instance that reports itself idle and fast.
func TestAnswersReachThePool(t *testing.T) {
	serve := func(body string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == config.DefaultPrequalProbePath {
				io.WriteString(w, body)
			}
		}))
	}
	fast, slow := serve("rif=0 latency_us=1000"), serve("rif=0 latency_us=90000")
	defer fast.Close()
	defer slow.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	s, err := New(Options{Transport: tr, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	fastAddr, slowAddr := strings.TrimPrefix(fast.URL, "http://"), strings.TrimPrefix(slow.URL, "http://")
	cfg := gfetest.TwoRegionConfig(t, "prequal", []string{slowAddr}, []string{fastAddr}, 1000)
	b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1}, routing.Options{Now: clk.Now, Rand: gfetest.Rand(), Prober: s})
	tbl, _ := b.Build(routing.Input{Fleet: &snapshot.FromConfig("v1", cfg).Fleet, Self: routing.Peer{Node: "gfe-nyc", Site: "nyc"}, Now: clk.Now()})
	svc := tbl.Services["web"]
	got := map[string]int{}
	for range 20 {
		pk, err := svc.Pick(1, routing.Flow{})
		if err != nil {
			t.Fatal(err)
		}
		got[pk.Backend.Addr()]++
		pk.Done()
		s.wg.Wait() // the probes this pick asked for are in the pool
		clk.Advance(10 * time.Millisecond)
	}
	st, _ := svc.PrequalStats()
	if st.FromPool != 19 || got[fastAddr] < 19 {
		t.Errorf("picks %v, pool %+v; want every pick after the first from the pool, to %s (1 ms)", got, st, fastAddr)
	}
}
