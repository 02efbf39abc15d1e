// Package affinity implements session affinity for a backend service
// (docs/design.md §4): keeping a client's requests on one backend for as long
// as that backend is available.
//
// The package is pure: no I/O, no clock (Pick takes now), no package state,
// and no net/http (the caller copies the one cookie or header value the mode
// needs into Request).
//
// # Model
//
// A Picker is built for one backend service from its Config, the names of
// its currently healthy backends, a fallback Selector (the service's normal
// policy: waterfall, round robin, least request), and Options (an Available
// func and, for generated cookies, a Keyring). It is immutable; the owner
// builds a new one whenever the healthy set, the config or the keys change,
// and swaps it in atomically.
//
// Pick first asks affinity; when affinity has no answer, the fallback picks.
// Affinity has no answer when the request has no key (no client IP, no
// cookie, no header value, or a cookie that fails verification) or when the
// backend it points at is not available. Availability is decided in one
// place, Options.Available (healthy and not full); a pinned backend that is
// unavailable is passed over, never waited for. So affinity holds exactly
// while the backend is healthy and has room, and a client whose backend
// fails is moved once, not bounced.
//
// Key-based modes (client_ip, client_ip_proto, client_ip_port_proto,
// http_cookie, header) hash the request's key (hashing.Key2/3/5 or
// hashing.String) and look it up in a Maglev table over the healthy
// backends: every gfe computes the same table, so a client lands on the same
// backend whichever gfe it reaches, and when a backend leaves only its own
// clients (and a fraction of a percent of the others) move.
//
// The generated_cookie mode needs no key from the client on its first
// request: the fallback picks, and the result tells the caller to set a
// cookie naming that backend, with an expiry, signed with HMAC-SHA256 under
// the keyring's first key. Later requests carry the cookie back; a cookie is
// honoured only if its signature verifies under one of the keyring's keys
// (compared with hmac.Equal), it has not expired, and it names an available
// backend. Anything else — forged, altered, malformed, expired, signed by a
// retired key — is treated as no cookie and replaced. Cookies name backends
// by a 64-bit hash of their name, so they reveal no addresses.
//
// # Example
//
// A service with three healthy backends and cookie affinity; the fallback
// is round robin:
//
//	kr, _ := affinity.NewKeyring(secret) // 32+ random bytes, same on every gfe
//	cfg := affinity.DefaultConfig()
//	cfg.Mode = affinity.ModeGeneratedCookie
//	backends := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}
//	var rr backend.RoundRobin
//	fallback := affinity.SelectorFunc(func(affinity.Request) (string, error) {
//		i, _ := rr.Pick(len(backends))
//		return backends[i], nil
//	})
//	p, err := affinity.New(cfg, backends, fallback, affinity.Options{Keyring: kr, Available: isAvailable})
//
// First request, no cookie: the fallback picks 10.0.0.1:80 and Pick returns
// {Backend: "10.0.0.1:80", Pinned: false, SetCookie: true, Cookie: "AQ…", Expires: now+1h};
// the gfe sends Set-Cookie: SPILLWAY_AFFINITY=AQ…. The next requests carry
// the cookie and get {Backend: "10.0.0.1:80", Pinned: true}; after half the
// TTL they also get a refreshed cookie. If 10.0.0.1:80 becomes unavailable,
// the next request gets the fallback's choice, say 10.0.0.2:80, with a new
// cookie pinning it; the client stays on 10.0.0.2:80 from then on.
//
// With cfg.Mode = ModeClientIP instead, no cookie is involved: every request
// from 198.51.100.7 to the same VIP hashes to the same Maglev slot and so to
// the same backend, on every gfe, while that backend is available.
//
// # Key rotation
//
// The keyring's first key signs, all keys verify. Rotate by deploying
// [new, old]: old cookies keep working and are re-signed with new when next
// seen. After at least CookieTTL, deploy [new]; any cookie still signed with
// old is then ignored and replaced, like any unverifiable cookie.
package affinity
