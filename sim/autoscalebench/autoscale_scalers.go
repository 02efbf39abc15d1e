package autoscalebench

import (
	"math"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/autoscale"
	"github.com/spillway-lb/spillway/lb/autoscale/kpa"
)

// cloudRunScaler drives lb/autoscale with its defaults at the model's
// target. While requests wait, on-demand starts are sized by the arrival
// rate of the last second (Config.RateStarts) before the pending queue's
// per-request rule. With the waterfall, the spilled demand reaches it as
// concurrency by Little's law, as the controller computes it
// (controller.Load).
type cloudRunScaler struct {
	m    Model
	cold time.Duration
	cfg  autoscale.Config
	a    *autoscale.Autoscaler
	// recent is the arrivals of the last 10 steps (one second), a ring.
	recent [10]int64
	next   int
}

// newCloudRunScaler returns the rules' scaler; each of with changes the
// autoscaling block after the model's settings (the evidence rows'
// Knative constants).
func newCloudRunScaler(m Model, cold time.Duration, initial int, with ...func(*config.Autoscaling)) *cloudRunScaler {
	a := config.DefaultAutoscaling()
	a.MaxInstances, a.InitialInstances = m.MaxInstances, initial
	a.MaxConcurrencyPerInstance, a.ColdStart = m.MaxConcurrency, cold
	a.CPUTarget, a.ConcurrencyTarget = m.Target, m.Target
	for _, w := range with {
		w(&a)
	}
	cfg := a.Rules()
	return &cloudRunScaler{m: m, cold: cold, cfg: cfg, a: autoscale.New(cfg, initial, time.Unix(0, 0).UTC())}
}

func (s *cloudRunScaler) second(now time.Time, sec second, f *fleet) {
	conc := sec.InFlight
	if sec.Spilled > 0 && sec.Requests > 0 {
		conc += sec.Spilled * sec.InFlight / sec.Requests
	}
	d := s.a.Tick(now, autoscale.Sample{CPUCores: sec.CPU, Concurrency: conc, Requests: int64(sec.Requests)})
	f.start(now, d.Start, s.cold)
	f.stop(d.Stopped)
}

func (s *cloudRunScaler) step(now time.Time, queue []batch, _, arrivals int64, f *fleet, readySlots int) (int64, int64) {
	s.recent[s.next%len(s.recent)] = arrivals
	s.next++
	if len(queue) == 0 {
		return 0, 0
	}
	// Requests wait: start what the arrival rate of the last second needs
	// at the target (Config.RateStarts), for the requests that will arrive
	// during the cold start.
	var recent int64
	for _, a := range s.recent {
		recent += a
	}
	rate := float64(recent) / (float64(len(s.recent)) * s.m.Step.Seconds())
	if k := s.cfg.RateStarts(rate, s.m.ServiceTime, len(f.readyAt)); k > 0 {
		od := s.a.OnDemand(now, k)
		f.start(now, od.Start, s.cold)
	}
	var rejected int64
	// 429s: at max instances, the oldest requests that waited the most.
	for len(queue) > 0 {
		d := s.cfg.Pending(autoscale.PendingRequest{Waited: now.Sub(queue[0].at), Running: len(f.readyAt)})
		if d.Action != autoscale.Reject {
			break
		}
		rejected += queue[0].n
		queue = queue[1:]
	}
	var waiting int64
	for _, b := range queue {
		waiting += b.n
	}
	if waiting == 0 {
		return rejected, 0
	}
	// A later request waits longer, an older one has less time left: if
	// neither the last nor the first needs an instance started, none does.
	starting := f.startingIn(now)
	for _, r := range []struct {
		at    time.Time
		ahead int64
	}{{queue[len(queue)-1].at, waiting - 1}, {queue[0].at, 0}} {
		for {
			d := s.cfg.Pending(autoscale.PendingRequest{
				Waited: now.Sub(r.at), Ahead: int(r.ahead), Running: len(f.readyAt),
				ReadySlots: readySlots, StartingReadyIn: starting, RequestTime: s.m.ServiceTime,
			})
			if d.Action != autoscale.StartInstance {
				break
			}
			od := s.a.OnDemand(now, 1)
			if od.Start == 0 && od.Promoted == 0 {
				break
			}
			f.start(now, od.Start, s.cold)
			if od.Start > 0 {
				starting = append(starting, s.cold)
			}
		}
	}
	return rejected, 0
}

// kpaScaler drives lb/autoscale/kpa with Knative's defaults. It observes
// concurrency (in flight plus queued: the queue-proxies and the activator
// both report the requests they hold) once a second and scales every 2s,
// and at once when a request waits at zero. With activator, the activator
// stays in the path and buffers every waiting request (up to 10000, for at
// most the 300s revision timeout; 503 beyond): Knative's default
// target-burst-capacity of 200 keeps it there at this model's sizes.
// Without (target-burst-capacity 0), the activator buffers only while no
// pod is ready; otherwise requests queue at the pods' queue-proxies, at
// most 10 × container concurrency per ready pod (the queue-proxy's
// breaker), and arrivals beyond fail with 503.
type kpaScaler struct {
	m         Model
	cold      time.Duration
	a         *kpa.Autoscaler
	activator bool
	ticks     int
	panicking bool
	// panicExit is the first time (seconds) the KPA left panic; -1 if it
	// never did.
	panicExit float64
}

