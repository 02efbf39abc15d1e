// Package edge is the gfe: Spillway's edge node. It takes client HTTP
// requests, matches a route, and sends each request to a backend chosen by
// the route's service policy — Waterfall by Region by default (DESIGN.md §3,
// §4).
//
// # Model
//
// Three kinds of input feed the node, each through one goroutine:
//
//   - the control plane's snapshot (configuration and instance health),
//     applied with ApplySnapshot by the control-plane client;
//   - gossip: every gfe's site, demand and RTT vector (internal/gossip);
//   - this node's own measurements: the RTT to every region (rttProber) and
//     the demand and load it sees (ewma.Rate meters on the request path).
//
// The planner goroutine (Edge.plan) turns them, every PlanInterval, into an
// immutable routing table: for every service, the World of all sites' demand
// and every group's healthy capacity, planned with waterfall.Compute, damped
// against the previous plan (rule 8), and this site's row turned into a
// waterfall.Picker. It stores the table in an atomic.Pointer; a request loads
// it once and uses it for its whole life ("the table that was live when the
// pick started"). Nothing in a table changes after Store.
//
// Static stability: the node serves from its last table. When every control
// plane is gone it keeps its last snapshot, keeps gossiping and keeps
// re-planning from gossip; a new snapshot replaces the config when one
// returns.
package edge
