package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/testkit"
)

// TestExec runs the real loadgen command: a whole run reports exactly the
// scheduled requests, and an interrupted one stops early and still reports
// what it sent.
func TestExec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testkit.BuildTimeout)
	bins, err := proc.Build(ctx, t.TempDir(), false, "loadgen")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Spillway-Region", "r1")
	}))
	defer srv.Close()

	res, err := Exec(context.Background(), bins["loadgen"], Config{URL: srv.URL, Rate: 200, Duration: 500 * time.Millisecond, Records: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 100 || res.OK != 100 || res.Routed["r1"] != 100 || len(res.Records) != 100 || res.Start.IsZero() {
		t.Errorf("Sent %d OK %d Routed %v, %d records, start %v; want 100 each from r1", res.Sent, res.OK, res.Routed, len(res.Records), res.Start)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	start := time.Now()
	res, err = Exec(ctx, bins["loadgen"], Config{URL: srv.URL, Rate: 100, Duration: time.Hour})
	if err != nil {
		t.Fatalf("interrupted run: %v", err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("interrupted run took %v, want it to stop when interrupted", took)
	}
	if res.Sent == 0 || res.Sent != res.OK {
		t.Errorf("interrupted run: Sent %d OK %d, want the requests sent before the interrupt, all answered", res.Sent, res.OK)
	}
}
