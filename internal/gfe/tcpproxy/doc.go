// Package tcpproxy is the gfe's TCP proxy (docs/design.md §4): a tcp listener
// terminates each client TCP connection, picks one backend of its
// CONNECTION-mode service with the service's routing table entry, opens its
// own connection to it from the gfe's SourceIP and copies bytes both ways
// until both sides are done. It reads the live table and snapshot
// through the State interface.
//
// Guarantees:
//
//   - Connection persistence. A proxied connection keeps its backend for its
//     whole life. It is never re-dialled elsewhere: when its backend becomes
//     unavailable (the snapshot marks it unhealthy, or the service no
//     longer has it) both of its sides are closed, with a reset, so that the
//     client reconnects and the new connection is picked afresh. Plan changes
//     and spill move only new connections.
//   - A connection holds one concurrency slot of its backend (the slot the
//     pick took) until it ends, so an instance's max_concurrency caps its
//     open connections.
//   - A dial failure, which happens before any byte was relayed, is retried
//     once on another backend.
//   - Half-close: when one side finishes sending (EOF), the other side's
//     write half is closed and the opposite direction goes on; the
//     connection ends when both directions have. A read or write error on
//     either side closes both.
//   - Limits (the first security review, finding 4: SECURITY.md). A connection that would exceed the
//     listener's MaxConnections, its client IP address's
//     MaxConnectionsPerClient, or the process's fd budget (Options.Budget,
//     ConnFDs per connection) is reset as it arrives, before any backend
//     is dialled, and counted in spillway_gfe_tcp_refused_total; the log
//     says so at most once a second. The listener's IdleTimeout, when
//     positive, closes a connection that carried no byte in either
//     direction for that long, and its FirstByteTimeout one whose client
//     sent nothing that long after it arrived; both are checked every
//     reapInterval (50 ms) by the listener's one ticker.
//   - Drain: when Serve's ctx ends (or its listener is closed) it stops
//     accepting; open connections may finish within DrainTimeout, after
//     which they are closed (at once, if ctx ends while a closed listener
//     drains).
//
// For the planner, a service that a tcp listener serves counts its demand
// in open connections (smoothed over DemandSmoothing), the unit of
// CONNECTION-mode capacity (Proxy.Demand).
package tcpproxy
