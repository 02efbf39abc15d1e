package controlplane

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gossip"
)

// The instances an autoscaler started join their group in the served
// configuration: the lease holder of a group publishes them in its gossip
// state (gossip.NodeState.Autoscaled, from internal/autoscale/controller),
// and every replica's health manager adds them to the configuration it
// checks and serves. So they are health-checked like the file's instances
// (a starting instance fails its check, and no gfe sends it anything until
// it passes), every replica serves the same snapshot, and a gfe parses
// them as ordinary instances.

// autoscaledFrom returns, per group, the instances the control planes'
// autoscalers run, from the states of this replica and of the vouched
// replicas: the union, sorted by address. An instance that two holders
// list (a lease changing hands) is demoted only if both say so.
func autoscaledFrom(snap *gossip.Snapshot, self string, replicas map[string]bool) map[string][]gossip.AutoscaledInstance {
	if snap == nil {
		return nil
	}
	byGroup := map[string]map[string]bool{} // group → address → demoted
	for name, s := range snap.States {
		if s.Kind != gossip.KindControlPlane || (name != self && !replicas[name]) {
			continue
		}
		for g, ins := range s.Autoscaled {
			m := byGroup[g]
			if m == nil {
				m = map[string]bool{}
				byGroup[g] = m
			}
			for _, in := range ins {
				d, seen := m[in.Address]
				m[in.Address] = in.Demoted && (!seen || d)
			}
		}
	}
	if len(byGroup) == 0 {
		return nil
	}
	out := make(map[string][]gossip.AutoscaledInstance, len(byGroup))
	for g, m := range byGroup {
		list := make([]gossip.AutoscaledInstance, 0, len(m))
		for a, d := range m {
			list = append(list, gossip.AutoscaledInstance{Address: a, Demoted: d})
		}
		slices.SortFunc(list, func(a, b gossip.AutoscaledInstance) int { return cmp.Compare(a.Address, b.Address) })
		out[g] = list
	}
	return out
}

// withAutoscaled returns base with the autoscaled instances added to their
// groups (max_concurrency from the group's max_concurrency_per_instance,
// demoted as the autoscaler says: config.Instance.Demoted),
// as a LoadedConfig of its own: re-marshaled and re-parsed, so that it is
// validated exactly as the gfes will parse it, with its own Hash (a
// snapshot's version changes with the instances). Instances of groups that
// are not autoscaled in base are ignored, and so is one whose address the
// file already has. It returns base itself when nothing is added.
func withAutoscaled(base *LoadedConfig, ins map[string][]gossip.AutoscaledInstance) (*LoadedConfig, error) {
	if len(ins) == 0 {
		return base, nil
	}
	taken := map[string]bool{}
	for _, ref := range base.Config.Groups() {
		for _, in := range ref.Group.Instances {
			taken[in.Address] = true
		}
	}
	c := *base.Config
	c.Regions = slices.Clone(c.Regions)
	added := 0
	for ri := range c.Regions {
		r := &c.Regions[ri]
		r.Zones = slices.Clone(r.Zones)
		for zi := range r.Zones {
			z := &r.Zones[zi]
			z.Groups = slices.Clone(z.Groups)
			for gi := range z.Groups {
				g := &z.Groups[gi]
				list := ins[g.Name]
				if !g.Autoscaling.Enabled() || len(list) == 0 {
					continue
				}
				g.Instances = slices.Clip(g.Instances)
				for _, in := range list {
					if taken[in.Address] {
						continue
					}
					taken[in.Address] = true
					g.Instances = append(g.Instances, config.Instance{
						Address:        in.Address,
						MaxConcurrency: g.Autoscaling.MaxConcurrencyPerInstance,
						Demoted:        in.Demoted,
					})
					added++
				}
			}
		}
	}
	if added == 0 {
		return base, nil
	}
	canon, redacted, hash, err := canonicalForms(&c)
	if err != nil {
		return nil, fmt.Errorf("autoscaled instances: %w", err)
	}
	cfg, err := config.Parse(canon, base.Source+" (with autoscaled instances)")
	if err != nil {
		return nil, fmt.Errorf("autoscaled instances: %w", err)
	}
	l := *base
	l.Config, l.YAML, l.RedactedYAML, l.Hash = cfg, canon, redacted, hash
	return &l, nil
}