func newKPAScaler(m Model, cold time.Duration, initial int, activator bool) *kpaScaler {
	cfg := kpa.DefaultConfig(m.MaxConcurrency, m.MaxInstances)
	return &kpaScaler{m: m, cold: cold, a: kpa.New(cfg, initial, time.Unix(0, 0).UTC()), activator: activator, panicExit: -1}
}

// Activator and queue-proxy bounds (knative/serving pkg/activator's
// breakerQueueDepth, the default revision timeout, and the queue-proxy's
// queue depth of 10 × container concurrency).
const (
	activatorQueueDepth = 10000
	activatorTimeout    = 300 * time.Second
	queueProxyDepth     = 10
)

func (s *kpaScaler) second(now time.Time, sec second, f *fleet) {
	s.a.Observe(now, sec.InFlight+sec.Waiting)
	s.ticks++
	if s.ticks%2 == 0 {
		d := s.a.Scale(now, f.ready(now), false)
		if s.panicking && !d.Panic && s.panicExit < 0 {
			s.panicExit = now.Sub(time.Unix(0, 0)).Seconds()
		}
		s.panicking = d.Panic
		s.resize(now, d.Desired, f)
	}
}

func (s *kpaScaler) resize(now time.Time, desired int, f *fleet) {
	if n := desired - len(f.readyAt); n > 0 {
		f.start(now, n, s.cold)
	} else {
		f.stop(-n)
	}
}

func (s *kpaScaler) step(now time.Time, queue []batch, arrived, _ int64, f *fleet, readySlots int) (int64, int64) {
	if len(queue) == 0 {
		return 0, 0
	}
	if len(f.readyAt) == 0 {
		s.resize(now, s.a.Scale(now, 0, true).Desired, f)
	}
	var total int64
	for _, b := range queue {
		total += b.n
	}
	if ready := readySlots / s.m.MaxConcurrency; !s.activator && ready > 0 {
		over := total - int64(ready*s.m.MaxConcurrency*queueProxyDepth)
		return 0, min(max(0, over), arrived)
	}
	var rejected int64
	for len(queue) > 0 && (now.Sub(queue[0].at) >= activatorTimeout || total > activatorQueueDepth) {
		drop := queue[0].n
		if now.Sub(queue[0].at) < activatorTimeout {
			drop = min(drop, total-activatorQueueDepth)
		}
		rejected += drop
		total -= drop
		if drop < queue[0].n {
			break
		}
		queue = queue[1:]
	}
	return rejected, 0
}

// oracle is the clairvoyant autoscaler: it knows every arrival and the
// cold start. Its ready instances at each step are exactly those the
// requests in flight then need at the model's target (the requests of the
// last ServiceTime, each served at once), ceil(in flight ÷ (MaxConcurrency
// × Target)); each instance is started one cold start before it is first
// needed and stopped as soon as it is not (one kept through a gap shorter
// than a cold start costs less than a restart, and the oracle keeps it).
// So running(t) = max of need over [t, t + cold start]: the floor for
// instance-seconds at that target with no request waiting. Instances the
// first steps need are taken as started before the run (billed from 0).
type oracle struct {
	need     []int // ready instances per step
	peakConc float64
	row      Row
}

func newOracle(m Model, l Load, arr []int64, cold time.Duration) oracle {
	dt := m.Step.Seconds()
	svcSteps := int(math.Round(m.ServiceTime.Seconds() / dt))
	coldSteps := int(math.Round(cold.Seconds() / dt))
	o := oracle{need: make([]int, len(arr))}
	var inFlight int64
	for k, n := range arr {
		inFlight += n
		if k >= svcSteps {
			inFlight -= arr[k-svcSteps]
		}
		o.peakConc = max(o.peakConc, float64(inFlight))
		o.need[k] = int(math.Ceil(float64(inFlight)/(float64(m.MaxConcurrency)*m.Target) - 1e-9))
		if k < svcSteps { // the load ran before 0: the first steps need what the rate at 0 does
			o.need[k] = max(o.need[k], l.initial(m))
		}
	}
	row := Row{Load: l.Name, ColdStartS: cold.Seconds(), Autoscaler: "oracle", TimeToCapacityS: -1}
	prev := o.need[0]
	var starts int
	for k := range arr {
		running := 0
		for j := k; j < len(arr) && j <= k+coldSteps; j++ {
			running = max(running, o.need[j])
		}
		starts += max(0, running-prev)
		prev = running
		row.InstanceS += float64(running) * dt
		row.Peak = max(row.Peak, running)
		row.Requests += arr[k]
		t := float64(k+1) * dt
		if row.TimeToCapacityS < 0 && t >= l.RiseAt && float64(o.need[k]*m.MaxConcurrency) >= o.peakConc {
			row.TimeToCapacityS = math.Round((t-l.RiseAt)*10) / 10
		}
	}
	row.InstanceS = math.Round(row.InstanceS)
	svc := float64(m.ServiceTime.Milliseconds())
	row.P50Ms, row.P99Ms, row.P99AllMs = svc, svc, &svc
	if row.Requests > 0 {
		row.ColdStartsPer1k = round3(float64(starts) * 1000 / float64(row.Requests))
	}
	o.row = row
	return o
}
