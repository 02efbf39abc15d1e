package loadgen

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"
)

func TestRunCountsByRegionAndSource(t *testing.T) {
	var mu sync.Mutex
	fromIP := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		fromIP[host]++
		n := fromIP[host]
		mu.Unlock()
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		region := "us-east"
		if n%2 == 0 {
			region = "eu-west"
		}
		w.Header().Set("X-Spillway-Region", region)
		w.Header().Set("X-Spillway-Backend", "b1")
	}))
	defer srv.Close()

	res, err := Run(context.Background(), Config{
		URL:      srv.URL + "/",
		Rate:     400,
		Duration: 500 * time.Millisecond,
		Sources:  Sources(netip.MustParseAddr("127.0.3.1"), 4),
	})
	if err != nil {
		t.Fatal(err)
	}
	// 400/s for 0.5 s: about 200 requests; the ticker may lag a little.
	if res.Sent < 150 || res.Sent > 210 {
		t.Errorf("Sent = %d, want about 200", res.Sent)
	}
	if res.OK != res.Sent || res.Failed != 0 {
		t.Errorf("OK = %d, Failed = %d, want OK = Sent = %d", res.OK, res.Failed, res.Sent)
	}
	if got := res.ByRegion["us-east"] + res.ByRegion["eu-west"]; got != res.OK {
		t.Errorf("ByRegion sums to %d, want %d", got, res.OK)
	}
	if got := res.Routed["us-east"] + res.Routed["eu-west"]; got != res.Sent {
		t.Errorf("Routed sums to %d, want %d", got, res.Sent)
	}
	mu.Lock()
	if len(fromIP) != 4 {
		t.Errorf("requests came from %d source addresses (%v), want 4", len(fromIP), fromIP)
	}
	mu.Unlock()
	if p := res.Percentile(50); p <= 0 {
		t.Errorf("Percentile(50) = %v, want > 0", p)
	}

	bad, err := Run(context.Background(), Config{URL: srv.URL + "/fail", Rate: 200, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if bad.OK != 0 || bad.Failed != bad.Sent || bad.Status[503] != bad.Sent {
		t.Errorf("failing target: OK=%d Failed=%d Status=%v Sent=%d", bad.OK, bad.Failed, bad.Status, bad.Sent)
	}
}

func TestPercentile(t *testing.T) {
	r := &Result{}
	for i := 1; i <= 100; i++ {
		r.Latencies = append(r.Latencies, time.Duration(i)*time.Millisecond)
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {1, time.Millisecond}} {
		if got := r.Percentile(tt.p); got != tt.want {
			t.Errorf("Percentile(%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
}

func TestConfigRequired(t *testing.T) {
	if _, err := Run(context.Background(), Config{}); err == nil {
		t.Fatal("Run(Config{}) succeeded, want error")
	}
}

func TestWarmupIsNotRecorded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	res, err := Run(context.Background(), Config{URL: srv.URL, Rate: 500, Duration: 600 * time.Millisecond, Warmup: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// 500/s over the 0.3 s after warmup: about 150 recorded of about 300 sent.
	if res.Sent < 110 || res.Sent > 170 {
		t.Errorf("Sent = %d with half the run as warmup, want about 150", res.Sent)
	}
}
