// Package gfe is the gfe daemon: Spillway's edge node. It takes client
// requests and connections, matches a route, and sends each to a backend
// chosen by the route's service policy — Waterfall by Region by default
// (docs/design.md §3, §4).
//
// The daemon only wires its parts together (like internal/controlplane's
// Daemon); each part is its own package behind a narrow interface:
//
//	routing     the pure table build: world, plan, pool, scope, pickers
//	httpproxy   the HTTP reverse proxy: retries, transports, streams, cookies
//	tcpproxy    the TCP proxy of tcp listeners
//	listeners   the client-facing sockets, TLS certificates and their reload
//	rtt         the RTT prober
//	pending     the pending queue and the capacity requests (docs/design.md §4, §6)
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
//
// # The pending queue and the autoscaler
//
// A request of a service with an autoscaled backend group (autoscaling
// block) that finds no free backend waits in the pending queue
// (internal/gfe/pending, run as the "pending" component and kicked by every
// new table) for at most the largest autoscaling.MaxPendingWait() of those
// groups, then gets 429 (httpproxy/await.go says what waits and what does
// not); a service's line holds at most its max_pending_requests and the
// queue at most Config.PendingMax, beyond which a request gets that 429 at
// once. While requests wait, the node asks the control plane for capacity
// (RequestCapacity over the snapshot stream's connection, Options.Capacity)
// for the group capacityTarget names: the service's autoscaled group in
// the region with the lowest RTT, at most once per CapacityInterval and
// one call in flight per service and group. Every plan step publishes, in
// gossip.NodeState.Load, the load the node put on each group over the
// step: requests in flight (the mean of loadSamplesPerPlan samples per
// PlanInterval plus one at the step), requests/s (requests that ended at
// the group's backends between the last two builds) and requests pending
// now; a group without any is left out, and readers take absence as zero.
// Both the capacity requests and the pending load count only the requests
// that have waited pending.Config.Settle (100ms) with their client there
// (pending.Queue.Lines): a client that opens requests and resets them at
// once scales nothing.
//
// # Metrics of the pending queue
//
//	spillway_gfe_pending_requests{service}                      gauge: requests waiting now
//	spillway_gfe_pending_wait_seconds{service,result}           histogram: time in the queue;
//	                                                              result served, rejected (429), canceled (client left)
//	spillway_gfe_capacity_requests_total{service,group,result}  counter: RequestCapacity calls;
//	                                                              result granted, refused, error
//	spillway_gfe_pending_full_total{service,bound}              counter: requests refused at once, their
//	                                                              line (service) or the queue (total) full
//
// /status shows each service's pending depth (services[].pending). A
// request that was rejected from the queue is also counted in
// spillway_gfe_pick_errors_total with the error its last pick ended in.
package gfe
