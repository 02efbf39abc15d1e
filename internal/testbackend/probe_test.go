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
