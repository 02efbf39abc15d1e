// Package gfe is the gfe daemon: Spillway's edge node. It takes client
// requests and connections, matches a route, and sends each to a backend
// chosen by the route's service policy — Waterfall by Region by default
// (DESIGN.md §3, §4).
//
// The daemon only wires its parts together (like internal/controlplane's
// Daemon); each part is its own package behind a narrow interface:
//
//	routing     the pure table build: world, plan, pool, scope, pickers
//	httpproxy   the HTTP reverse proxy: retries, transports, streams, cookies
//	tcpproxy    the TCP proxy of tcp listeners
//	listeners   the client-facing sockets, TLS certificates and their reload
//	rtt         the RTT prober
//	status      the /status document's types
//
// # Model
//
// Three kinds of input feed the node, each through one goroutine:
//
//   - the control plane's snapshot (configuration and instance health),
//     applied with ApplySnapshot by the control-plane client;
//   - gossip: every gfe's site, demand and RTT vector (internal/gossip);
//   - this node's own measurements: the RTT to every region (rtt.Prober)
//     and the demand it sees (routing.Meters on the request path, and the
//     tcp proxy's open connections).
//
// The planner goroutine (Daemon.plan) turns them, every PlanInterval and at
// once when woken (a snapshot, an ejection), into an immutable routing
// table with routing.Builder.Build, and stores it in an atomic.Pointer. The
// proxies read it through Daemon.Table (httpproxy.Planner,
// tcpproxy.State): a request loads it once and uses it for its whole life
// ("the table that was live when the pick started"). Nothing in a table
// changes after Store.
//
// Static stability: the node serves from its last table. When every control
// plane is gone it keeps its last snapshot, keeps gossiping and keeps
// re-planning from gossip; a new snapshot replaces the config when one
// returns.
package gfe
