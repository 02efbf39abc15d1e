// Package routinginput translates the gossip state a daemon holds
// (internal/gossip.Snapshot) into the peers of lb/routing's Input: the
// one place where the wire's node states become the routing world. Both
// owners of a routing build that hears gossip use it: the gfe's planner
// (internal/gfe) and the control plane's xDS export
// (internal/controlplane). The simulator (sim) has no gossip and makes
// its Peers itself; the snapshot needs no translation here, since
// snapshot.Snapshot holds a routing.Fleet.
//
// Package routinginput does no I/O.
package routinginput

import (
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/routing"
)

// Peers returns the gfe states of snap as the table build reads them (nil
// for a nil snap): what the gfe's planner and the control plane's xDS
// export both plan from. A control plane's SiteDemand (the xDS clients it
// serves, which bypass the gfes) becomes one Peer per site with that
// demand and no RTT (sitePeers), so that it adds to the site's gfes'
// demand. The order of the peers is gossip's map order: the table build
// does not depend on it.
func Peers(snap *gossip.Snapshot) []routing.Peer {
	if snap == nil {
		return nil
	}
	out := make([]routing.Peer, 0, len(snap.States))
	for name, st := range snap.States {
		switch st.Kind {
		case gossip.KindGFE:
			out = append(out, routing.Peer{Node: name, Site: st.Site, Demand: st.Demand, RTT: st.RTT, Capacity: st.Capacity})
		case gossip.KindControlPlane:
			out = append(out, sitePeers(name, st.SiteDemand)...)
		}
	}
	return out
}

// sitePeers returns demand (by site, then service) as peers named
// "<node>/xds/<site>": no RTT of their own, so that a site is placed by its
// gfes' measurements and a site without a gfe is not planned.
func sitePeers(node string, demand map[string]map[string]float64) []routing.Peer {
	out := make([]routing.Peer, 0, len(demand))
	for site, d := range demand {
		out = append(out, routing.Peer{Node: node + "/xds/" + site, Site: site, Demand: d})
	}
	return out
}
