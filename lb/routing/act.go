package routing

import (
	"maps"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/autoscale"
	"github.com/spillway-lb/spillway/lb/backend"
)

// Adaptive Concurrency Tuning (docs/design.md §4 and §6, lb/autoscale.ACT): the
// gfe tunes every instance of an autoscaled group from the CPU utilization
// its load reports carry (ORCA cpu_utilization, backend.Signals.CPU). Once
// per the group's act_interval (1s), at a Build, an instance whose reports
// averaged above act_high_cpu (90%) loses one slot; one at its limit with
// the reports below act_low_cpu (70%) for a whole interval gains one;
// always within [1, max_concurrency_per_instance]. The limit is the
// backend's ACT limit (backend.Backend.SetACTLimit), which the picker
// honours with the configured one. An interval without a report changes
// nothing. Time is the Build's in.Now: the injected clock.

// actState is one instance's tuning.
type actState struct {
	act     *autoscale.ACT
	ceiling int       // max_concurrency_per_instance when act was made
	last    time.Time // end of the last interval
	cpu     float64   // CPU utilizations reported since last, summed
	reports int64
}

// tuneACT tunes, at now, every instance of cfg's autoscaled groups from
// sigs, the signals of this Build, and forgets the instances that left.
func (b *Builder) tuneACT(cfg *config.Config, now time.Time, sigs map[*backend.Backend]backend.Signals) {
	if b.acts == nil {
		b.acts = map[string]*actState{}
	}
	live := map[string]bool{}
	for _, g := range cfg.Groups() {
		as := g.Group.Autoscaling
		if !as.Enabled() {
			continue
		}
		rules := as.Rules()
		for _, in := range g.Group.Instances {
			be := b.backends[in.Address]
			if be == nil {
				continue
			}
			live[in.Address] = true
			st := b.acts[in.Address]
			if st == nil || st.ceiling != rules.MaxConcurrencyPerInstance {
				st = &actState{act: autoscale.NewACT(rules), ceiling: rules.MaxConcurrencyPerInstance, last: now}
				b.acts[in.Address] = st
				be.SetACTLimit(int64(st.act.Limit()))
			}
			if sg, ok := sigs[be]; ok {
				st.cpu += sg.CPU
				st.reports += sg.CPUReports
			}
			if now.Sub(st.last) < rules.ACTInterval {
				continue
			}
			if st.reports > 0 {
				be.SetACTLimit(int64(st.act.Observe(now, st.cpu/float64(st.reports), int(be.InFlight()))))
			}
			st.last, st.cpu, st.reports = now, 0, 0
		}
	}
	maps.DeleteFunc(b.acts, func(addr string, _ *actState) bool {
		if !live[addr] {
			if be := b.backends[addr]; be != nil {
				be.SetACTLimit(0)
			}
			return true
		}
		return false
	})
}

// ACTLimits returns, per autoscaled group of cfg, the mean ACT limit of
// its tuned instances (the figure the controller's ACT driver uses, by
// gossip.GroupLoad.ACT); a group without a tuned instance, or whose every
// tuned instance is at max_concurrency_per_instance, is left out (absent
// means at the ceiling).
func (b *Builder) ACTLimits(cfg *config.Config) map[string]float64 {
	var out map[string]float64
	for _, g := range cfg.Groups() {
		if !g.Group.Autoscaling.Enabled() {
			continue
		}
		var sum float64
		n := 0
		for _, in := range g.Group.Instances {
			if st := b.acts[in.Address]; st != nil {
				sum += float64(st.act.Limit())
				n++
			}
		}
		if n > 0 && sum < float64(n*g.Group.Autoscaling.MaxConcurrencyPerInstance) {
			if out == nil {
				out = map[string]float64{}
			}
			out[g.Group.Name] = sum / float64(n)
		}
	}
	return out
}
