package testbackend

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/prequal"
)

// TestPrequalProbe: GET /.well-known/spillway-probe answers, in
// lb/prequal's wire format, the requests in flight (held ones included)
// and the median of the recent requests' times, which a slowdown raises;
// it takes no capacity and counts as a probe.
func TestPrequalProbe(t *testing.T) {
	capa := DefaultCapacity()
	capa.ServiceTime = 2 * time.Millisecond
	s := startServer(t, Config{Instances: []InstanceConfig{testInstance("a", capa)}}, nil)
	base := "http://" + s.Addr("a")
	c := newClient(t, "")
	probe := func() prequal.Answer {
		t.Helper()
		r := mustDo(t, c, http.MethodGet, base+config.DefaultPrequalProbePath)
		a, err := prequal.ParseAnswer([]byte(r.body))
		if r.status != 200 || err != nil {
			t.Fatalf("probe: %d %q: %v", r.status, r.body, err)
		}
		return a
	}
	if a := probe(); a != (prequal.Answer{}) {
		t.Errorf("probe of a fresh instance = %+v, want rif 0 latency 0", a)
	}
	get := func(n int) {
		for range n {
			if r := mustDo(t, c, http.MethodGet, base+"/x"); r.status != 200 {
				t.Fatalf("GET /x: %d", r.status)
			}
		}
	}
	get(3)
	if a := probe(); a.RIF != 0 || a.Latency < 2*time.Millisecond || a.Latency > 40*time.Millisecond {
		t.Errorf("after 3 requests of 2 ms: %+v, want rif 0 and latency in [2ms, 40ms)", a)
	}
	if r := mustDo(t, c, http.MethodPost, base+"/admin/slow?slowdown=25"); r.status != 200 {
		t.Fatalf("slow: %d", r.status)
	}
	get(5) // 5 of the 8 recent requests at 50 ms: the median is one of them
	if a := probe(); a.Latency < 50*time.Millisecond {
		t.Errorf("after 5 slowed requests: %+v, want latency >= 50ms", a)
	}
	// Two held requests are in flight.
	if r := mustDo(t, c, http.MethodPost, base+"/admin/hold?on=true"); r.status != 200 {
		t.Fatalf("hold: %d", r.status)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get(base + "/held")
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for a := probe(); a.RIF != 2; a = probe() {
		if time.Now().After(deadline) {
			t.Fatalf("probe while 2 requests are held: %+v, want rif 2", a)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
	if r := mustDo(t, c, http.MethodPost, base+"/admin/hold?on=false"); r.status != 200 {
		t.Fatalf("release: %d", r.status)
	}
	wg.Wait()
	if st := getStats(t, c, base); st.Served != 10 || st.Probes < 4 {
		t.Errorf("stats: served %d probes %d; want 10 served (probes take no capacity) and every probe counted", st.Served, st.Probes)
	}
}

// TestLatencyEstimateIsCurrent: the probe's latency estimate follows a
// slowdown and a recovery at once, as measured on the uneven story's
// slowed instance (a median of the last 16 answered 80 ms while its queue
// grew, then 300 ms once it was fast again).
func TestLatencyEstimateIsCurrent(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tests := []struct {
		name string
		obs  []latencySample // done as an offset from t0 in d's place below
		now  time.Duration
		rif  int64
		want time.Duration
	}{
		{
			name: "slowing: the queue grows, the newest requests take 300 ms",
			obs: append(repeat(16, 0, 2, ms(80)),
				repeat(5, ms(900), 8, ms(300))...),
			now: ms(1000), rif: 8, want: ms(300),
		},
		{
			name: "recovered: the queue drained, the newest requests take 10 ms",
			obs: append(repeat(16, ms(700), 8, ms(300)),
				repeat(3, ms(950), 1, ms(10))...),
			now: ms(1000), rif: 1, want: ms(10),
		},
		{
			name: "idle since: the last completions count",
			obs:  repeat(4, 0, 0, ms(20)),
			now:  ms(5000), rif: 0, want: ms(20),
		},
		{name: "nothing completed", now: ms(1), want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l latencies
			for _, o := range tt.obs {
				l.observe(t0.Add(time.Duration(o.done.UnixNano())), o.rif, o.d)
			}
			if got := l.estimate(t0.Add(tt.now), tt.rif); got != tt.want {
				t.Errorf("estimate at rif %d = %v, want %v", tt.rif, got, tt.want)
			}
		})
	}
}

// repeat returns n samples that arrived at rif, took d and ended at
// offset from the test's start (stored as Unix nanoseconds in done).
func repeat(n int, offset time.Duration, rif int64, d time.Duration) []latencySample {
	s := make([]latencySample, n)
	for i := range s {
		s[i] = latencySample{done: time.Unix(0, int64(offset)), rif: rif, d: d}
	}
	return s
}
