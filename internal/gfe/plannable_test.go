package gfe

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/snapshot"
)

// TestUnplannableSnapshotIsRefused (the first security review, finding 7:
// SECURITY.md): a snapshot whose capacities are not finite —
// max_rate_per_instance 1e308 on two instances, which a config from before
// the validation bounds, or one that slipped past them, can carry — is
// refused by ApplySnapshot (the control-plane client NACKs with its error),
// and the gfe keeps routing by the previous snapshot and its plan. Before the
// fix the snapshot was accepted and every later plan of the service failed.
func TestUnplannableSnapshotIsRefused(t *testing.T) {
	g := &fakeGossip{node: "gfe-nyc", states: map[string]gossip.NodeState{}}
	e, clk, configFor := twoRegionEdge(t, g)
	e.step(clk.Now())
	front := httptest.NewServer(e.proxy)
	defer front.Close()
	send := func(n int) map[string]int {
		t.Helper()
		got := map[string]int{}
		for range n {
			resp, err := http.Get(front.URL + "/x")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got[resp.Header.Get("X-Spillway-Region")+" "+resp.Status]++
		}
		return got
	}
	if got := send(20); got["us-east 200 OK"] != 20 {
		t.Fatalf("with v1: %v, want 20 × us-east 200", got)
	}

	for _, policy := range []string{"waterfall", "min_rtt", "round_robin"} {
		bad := configFor(policy)
		bad.Services[0].Backends[0].MaxRatePerInstance = 1e308 // past validation, as an attacker's snapshot
		err := e.ApplySnapshot(snapshot.FromConfig("v2-"+policy, bad))
		if err == nil || !strings.Contains(err.Error(), "cannot be planned") || !strings.Contains(err.Error(), "capacity is +Inf") {
			t.Fatalf("%s: ApplySnapshot(1e308) = %v, want a refusal naming the infinite capacity", policy, err)
		}
		t.Logf("%s: refused: %v", policy, err)
	}
	if v := e.Snapshot().Version; v != "v1" {
		t.Fatalf("serving snapshot %s after the refusal, want v1", v)
	}
	clk.Advance(time.Second)
	e.step(clk.Now())
	if v := e.Table().Version; v != "v1" {
		t.Fatalf("table of %s, want v1", v)
	}
	if got := send(20); got["us-east 200 OK"] != 20 {
		t.Fatalf("after the refusal: %v, want 20 × us-east 200", got)
	}
	if st := e.Status(); len(st.Services) != 1 || len(st.Services[0].Plan) == 0 {
		t.Fatalf("status after the refusal: %+v, want a plan", st.Services)
	}
}
