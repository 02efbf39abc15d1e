package loadaware

import (
	"testing"
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
)

// TestRegistry: the first Sync's backends are established; a backend
// added later, or back after a Sync without it, slow-starts from that
// Sync; one listed at every Sync keeps its state; Forget makes it new.
func TestRegistry(t *testing.T) {
	c := mustNew(t, DefaultConfig())
	a, b, d := backend.New("a:1", 0), backend.New("b:1", 0), backend.New("d:1", 0)
	r := NewRegistry()
	r.Sync([]*backend.Backend{a, b, nil}, at(0))
	ea, eb := r.Endpoint(a), r.Endpoint(b)
	if ea == nil || eb == nil || r.Endpoint(d) != nil {
		t.Fatalf("after the first Sync: a %v, b %v, d %v; want a and b only", ea, eb, r.Endpoint(d))
	}
	if w := c.Weight(ea, at(0)); w != 1 {
		t.Errorf("a at the first Sync: weight %v, want 1 (established)", w)
	}
	c.Observe(ea, at(time.Second), 10*time.Millisecond)
	r.Sync([]*backend.Backend{a, d}, at(10*time.Second)) // b leaves, d is new
	if w := c.Weight(r.Endpoint(d), at(10*time.Second)); w != 0.1 {
		t.Errorf("d new at 10s: weight %v, want 0.1", w)
	}
	r.Sync([]*backend.Backend{a, b, d}, at(20*time.Second)) // b returns
	if r.Endpoint(b) != eb {
		t.Error("b's Endpoint changed when it returned, want the same one")
	}
	if w := c.Weight(eb, at(35*time.Second)); w != 0.5 {
		t.Errorf("b 15s after returning: weight %v, want 0.5", w)
	}
	if got := c.Cost(ea, at(time.Second)); got != 0.010 || r.Endpoint(a) != ea {
		t.Errorf("a, listed at every Sync: cost %v, want its estimate 0.010 kept", got)
	}
	r.Forget(d)
	if r.Endpoint(d) != nil || r.Len() != 2 {
		t.Errorf("after Forget(d): Endpoint %v, Len %d; want nil, 2", r.Endpoint(d), r.Len())
	}
}
