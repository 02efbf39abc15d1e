// Package testbackend is the backend that Spillway's tests, demo and
// benchmarks run behind the gfe: one process serves several backend
// instances, each with a real, bounded capacity and an emulated network
// distance to every site. cmd/testbackend wires it to flags and signals.
//
// # Instances and protocols
//
// Each instance listens on its own address and speaks one protocol, chosen
// by InstanceConfig.Proto (the proto= key of --instance):
//
//	http  HTTP/1.1 and h2c (HTTP/2 over cleartext with prior knowledge), and
//	      WebSocket at /ws. The default.
//	h2    HTTP/2 and HTTP/1.1 over TLS, chosen by ALPN, with the routes of
//	      http (WebSocket over http/1.1). The certificate comes from the cert=
//	      and key= PEM files, or is generated self-signed at start for
//	      localhost, 127.0.0.1, ::1 and the instance name (Server.Certificate
//	      returns it; it is its own CA).
//	grpc  a gRPC server (cleartext HTTP/2) with the standard grpc.health.v1
//	      service, the spillway.testing.v1.Echo test service (package
//	      echopb), the ORCA xds.service.orca.v3.OpenRcaService (see Load
//	      reports) and server reflection.
//	tcp   a raw TCP echo server.
//
// Every instance identifies itself in every answer. The http and h2
// protocols set the headers
//
//	X-Spillway-Backend: <instance name>
//	X-Spillway-Region:  <region>
//	X-Spillway-Zone:    <zone>
//
// and serve the routes
//
//	GET  /healthz        200 "ok" when healthy, 503 "unhealthy" otherwise. No capacity cost.
//	GET  /rtt            204 after the emulated RTT; the gfe's RTT probe. No capacity cost.
//	GET  /.well-known/spillway-probe
//	                     "rif=N latency_us=M" after the emulated RTT: the gfe's Prequal probe
//	                     (policy prequal): requests in flight and queued, latency of the
//	                     recent requests at about its RIF (probe.go). No capacity cost.
//	GET  /ws             WebSocket echo (below).
//	POST /admin/health   ?healthy=false|true: fail or pass health checks from now on.
//	GET  /admin/health   {"healthy":BOOL}.
//	POST /admin/fault    ?status=CODE: answer every normal request CODE (400..599) from
//	                     now on, still passing health checks; status=0 ends the fault.
//	POST /admin/hold     ?on=true|false: hold every normal request admitted from now on
//	                     (holding its slot, counted in flight) until the hold is lifted.
//	POST /admin/slow     ?slowdown=F: serve every request F times slower (service time and
//	                     CPU per request, counted in antagonized) from now on; F=1 ends it.
//	GET  /admin/stats    counters as JSON (Stats).
//	any other            a normal request: takes capacity, answers 200 with a JSON Reply.
//
// The grpc protocol sends the same identity as header metadata
// (x-spillway-backend, x-spillway-region, x-spillway-zone) on every RPC and
// the trailer x-spillway-backend on every Echo RPC, and each EchoReply
// carries it too. Its health service answers SERVING or NOT_SERVING for the
// server ("") and for "spillway.testing.v1.Echo", following the instance's
// health. The tcp protocol writes the line "hello <name> <region> <zone>\n"
// first on every connection; the WebSocket at /ws sends the same text,
// without the newline, as its first (text) message.
//
// # Health
//
// An instance is healthy at start (after its start-up, with
// --startup-delay; see Start-up). An unhealthy instance keeps serving
// normal requests, RPCs and streams; only its health check fails, the way a
// backend looks to its health checker when it is being drained or is
// flapping: /healthz answers 503 (http, h2); the health service answers
// NOT_SERVING, to Check and to Watch streams (grpc); the listener is closed
// so that new connections are refused and a connect-only TCP health check
// fails, while established connections go on (tcp; the listener reopens on
// the same address when the instance is healthy again, and the toggle fails
// with 500 if the port was taken meanwhile).
//
// # Process admin
//
// The per-instance /admin routes exist only on http and h2. The process
// admin listener (Config.AdminAddr, --admin) serves every protocol, naming
// the instance in the query:
//
//	GET  /admin/health?instance=NAME                {"healthy":BOOL}
//	POST /admin/health?instance=NAME&healthy=BOOL   toggle health (as above)
//	GET  /admin/stats?instance=NAME                 Stats of one instance
//	GET  /admin/stats                               [Stats, ...] of every instance
//	POST /admin/close?instance=NAME                 close every client connection of
//	                                                the instance: {"closed":N}
//	POST /admin/fault?instance=NAME&status=CODE     answer normal HTTP requests CODE
//	                                                (0 = no fault): {"status":CODE}
//	POST /admin/hold?instance=NAME&on=BOOL          hold admitted normal requests until
//	                                                the hold is lifted: {"on":BOOL}
//	POST /admin/slow?instance=NAME&slowdown=F       serve F times slower (1 = normal):
//	                                                {"slowdown":F}
//
// It answers 400 without ?instance=, 404 for an unknown one. /admin/close
// closes the instance's TCP connections, whatever their protocol (HTTP
// keep-alive, h2, gRPC, WebSocket, tcp echo), as a network failure would,
// so that a test can check that the gfe reconnects, possibly elsewhere.
//
// The /admin routes are the operator's control channel, not emulated
// traffic: they get no delay and take no capacity. The backend is a test
// tool: anyone who can reach an instance or the admin can toggle its health.
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
// The other protocols are admitted the same way:
//
//   - a unary RPC is a normal request; a rejected one ends with UNAVAILABLE
//     and x-spillway-reject: queue-full in its header metadata;
//   - a long-lived stream (an Echo Stream call, a WebSocket, a tcp
//     connection) is admitted once, when it opens, and holds its slot until
//     it ends, as Cloud Run counts a streaming request for its duration. Each
//     message it echoes takes the emulated RTT plus ServiceTime (the slot is
//     held anyway). A rejected stream ends with UNAVAILABLE (gRPC), is
//     answered 503 at the handshake (WebSocket), or is closed without its
//     hello (tcp). A queued tcp connection gets its hello once admitted; it
//     cannot tell that its client left until then.
//
// Streams make the default capacity (4 slots, a queue of 16) small: give
// an instance that must hold many open streams max_concurrency=0
// (unlimited) or a large value.
//
// # Load reports
//
// Every instance reports its real load the ORCA way (package
// lb/loadreport), as backends do for Envoy and for gRPC clients, so that
// the gfe can see overload before its own signals do. The http and h2
// protocols set the header
//
//	Endpoint-Load-Metrics: TEXT application_utilization=U, cpu_utilization=C, rps_fractional=R, named_metrics.queue=Q, named_metrics.cpu_cores=K, named_metrics.concurrency=N
//
// on every answer to a normal request (served, rejected with 503
// queue-full, or faulted) and on the 101 of a WebSocket; not on /healthz,
// /rtt or /admin. The grpc protocol sends the same report, as the
// serialized OrcaLoadReport of grpc-go's orca package, in the trailer
// endpoint-load-metrics-bin of every Echo call (unary or stream, served or
// rejected), and out of band on OpenRcaService.StreamCoreMetrics: one
// report at once, then one every interval the client asks for, but not
// more often than Config.ORCAMinInterval (--orca-min-interval, 100ms). A
// tcp instance sends none.
//
// The values are measured when the answer is made, after a served request
// or an ended stream has given back its slot (the load it leaves behind;
// a WebSocket's 101 counts the WebSocket, which holds its slot):
//
//	R  arrivals per second over the last second: requests, RPCs and streams
//	   that asked for capacity (admitted, queued or rejected), counted by the
//	   limiter in 100ms buckets, the oldest weighted by how much of it the
//	   second covers (off by at most one bucket's arrivals).
//	Q  requests waiting for a token or a slot now.
//	U  max(in_flight/max_concurrency, R/max_rps), leaving out a limit that is
//	   0 (unlimited); when Q > 0, max(that, 1) + Q/D, where D is
//	   max_concurrency if set, else max_rps.
//	K  the process's CPU cores in use over the last second (see CPU and
//	   concurrency).
//	C  K / the cores the process may use, when --cpus gives them; else U,
//	   as before CPU was measured. (A gfe weighs application_utilization
//	   when it is above 0, else cpu_utilization: a process-wide CPU figure
//	   there would change how the gfe sees the idle instances of the
//	   existing tests, demo and benchmarks, so it is opt-in.)
//	N  the instance's requests in flight, averaged over the last second.
//
// lb/loadreport reads U, C, R and Q and skips the named metrics it does
// not know; the grpc reports carry K and N as named metrics too.
//
// A request waits only when the instance cannot start it at once, so
// U > 1 exactly when requests are queued or arrivals outrun max_rps: demand
// above what the instance can serve. An instance
// without limits never queues and reports U = 0. NoLoadReports (instance
// key load_reports=false, or --load-reports=false for every instance)
// turns all of this off: no header, no trailer, no OpenRcaService.
//
// # CPU and concurrency
//
// An autoscaler needs what Cloud Run measures: CPU cores in use and
// concurrent requests, each averaged over time. Every instance reports
// both, in its load reports (above) and in its stats (cpu_cores, cpus,
// cpu_utilization, concurrency, GET /admin/stats):
//
//   - cpu_cores is the process's CPU time (user + system, getrusage)
//     used over the last second, divided by that second. It is the whole
//     process's: run one instance per process (as the autoscaler's process
//     provider does) for one instance's figure.
//   - concurrency is the time-average of the requests holding a slot over
//     the last second, exact (an integral updated at each admission and
//     release), not a sample.
//
// "The last second" is measured without a timer: each reading (a load
// report, an admission, a stats call) is kept as a sample, at most one per
// 100ms, and an average runs from the newest sample at least 1s old to
// now: 1s to 1.1s on a busy instance. On an instance read less often it
// is the span since its last reading (still exact, both counters being
// cumulative); in the first second it is the time since the process
// started.
//
// --cpu-per-request D gives each normal HTTP request and unary RPC D of
// real CPU work (a busy loop on one OS thread until the thread's CPU
// clock has advanced by D) while it holds its slot, before ServiceTime:
// a request then holds its slot for D plus ServiceTime, longer when the
// cores are contended, and the CPU it costs is D whatever else runs.
//
// # Antagonists
//
// --antagonist [INSTANCE:]period=D[,duty=F][,slowdown=Nx][,cpu=D][,phase=D][,seed=N]
// slows an instance down on a schedule, as the other tenants of a machine
// do (Prequal's antagonists): for duty (default 0.5) of every period,
// each normal request, unary RPC and stream message is served slowdown
// times slower (its ServiceTime and its --cpu-per-request multiplied)
// and does cpu more of busy work. Without seed the window opens at the
// start of each period, phase after the instance started; with seed its
// offset in each period is drawn from the seed, the period's number and
// the instance's name, so a run repeats exactly and two instances with
// the same seed do not slow down together. The schedule runs on the
// instance's clock from New (Antagonist.On is the pure function), and
// Stats.Antagonized counts what it slowed. For example half of a
// region's instances, each four times slower for 10s of every 20s:
//
//	--antagonist us-east-b-1:period=20s,slowdown=4x,seed=1 \
//	--antagonist us-east-c-1:period=20s,slowdown=4x,seed=2
//
// # Start-up
//
// --startup-delay D emulates a cold start. The instances bind their
// addresses at once (so that the port is held, except a tcp instance's)
// but fail their health check until D has passed since the process
// started: /healthz answers 503 "starting" (http, h2), the health service
// NOT_SERVING (grpc), and the listener is closed (tcp), exactly as an
// unhealthy instance (see Health), and Stats.Starting is true. Normal requests that arrive
// meanwhile are served: a gfe sends none, since it sends traffic only to
// instances whose health check passes, so a gfe's first request reaches
// an instance that has finished starting. When D has passed every
// instance becomes healthy, whatever an admin request set meanwhile.
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
// probes, rejections) and is never spent holding a capacity slot. The same
// wait comes before a unary RPC, a grpc.health.v1 Check, and the opening of
// a stream (before its headers, its WebSocket handshake answer or its tcp
// hello); each message a stream echoes then waits the RTT again, plus
// ServiceTime, before its reply.
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
// and one instance of each other protocol with the process admin:
//
//	testbackend --admin 127.0.0.1:9100 \
//	  --instance name=tls-1,addr=127.0.0.1:9111,region=us-east,zone=us-east-b,proto=h2 \
//	  --instance name=grpc-1,addr=127.0.0.1:9112,region=us-east,zone=us-east-b,proto=grpc,max_concurrency=0 \
//	  --instance name=tcp-1,addr=127.0.0.1:9113,region=us-east,zone=us-east-b,proto=tcp,max_concurrency=0
//	curl -X POST '127.0.0.1:9100/admin/health?instance=grpc-1&healthy=false'
//
// and one instance that starts in 20s and costs 2ms of CPU per request,
// as the autoscaler's process provider starts it:
//
//	testbackend --instance name=us-east-b-9,addr=127.0.0.1:9109,region=us-east,zone=us-east-b \
//	  --startup-delay 20s --cpu-per-request 2ms --cpus 1
//
// The process stops gracefully on SIGINT or SIGTERM: it stops accepting,
// lets admitted requests and unary RPCs finish (up to --shutdown-timeout)
// and exits 0. Streams do not wait for their clients: a WebSocket closes
// with status 1001 (going away) and an Echo stream ends with UNAVAILABLE,
// each after the message in progress; a health Watch ends with
// UNAVAILABLE; a tcp connection is closed at once.
package testbackend
