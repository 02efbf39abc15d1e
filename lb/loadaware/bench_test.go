package loadaware

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
)

// BenchmarkAcquire is one pick, its Observe and Release over 16 Endpoints,
// a quarter of them in their slow-start window, from parallel goroutines.
func BenchmarkAcquire(b *testing.B) {
	c := mustNew(b, DefaultConfig())
	es := make([]*Endpoint, 16)
	for i := range es {
		var st time.Time
		if i%4 == 0 {
			st = at(0)
		}
		es[i] = NewEndpoint(backend.New("a:1", 0), st)
		c.Observe(es[i], at(0), ms(5))
	}
	now := at(time.Second)
	var seed atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := seed.Add(1)
		for pb.Next() {
			if i, ok := c.Acquire(es, now, splitmix(&s)); ok {
				c.Observe(es[i], now, ms(5))
				es[i].Backend().Release()
			}
		}
	})
}
