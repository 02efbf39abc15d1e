package waterfall

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/lb/loadaware"
)

var laEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func endpointsOf(group string, n int, limit int64) []*loadaware.Endpoint {
	es := make([]*loadaware.Endpoint, n)
	for i, b := range backendsOf(group, n, limit) {
		es[i] = loadaware.NewEndpoint(b, time.Time{})
	}
	return es
}

func mustChooser(t testing.TB) *loadaware.Chooser {
	t.Helper()
	c, err := loadaware.New(loadaware.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPickLoadAware: groups are still chosen by their plan shares, while
// inside a group the load-aware chooser avoids an instance whose latency
// is 20 times the others'; each Choice carries its Endpoint.
func TestPickLoadAware(t *testing.T) {
	c := mustChooser(t)
	a, b := endpointsOf("a", 3, 0), endpointsOf("b", 3, 0)
	now := laEpoch
	for i, e := range append(append([]*loadaware.Endpoint(nil), a...), b...) {
		l := 10 * time.Millisecond
		if i == 0 {
			l = 200 * time.Millisecond // a's first instance is slow
		}
		c.Observe(e, now, l)
	}
	p := NewPickerLoadAware([]Flow{{Region: "r1", Group: "a", Share: 0.75}, {Region: "r2", Group: "b", Share: 0.25}},
		map[string][]*loadaware.Endpoint{"a": a, "b": b}, nil, c)
	rng := rand.New(rand.NewPCG(1, 2))
	perGroup := map[string]int{}
	slow := 0
	const n = 20000
	for range n {
		ch, err := p.PickAt(rng.Uint64(), now)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Endpoint == nil || ch.Endpoint.Backend() != ch.Backend {
			t.Fatalf("Choice %+v does not carry its Endpoint", ch)
		}
		perGroup[ch.Group]++
		if ch.Endpoint == a[0] {
			slow++
		}
		ch.Done()
	}
	if got := float64(perGroup["a"]) / n; math.Abs(got-0.75) > 0.01 {
		t.Errorf("group a got %.3f of the picks, want its share 0.75", got)
	}
	if slow != 0 {
		t.Errorf("the slow instance got %d picks, want 0 (its cost is 20 times the others')", slow)
	}
}

// TestPickLoadAwareFallbacks: a full group's demoted endpoints come
// before the next group; soft limits move requests but never refuse
// them; with everything full PickAt returns ErrAllBusy.
func TestPickLoadAwareFallbacks(t *testing.T) {
	c := mustChooser(t)
	a, ad, b := endpointsOf("a", 1, 1), endpointsOf("ad", 1, 1), endpointsOf("b", 1, 1)
	p := NewPickerLoadAware([]Flow{{Group: "a", Share: 1}, {Group: "b", Share: 0}},
		map[string][]*loadaware.Endpoint{"a": a, "b": b}, map[string][]*loadaware.Endpoint{"a": ad}, c)
	var got []*loadaware.Endpoint
	for range 3 {
		ch, err := p.PickAt(0, laEpoch)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ch.Endpoint)
	}
	if got[0] != a[0] || got[1] != ad[0] || got[2] != b[0] {
		t.Errorf("picks = %v, want a's active, a's demoted, then b", got)
	}
	if _, err := p.PickAt(0, laEpoch); err != ErrAllBusy {
		t.Errorf("PickAt with every backend full: %v, want ErrAllBusy", err)
	}
	for _, e := range got {
		e.Backend().Release()
	}
	a[0].Backend().SetSoftLimit(1)
	a[0].Backend().TryAcquire()
	b[0].Backend().SetMaxConcurrency(0)
	if ch, err := p.PickAt(0, laEpoch); err != nil || ch.Endpoint != ad[0] {
		t.Errorf("past a's soft limit: %v, %v, want a's demoted", ch.Endpoint, err)
	}
}

func TestPickLoadAwareAllocs(t *testing.T) {
	c := mustChooser(t)
	a, b := endpointsOf("a", 4, 0), endpointsOf("b", 4, 0)
	p := NewPickerLoadAware([]Flow{{Group: "a", Share: 0.5}, {Group: "b", Share: 0.5}}, map[string][]*loadaware.Endpoint{"a": a, "b": b}, nil, c)
	rng := rand.New(rand.NewPCG(1, 2))
	if n := testing.AllocsPerRun(1000, func() {
		ch, err := p.PickAt(rng.Uint64(), laEpoch)
		if err != nil {
			t.Fatal(err)
		}
		c.Observe(ch.Endpoint, laEpoch, time.Millisecond)
		ch.Done()
	}); n != 0 {
		t.Errorf("PickAt allocates %v times per pick, want 0", n)
	}
}

func BenchmarkPickLoadAware(b *testing.B) {
	c := mustChooser(b)
	groups := map[string][]*loadaware.Endpoint{}
	var row []Flow
	for _, g := range []string{"a", "b", "c"} {
		groups[g] = endpointsOf(g, 16, 0)
		row = append(row, Flow{Group: g, Share: 1.0 / 3})
	}
	p := NewPickerLoadAware(row, groups, nil, c)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.NewPCG(rand.Uint64(), 3)
		for pb.Next() {
			ch, err := p.PickAt(rng.Uint64(), laEpoch)
			if err != nil {
				panic(err)
			}
			c.Observe(ch.Endpoint, laEpoch, time.Millisecond)
			ch.Done()
		}
	})
}
