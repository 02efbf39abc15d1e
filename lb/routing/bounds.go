package routing

import (
	"math"
	"sort"

	"github.com/spillway-lb/spillway/config"
)

// Bounds are the plausibility limits on what other gfes gossip (docs/design.md
// §9): gossip is authenticated, but one buggy or compromised member must
// not be able to move every site's traffic with one absurd number. A value
// outside the bounds is clamped to them (never dropped, so an honest but
// extreme value still counts as much as is plausible) and reported by
// Builder.TakeClamps. The zero Bounds clamps nothing (the simulator uses
// it); the gfe uses DefaultBounds. This gfe's own values (Input.Self) are
// never clamped.
type Bounds struct {
	// MaxRTT is the largest plausible round trip, in milliseconds; a
	// peer's RTT above it counts as MaxRTT. 0: no limit.
	MaxRTT float64
	// MaxDemand bounds a peer's demand for a service to MaxDemand times
	// the service's declared capacity (every instance of every group
	// healthy, capacity_scaler ignored), and so does it bound the peers of
	// one site together: their demand is scaled down alike until its sum
	// is within the bound, so that N members at a site (sybils, if any
	// could pass for gfes) count no more than one. 0: no cap.
	MaxDemand float64
	// MaxDemandRise bounds how fast a peer's demand for a service may
	// rise: by at most MaxDemandRise times the service's declared capacity
	// per second since the previous build. A peer (node) seen for the
	// first time counts 0 in that build, so a new member's demand ramps up
	// over MaxDemand/MaxDemandRise seconds at worst (and so does every
	// peer's when this gfe starts). The peers of one site together rise
	// no faster either. Decreases are never limited. 0: no limit.
	MaxDemandRise float64
}

// DefaultBounds returns the gfe's defaults: RTT at most 10 s; a peer's
// demand at most twice the service's declared capacity, rising by at most
// the declared capacity per second (an honest gfe's demand at full
// capacity shows in full within a second).
func DefaultBounds() Bounds {
	return Bounds{MaxRTT: 10_000, MaxDemand: 2, MaxDemandRise: 1}
}

// Clamp is one gossiped value that Bounds changed.
type Clamp struct {
	// Node is the peer that gossiped it.
	Node string
	// Field is "rtt", "demand" (above MaxDemand), "demand_rise" (faster
	// than MaxDemandRise) or "site_demand" (a site's peers together above
	// either; Node is then "site:" and the site's name).
	Field string
	// Key is the region (rtt) or service (demand) the value is for.
	Key string
	// Reported is what the peer said; Used is what the plan used.
	Reported, Used float64
}

// The Clamp fields.
const (
	ClampRTT        = "rtt"
	ClampDemand     = "demand"
	ClampDemandRise = "demand_rise"
	ClampSiteDemand = "site_demand"
)

// sitePrefix starts the Node of a site's Clamps.
const sitePrefix = "site:"

// peerDemandKey names one peer's demand for one service, or with site set
// the demand of one site's peers (node is then the site).
type peerDemandKey struct {
	node, service string
	site          bool
}

// acceptedDemand is the last demand taken from a peer for a service.
type acceptedDemand struct {
	value float64
	// build is the Build that last used it; entries not used by the last
	// Build are forgotten (their peer or service is gone).
	build uint64
}

// DeclaredCapacity returns sc's capacity with every active (not demoted)
// instance healthy and capacity_scaler 1, in its demand unit: the base of
// Bounds.MaxDemand, and of the control plane's bound on a site's xDS
// clients' demand.
func DeclaredCapacity(cfg *config.Config, sc *config.Service) float64 {
	var total float64
	for i := range sc.Backends {
		be := sc.Backends[i]
		ref, ok := cfg.Group(be.Group)
		if !ok {
			continue
		}
		be.CapacityScaler = 1
		n := ref.Group.ActiveInstances()
		total += be.Capacity(sc.BalancingMode, n, n)
	}
	return total
}

// boundPeers returns in.Peers with the RTTs and their demand for sc within
// b.cfg.Bounds, recording every clamp. dt is the time since the previous
// Build in seconds (0 on the first). With the zero Bounds it returns
// in.Peers itself.
func (b *Builder) boundPeers(in Input, sc *config.Service, dt float64) []Peer {
	bd := b.cfg.Bounds
	if bd == (Bounds{}) {
		return in.Peers
	}
	capacity := DeclaredCapacity(in.Fleet.Config, sc)
	out := make([]Peer, len(in.Peers))
	for i, p := range in.Peers {
		out[i] = p
		if p.Node == b.cfg.Node || p.Site == "" {
			continue // ignored by BuildWorld anyway
		}
		if bd.MaxRTT > 0 {
			out[i].RTT = b.boundRTT(p, bd.MaxRTT)
		}
		if capacity > 0 && (bd.MaxDemand > 0 || bd.MaxDemandRise > 0) {
			if d, ok := b.boundDemand(p, sc.Name, capacity, dt); ok {
				m := make(map[string]float64, len(p.Demand))
				for k, v := range p.Demand {
					m[k] = v
				}
				m[sc.Name] = d
				out[i].Demand = m
			}
		}
	}
	if capacity > 0 && (bd.MaxDemand > 0 || bd.MaxDemandRise > 0) {
		b.boundSites(out, sc.Name, capacity, dt)
	}
	return out
}

