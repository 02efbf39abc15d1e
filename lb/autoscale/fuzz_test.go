package autoscale

import (
	"testing"
	"time"
)

// FuzzTick: over any sequence of samples, every decision keeps the
// invariants of Tick: Recommended in [min, max], Running = Recommended +
// Demoted, counts never negative, a rise is promotions plus starts, and
// a group recommended at zero leaves it only on demand.
func FuzzTick(f *testing.F) {
	f.Add(uint8(0), uint8(5), []byte{10, 0, 200, 3, 0, 0, 0, 0, 90, 90, 1, 1})
	f.Add(uint8(2), uint8(3), []byte{255, 255, 255, 255, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, lo, hi uint8, data []byte) {
		c := testConfig()
		c.MinInstances, c.MaxInstances = int(lo%20), int(lo%20)+1+int(hi%50)
		c.ConcurrencyWindow, c.CPUWindow, c.DemotedIdleWindow = 5*time.Second, 5*time.Second, 5*time.Second
		c.ConcurrencyLongWindow, c.IdleTimeout = 20*time.Second, 30*time.Second
		now := t0
		a := New(c, int(hi%60), now)
		prev := a.Recommended()
		for i := 0; i+3 < len(data); i += 4 {
			s := Sample{CPUCores: float64(data[i]) / 8, Concurrency: float64(data[i+1]) / 2, Requests: int64(data[i+2] % 4), ACT: float64(data[i+3] % 12)}
			now = now.Add(time.Second)
			d := a.Tick(now, s)
			if d.Recommended < c.MinInstances || d.Recommended > c.MaxInstances {
				t.Fatalf("Recommended %d outside [%d, %d]", d.Recommended, c.MinInstances, c.MaxInstances)
			}
			if d.Running != d.Recommended+d.Demoted || d.Start < 0 || d.Stopped < 0 || d.Promoted < 0 || d.Demoted < 0 {
				t.Fatalf("inconsistent decision %+v", d)
			}
			if prev == 0 && d.Recommended > 0 && s.Requests == 0 && s.Concurrency == 0 && d.Driver != DriverMin {
				t.Fatalf("left zero without demand: %+v after %+v", d, s)
			}
			if d.Start > 0 && d.Start+d.Promoted != d.Recommended-prev {
				t.Fatalf("started %d + promoted %d for a rise %d → %d", d.Start, d.Promoted, prev, d.Recommended)
			}
			prev = d.Recommended
		}
	})
}
