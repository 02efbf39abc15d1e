package waterfall

import (
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/loadaware"
)

// NewPickerLoadAware is NewPickerDemoted whose choice inside a group is
// c's (lb/loadaware: the power of two choices by in-flight requests,
// latency and utilization, with slow start) instead of a backend.Policy:
// group g's active instances are active[g] and its demoted ones
// demoted[g], healthy ones only. Groups, shares, fallbacks, demoted
// instances and soft limits behave exactly as in NewPickerDemoted; pick
// with PickAt, whose now the costs are read at. Each Choice carries its
// Endpoint, to which the caller reports the answer (c.Observe). demoted
// may be nil.
func NewPickerLoadAware(row []Flow, active, demoted map[string][]*loadaware.Endpoint, c *loadaware.Chooser) *Picker {
	backendsOf := func(m map[string][]*loadaware.Endpoint) map[string][]*backend.Backend {
		out := make(map[string][]*backend.Backend, len(m))
		for g, es := range m {
			bs := make([]*backend.Backend, len(es))
			for i, e := range es {
				bs[i] = e.Backend()
			}
			out[g] = bs
		}
		return out
	}
	p := NewPickerDemoted(row, backendsOf(active), backendsOf(demoted), backend.PolicyLeastRequest)
	p.chooser = c
	for i := range p.groups {
		g := &p.groups[i]
		g.endpoints = append([]*loadaware.Endpoint(nil), active[g.group]...)
		g.dendpoints = append([]*loadaware.Endpoint(nil), demoted[g.group]...)
	}
	return p
}

// chooseIn is pickIn for a load-aware Picker: the chooser over g's active
// endpoints, else over its demoted ones.
func (p *Picker) chooseIn(g *pickGroup, rnd uint64, hard bool, now time.Time) (Choice, bool) {
	acquire := p.chooser.Acquire
	if hard {
		acquire = p.chooser.AcquireHard
	}
	es := g.endpoints
	i, ok := acquire(es, now, rnd)
	if !ok {
		if len(g.dendpoints) == 0 {
			return Choice{}, false
		}
		es = g.dendpoints
		if i, ok = acquire(es, now, rnd); !ok {
			return Choice{}, false
		}
	}
	return Choice{Backend: es[i].Backend(), Region: g.region, Group: g.group, Reason: g.reason, Endpoint: es[i]}, true
}