// boundSites scales down, in place, the demand for svc of the peers of
// each site whose sum is above MaxDemand times capacity or rose faster than
// MaxDemandRise times capacity per second since the previous build (a site
// seen for the first time is only capped: its peers each start from 0),
// recording one clamp per site. peers holds copies whose Demand maps it
// may replace, not change.
func (b *Builder) boundSites(peers []Peer, svc string, capacity, dt float64) {
	bd := b.cfg.Bounds
	totals := map[string]float64{}
	for _, p := range peers {
		if p.Node != b.cfg.Node && p.Site != "" {
			totals[p.Site] += p.Demand[svc]
		}
	}
	for _, site := range sortedSites(totals) {
		total := totals[site]
		limit := math.Inf(1)
		if bd.MaxDemand > 0 {
			limit = bd.MaxDemand * capacity
		}
		key := peerDemandKey{node: site, service: svc, site: true}
		prev, known := b.peerDemand[key]
		if bd.MaxDemandRise > 0 && known {
			limit = math.Min(limit, prev.value+bd.MaxDemandRise*capacity*dt)
		}
		used := math.Min(total, limit)
		b.peerDemand[key] = acceptedDemand{value: used, build: b.builds}
		if used >= total {
			continue
		}
		b.clamped(Clamp{Node: sitePrefix + site, Field: ClampSiteDemand, Key: svc, Reported: total, Used: used})
		scale := used / total
		for i, p := range peers {
			if p.Node == b.cfg.Node || p.Site != site || p.Demand[svc] == 0 {
				continue
			}
			m := make(map[string]float64, len(p.Demand))
			for k, v := range p.Demand {
				m[k] = v
			}
			m[svc] = p.Demand[svc] * scale
			peers[i].Demand = m
		}
	}
}

// sortedSites returns m's keys in order, so that clamps come out the same
// way every build.
func sortedSites(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// maxClamps bounds the clamps held for TakeClamps, so that a caller that
// never takes them does not grow memory; later ones are dropped.
const maxClamps = 1000

// clamped records c for TakeClamps.
func (b *Builder) clamped(c Clamp) {
	if len(b.clamps) < maxClamps {
		b.clamps = append(b.clamps, c)
	}
}

// boundRTT returns p.RTT with every value above maxRTT lowered to it (p.RTT
// itself when none is).
func (b *Builder) boundRTT(p Peer, maxRTT float64) map[string]float64 {
	var out map[string]float64
	for r, v := range p.RTT {
		if v <= maxRTT {
			continue
		}
		if out == nil {
			out = make(map[string]float64, len(p.RTT))
			for k, w := range p.RTT {
				out[k] = w
			}
		}
		out[r] = maxRTT
		b.clamped(Clamp{Node: p.Node, Field: ClampRTT, Key: r, Reported: v, Used: maxRTT})
	}
	if out == nil {
		return p.RTT
	}
	return out
}

// boundDemand returns the demand for service svc to plan with for peer p,
// and whether it differs from what p reported, and remembers it for the
// rise limit of the next build.
func (b *Builder) boundDemand(p Peer, svc string, capacity, dt float64) (float64, bool) {
	bd := b.cfg.Bounds
	reported := p.Demand[svc]
	used := reported
	if bd.MaxDemand > 0 {
		if limit := bd.MaxDemand * capacity; used > limit {
			used = limit
			b.clamped(Clamp{Node: p.Node, Field: ClampDemand, Key: svc, Reported: reported, Used: used})
		}
	}
	key := peerDemandKey{node: p.Node, service: svc}
	if bd.MaxDemandRise > 0 {
		// A peer seen for the first time starts from 0, which is not
		// reported: it happens to every peer when this gfe starts.
		prev, known := b.peerDemand[key]
		limit := 0.0
		if known {
			limit = prev.value + bd.MaxDemandRise*capacity*dt
		}
		if used > limit {
			if known {
				b.clamped(Clamp{Node: p.Node, Field: ClampDemandRise, Key: svc, Reported: reported, Used: limit})
			}
			used = limit
		}
	}
	b.peerDemand[key] = acceptedDemand{value: used, build: b.builds}
	return used, used != reported
}

// forgetPeerDemand drops the demand of peers and services the last Build
// did not see.
func (b *Builder) forgetPeerDemand() {
	for k, v := range b.peerDemand {
		if v.build != b.builds {
			delete(b.peerDemand, k)
		}
	}
}

// TakeClamps returns the gossiped values that Bounds clamped since the
// last call, in the order they were clamped, and forgets them. The gfe
// counts them in a metric and logs them.
func (b *Builder) TakeClamps() []Clamp {
	out := b.clamps
	b.clamps = nil
	return out
}
