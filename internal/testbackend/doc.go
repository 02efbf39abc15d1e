// Package testbackend is the backend that Spillway's tests, demo and
// benchmarks run behind the gfe: one process serves several backend
// instances, each with a real, bounded capacity and an emulated network
// distance to every site. cmd/testbackend wires it to flags and signals.
//
// # Instances
//
// Each instance listens on its own address, speaks HTTP/1.1 and h2c (HTTP/2
// over cleartext with prior knowledge), and answers every request with the
// identity headers
//
//	X-Spillway-Backend: <instance name>
//	X-Spillway-Region:  <region>
//	X-Spillway-Zone:    <zone>
//
// Its routes:
//
//	GET  /healthz        200 "ok" when healthy, 503 "unhealthy" otherwise. No capacity cost.
//	GET  /rtt            204 after the emulated RTT; the gfe's RTT probe. No capacity cost.
//	POST /admin/health   ?healthy=false|true: fail or pass health checks from now on.
//	GET  /admin/stats    counters as JSON (Stats).
//	any other            a normal request: takes capacity, answers 200 with a JSON Reply.
//
// An unhealthy instance keeps serving normal requests; only /healthz fails,
// the way a backend looks to its health checker when it is being drained or
// is flapping. The /admin routes are the operator's control channel, not
// emulated traffic: they get no delay and take no capacity. The backend is a
// test tool: anyone who can reach an instance can toggle its health.
//
// # Capacity
//
// A normal request must be admitted before it is served (see Capacity):
//
//   - at most MaxConcurrency requests are in flight at once; each holds its
//     slot for ServiceTime;
//   - at most MaxRPS requests start per second (a token bucket of Burst
//     tokens, implemented as GCRA);
//   - a request that cannot start at once waits, first for its token and
//     then for a free slot, in a FIFO queue of at most Queue requests, so
//     overload shows first as latency;
//   - a request that finds the queue full is rejected at once with 503 and
//     header X-Spillway-Reject: queue-full, so heavier overload shows as
//     errors.
//
// A request whose client goes away while queued leaves the queue; its
// rate-limit token is not refunded.
//
// # Network distance
//
// The loopback network has no latency, so every instance emulates it in user
// space. Sites are told apart by the caller's source address: the gfe of a
// site binds its outgoing connections to an address in its site's /24.
// Delay rules map source prefixes to an RTT:
//
//	127.0.1.0/24=5ms           applies to every instance
//	eu-west:127.0.1.0/24=80ms  applies to instances of region eu-west only
//
// For each request the instance takes the rule with the longest prefix that
// contains the source address (a region rule beats a global rule with the
// same prefix; no rule means 0) and waits that long, once, before doing
// anything else, so the RTT is added to every reply (health checks, RTT
// probes, rejections) and is never spent holding a capacity slot.
//
// # Command line
//
// cmd/testbackend takes flags (see ParseFlags); for example two instances of
// us-east, one of them bigger, seen at 5ms from site 1 and 80ms from site 2:
//
//	testbackend \
//	  --instance name=us-east-b-1,addr=127.0.0.1:9101,region=us-east,zone=us-east-b \
//	  --instance name=us-east-c-1,addr=127.0.0.1:9102,region=us-east,zone=us-east-c,max_concurrency=8 \
//	  --max-concurrency 4 --service-time 2ms --queue 16 \
//	  --delay 127.0.1.0/24=5ms --delay 127.0.2.0/24=80ms
//
// The process stops gracefully on SIGINT or SIGTERM: it stops accepting,
// lets admitted requests finish (up to --shutdown-timeout) and exits 0.
package testbackend
