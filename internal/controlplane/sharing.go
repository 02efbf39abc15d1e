package controlplane

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/hashing"
	"github.com/spillway-lb/spillway/lb/health"
)

// This file holds the pure parts of health sharing: who owns which group,
// and how one replica's checks and the others' gossip merge into the health
// view it serves. No I/O, no clock (now is an argument), no locks.

// controlPlanes returns the sorted names of the alive control-plane replicas
// in snap that replicas vouches for (Config.Replicas), self always included
// (a replica counts itself before its own state is visible). A member that
// merely claims to be a control plane is not one: any gossip member could
// claim that, and with it take over health checks (the first security review,
// finding 1a).
func controlPlanes(snap *gossip.Snapshot, self string, replicas map[string]bool) []string {
	out := []string{self}
	if snap != nil {
		for name, s := range snap.States {
			if s.Kind == gossip.KindControlPlane && name != self && replicas[name] {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// unvouched returns the sorted names of the members of snap that publish
// control-plane states but are not in replicas (nor self): what the
// replica ignores.
func unvouched(snap *gossip.Snapshot, self string, replicas map[string]bool) []string {
	var out []string
	if snap != nil {
		for name, s := range snap.States {
			if s.Kind == gossip.KindControlPlane && name != self && !replicas[name] {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// ownership says which replica health-checks each instance group: the owner
// of a group is the Maglev pick (lb/hashing) for hashing.String(group name)
// over the alive replicas' names. Every replica that sees the same members
// computes the same owners; when a replica dies, only its groups move (to
// the survivors, spread evenly), and when one joins it takes about 1/N of
// the groups. Immutable.
type ownership struct {
	members []string          // sorted
	owner   map[string]string // group name → owner
}

// newOwnership computes the owners of groups among members (sorted, unique,
// non-empty).
func newOwnership(members, groups []string) (ownership, error) {
	tbl, err := hashing.NewMaglev(hashing.DefaultConfig(), members)
	if err != nil {
		return ownership{}, fmt.Errorf("ownership over %v: %w", members, err)
	}
	o := ownership{members: slices.Clone(members), owner: make(map[string]string, len(groups))}
	for _, g := range groups {
		o.owner[g], _ = tbl.PickName(hashing.String(g))
	}
	return o, nil
}

// owned returns the groups owned by node, sorted.
func (o ownership) owned(node string) []string {
	var out []string
	for g, n := range o.owner {
		if n == node {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}

// report is another replica's gossiped verdict on the instances of one
// group: the addresses it lists as healthy. Instances it does not list are
// not healthy by its account.
type report struct {
	node    string
	healthy map[string]bool
}

// reportsFrom collects, per group, the reports of the control planes in
// snap other than self that replicas vouches for, sorted by node name. A GroupState that does not say
// which instances are healthy (Healthy > 0 with no HealthyInstances) is no
// report. When a replica publishes a group several times (once per service)
// the first entry counts; they carry the same instances.
func reportsFrom(snap *gossip.Snapshot, self string, replicas map[string]bool) map[string][]report {
	out := map[string][]report{}
	if snap == nil {
		return out
	}
	for name, s := range snap.States {
		if s.Kind != gossip.KindControlPlane || name == self || !replicas[name] {
			continue
		}
		seen := map[string]bool{}
		for _, g := range s.Groups {
			if seen[g.Group] || (g.Healthy > 0 && len(g.HealthyInstances) == 0) {
				continue
			}
			seen[g.Group] = true
			r := report{node: name, healthy: make(map[string]bool, len(g.HealthyInstances))}
			for _, a := range g.HealthyInstances {
				r.healthy[a] = true
			}
			out[g.Group] = append(out[g.Group], r)
		}
	}
	for _, rs := range out {
		slices.SortFunc(rs, func(a, b report) int { return cmp.Compare(a.node, b.node) })
	}
	return out
}

// ownVerdict is this replica's checked status of one instance (the
// combination of every check that covers it; see healthManager).
type ownVerdict struct {
	status health.Status
	detail string
}

// mergeInput is everything merge reads.
type mergeInput struct {
	self   string
	groups []config.GroupRef
	own    ownership
	// verdicts are this replica's checks, by address, for instances of the
	// groups it owns (missing = no check running).
	verdicts map[string]ownVerdict
	reports  map[string][]report
	// known is the previous merged view, by address.
	known map[string]InstanceHealth
	now   time.Time
}

// merge returns the health view of every instance in groups, sorted by group
// then address. For each instance the first of these that has a verdict
// decides:
//
//  1. if self owns the group: its own check, once that has a verdict
//     (healthy or unhealthy; a check still at unknown has none);
//  2. another replica's report on the group: the owner's first, then the
//     others' by name (a replica that owned the group until just now, or
//     sees a different membership for a moment);
//  3. the previous merged view (known): a group whose owner died keeps its
//     last verdicts until the new owner's checks decide, and a new owner
//     starts from them instead of from unknown;
//  4. otherwise unknown (reported not healthy).
//
// Since is kept while the status stays, set to now when it changes, and
// zero for an instance seen for the first time.
func merge(in mergeInput) []InstanceHealth {
	var out []InstanceHealth
	for _, ref := range in.groups {
		g := ref.Group.Name
		owner := in.own.owner[g]
		reps := orderReports(in.reports[g], owner)
		for _, inst := range ref.Group.Instances {
			ih := decide(in.self, owner, inst.Address, in.verdicts, reps, in.known)
			ih.Group = g
			if prev, ok := in.known[inst.Address]; ok {
				ih.Since = prev.Since
				if prev.Status != ih.Status {
					ih.Since = in.now
				}
			}
			out = append(out, ih)
		}
	}
	slices.SortFunc(out, func(a, b InstanceHealth) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Address, b.Address))
	})
	return out
}

// orderReports puts the owner's report first, keeping the others' order.
func orderReports(rs []report, owner string) []report {
	i := slices.IndexFunc(rs, func(r report) bool { return r.node == owner })
	if i <= 0 {
		return rs
	}
	out := make([]report, 0, len(rs))
	out = append(out, rs[i])
	out = append(out, rs[:i]...)
	return append(out, rs[i+1:]...)
}

// decide applies merge's rules to one instance; Group and Since are the
// caller's.
func decide(self, owner, addr string, verdicts map[string]ownVerdict, reps []report, known map[string]InstanceHealth) InstanceHealth {
	ih := InstanceHealth{Address: addr}
	if owner == self {
		if v, ok := verdicts[addr]; ok && v.status != health.StatusUnknown {
			ih.Status, ih.Detail, ih.Source = v.status, v.detail, self
			return ih
		}
	}
	for _, r := range reps {
		ih.Source = r.node
		if r.healthy[addr] {
			ih.Status = health.StatusHealthy
		} else {
			ih.Status, ih.Detail = health.StatusUnhealthy, "not healthy according to "+r.node
		}
		return ih
	}
	if prev, ok := known[addr]; ok && prev.Status != health.StatusUnknown {
		ih.Status, ih.Detail, ih.Source = prev.Status, prev.Detail, prev.Source
		return ih
	}
	ih.Status, ih.Detail = health.StatusUnknown, "not checked yet"
	return ih
}
