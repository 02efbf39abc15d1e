// Package listeners runs the gfe's client-facing sockets: http, https and
// tcp listeners, TLS certificates and their reload.
//
// The gfe serves its --listen address (Config.Listen) as an http listener
// with the defaults of config.DefaultListener, plus every listener of the
// snapshot's Config.Listeners, each on its port at the host of
// --listen. A configured listener whose port is that of --listen takes that
// socket over (its protocol and limits replace the defaults).
//
// Nothing is accepted before the gfe can route (Options.Serving, closed at
// its first routing table): sockets are bound at Start, and connections
// made before then wait in the kernel's listen backlog.
//
// Listeners change at runtime with the snapshot. The Manager
// reconciles on every applied snapshot, and on a slow tick:
//
//   - a new port is bound (a bind failure is logged and retried each tick);
//   - a removed port stops accepting at once (new connections are refused)
//     while its open connections finish, gracefully, within DrainTimeout;
//   - a port whose settings change (protocol, timeouts, limits) keeps its
//     socket: a new server generation takes over accepting and the old one
//     drains its connections, so no connection is refused or cut;
//   - certificates are swapped in place: every TLS handshake reads the live
//     set (certStore), so established connections keep theirs. Certificate
//     files are read again when their modification time or size changes,
//     checked on every reconcile and every CertCheckInterval.
//
// Every connection of an http or https listener is admitted first
// (accept.go): a client address holds at most max_connections_per_client
// of the port's connections (more are reset as they arrive), and each
// connection holds HTTPConnFDs of the fd budget; while the budget is
// spent, a client that waits is served with the descriptors of the
// connection idle the longest, closed for it (idle.go).
//
// Every request of an http or https listener goes through the client
// protections of protect.go first: its body becomes a clientbody.Body
// (errors tagged as the client's, request_body_timeout), an HTTP/1.x
// request with a Transfer-Encoding closes its connection after the answer
// (RFC 9112 §6.1), and an HTTP/2 connection over its reset budget
// (Config.MaxEarlyResets), or whose client address is over its own across
// connections (Config.MaxClientEarlyResets, resets.go), is closed.
//
// A drain (a listener removed or changed, or Shutdown) lets connections
// finish within its time, then closes what is still busy and counts it
// (spillway_gfe_drain_cut_connections_total); that is the bound working,
// not an error.
//
// An http or https listener with fast_path serves plain HTTP/1.1 on the
// gfe's own fast path and hands everything else, bytes replayed, to its
// net/http server (fast.go). An https listener without it still makes
// its TLS handshakes itself and hands every connection over.
//
// Whatever serves a request, its head is held to the fast path's rules
// (h1.Parse): every HTTP/1.x connection net/http's server reads is a
// strictRequests, which lets net/http read a head only once h1.Parse has
// taken it and makes it answer 400 for the others (strict.go); HTTP/2
// requests with two Content-Lengths or a Host other than :authority are
// answered 400 by protect.
//
// A snapshot whose certificates cannot be loaded is rejected (NACKed) and
// changes nothing; a certificate file that turns bad later is logged and
// the previous certificate keeps serving.
package listeners
