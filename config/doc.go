// Package config is Spillway's operator configuration: the YAML schema that
// describes regions, zones, instance groups and their instances, the backend
// services that use those groups, the routes that lead to the services and
// the listeners a gfe serves them on (docs/design.md §2, §4, §5), with its
// loader and validator.
//
// # Schema
//
// Every key is documented on the Go field that carries it (the mapstructure
// tag is the YAML key); defaults are those of the Default* functions.
//
//	regions:                              # required, at least one
//	  - name: us-east                     # unique; [a-z0-9._-], ≤ 63 bytes
//	    zones:                            # required, at least one
//	      - name: us-east-b               # unique across the file
//	        groups:                       # required, at least one
//	          - name: us-east-b-web       # unique across the file
//	            instances:                # required, at least one; may be empty or absent when autoscaled
//	              - address: 127.0.0.1:9101   # host:port, unique
//	                max_concurrency: 0        # in-flight limit; 0 = unlimited
//	                demoted: false            # true: overflow only, not in capacity (see below)
//	            autoscaling:                     # optional (docs/design.md §6); absent = off; present: absent keys default as shown
//	              max_instances: 0               # required to turn it on: 1..10000
//	              min_instances: 0               # 0..max_instances; 0 = scale to zero without requests
//	              initial_instances: 0           # min..max; 0 = min_instances
//	              cpus_per_instance: 1           # (0, 1000]; the CPU driver's unit
//	              max_concurrency_per_instance: 80 # 1..1000000; concurrency unit, ACT ceiling
//	              cpu_target: 0.6                # [0.1, 0.95]
//	              concurrency_target: 0.6        # [0.1, 0.95]; also the ACT driver's
//	              cold_start: 10s                # (0, 1h]; estimated start-to-ready time
//	              cpu_window: 1m                 # [1s, 1h]; the CPU driver's average
//	              concurrency_window: 1m         # [1s, 1h]; concurrency and ACT average;
//	                                             #   no request for this long ⇒ may scale to zero
//	              concurrency_long_window: 10m   # concurrency_window..24h; driver takes the max
//	              act_interval: 1s               # (0, 1m]; ACT limit −1 when CPU over it >
//	              act_high_cpu: 0.9              #   (0, 1]; +1 at the limit with CPU <
//	              act_low_cpu: 0.7               #   (0, act_high_cpu) for an interval
//	              tolerance: 0.1                 # [0, 0.5]; hold band, relative (54–66% at 60%)
//	              demoted_idle_utilization: 0.1  # [0, 1]; a demoted set under it over
//	              demoted_idle_window: 1m        #   [1s, 1h] this window is stopped
//	              demoted_keep_fraction: 0.5     # [0, 1]; share of a demotion kept until
//	              idle_timeout: 15m              #   (0, 24h] of serving nothing
//	              min_pending_wait: 10s          # [100ms, 1h]; a pending request waits at most max(this,
//	              pending_wait_cold_starts: 3.5  #   [0, 100] × cold_start); at max_instances then 429
//	services:                             # required, at least one
//	  - name: web                         # unique
//	    policy: waterfall                 # waterfall | min_rtt | round_robin | least_request |
//	                                      # envoy_priority | hash2 | hash3 | hash5
//	    hash_scope: global                # hash policies only: global | nearest_region
//	    balancing_mode: RATE              # RATE | CONNECTION | UTILIZATION
//	    backends:                         # required, at least one; a group at most once
//	      - group: us-east-b-web
//	        max_rate_per_instance: 100    # RATE: exactly one of max_rate_per_instance, max_rate (req/s)
//	        # CONNECTION: exactly one of max_connections_per_instance, max_connections
//	        # UTILIZATION: max_utilization in (0,1] and utilization_rate_per_instance
//	        #   (req/s at 100%); capacity = healthy × the two, in req/s
//	        capacity_scaler: 1.0          # [0,1]; 0 drains
//	    session_affinity:
//	      type: none                      # none | client_ip | client_ip_proto | client_ip_port_proto |
//	                                      # generated_cookie | http_cookie | header
//	      cookie_name: ""                 # required for the cookie types, else invalid
//	      cookie_ttl: 0s                  # cookie types only; 0 = session cookie
//	      header_name: ""                 # required for header, else invalid
//	      cookie_secret: ""               # generated_cookie: required, ≥ 32 bytes, same on every gfe
//	      previous_cookie_secret: ""      # generated_cookie: optional, verifies only (rotation)
//	      cookie_secret_file: ""          # instead of cookie_secret: a file holding it (Load reads it;
//	      previous_cookie_secret_file: "" #   relative to the config file); likewise for the previous one
//	    health_check:
//	      protocol: http                  # http | https | tcp | grpc
//	      path: /healthz                  # http, https
//	      port: 0                         # 0 = the instance's port
//	      grpc_service: ""                # grpc only
//	      interval: 5s                    # [100ms, 1h]
//	      timeout: 1s                     # ≥ 50ms and < interval
//	      healthy_threshold: 2            # ≥ 1 consecutive passes
//	      unhealthy_threshold: 3          # ≥ 1 consecutive failures
//	      jitter: 0.1                     # [0,1)
//	    spill:                            # preemptive spill, docs/design.md §3 rule 5
//	      threshold: 0.5                  # [0,1]; below it a region keeps min(1, slope·h)
//	      slope: 2                        # > 0
//	    outlier_detection:                # passive health: eject instances failing real requests
//	      consecutive_5xx: 5              # ≥ 0; 0 disables this trigger
//	      consecutive_connect_failures: 3 # ≥ 0; 0 disables this trigger
//	      base_ejection_time: 30s         # > 0; the n-th ejection lasts n × base ...
//	      max_ejection_time: 300s         # ... up to this; ≥ base_ejection_time
//	      max_ejection_percent: 50        # 0..100 of each instance group at once
//	    max_pending_requests: 1000        # 1..1000000 waiting at once in a gfe's pending queue; beyond: 429
//	routes:                               # required, at least one
//	  - host: "*"                         # exact host, "*.example.com", or "*"
//	    path_prefix: /                    # plain string prefix, starts with "/"; matches the decoded
//	                                      # canonical path (lb/reqpath), ASCII case-insensitively
//	    service: web                      # must name a service
//	    timeout: 30s                      # [10ms, 24h]; whole request, retries and queueing included
//	    retries: 1                        # 0..5; on another instance, only when safe:
//	                                      # never reached a backend, or idempotent and no response byte yet
//	    per_try_timeout: 0s               # 0 = off, or 10ms..timeout; an idempotent bodiless attempt without headers by then is retried
//	                                      # (like a refused connection: in another region first, past the plan row if it must)
//	listeners:                            # optional; none = the gfe serves only --listen (http)
//	  - name: public                      # required, unique; same syntax as other names
//	    protocol: https                   # required: http (HTTP/1.1 + h2c) | https (TLS, ALPN h2, http/1.1) | tcp (L4)
//	    port: 8443                        # required, 1..65535, unique; bound on the --listen host
//	    service: ""                       # tcp: required, a CONNECTION service; http, https: must be empty
//	    certificates:                     # https: required, ≥ 1, picked by SNI, the first is the default;
//	      - cert_file: /etc/tls/a.crt     #   others: must be empty. PEM paths, required; not read by Load
//	        key_file: /etc/tls/a.key
//	    read_header_timeout: 10s          # http, https: (0, 1h]; tcp: must be unset
//	    idle_timeout: 90s                 # http, https: (0, 24h]; tcp: (0, 24h], default 10m
//	    max_header_bytes: 65536           # http, https: 1024..1048576; tcp: must be unset
//	    max_request_body_bytes: 0         # http, https: 0..1 TiB, 0 = unlimited; tcp: must be unset
//	    request_body_timeout: 10s         # http, https: 0..24h, 0 = none; a longer pause in a body: 408; tcp: must be unset
//	    max_connection_age: 0s            # http, https: 0..24h, 0 = never; older connections end gracefully (±10%); tcp: must be unset
//	    fast_path: true                   # http, https: true = plain HTTP/1.1 on the gfe's own fast path (https: ALPN
//	                                      #   http/1.1 or none), the rest (h2, h2c, upgrades...) to net/http;
//	                                      #   false = everything on net/http; tcp: must be unset
//	    first_byte_timeout: 30s           # tcp: (0, 1h], default 30s; http, https: must be unset
//	    max_connections: 10000            # tcp: 1..1000000, default 10000; http, https: must be unset
//	    max_connections_per_client: 256   # 1..1000000, default 256: connections one client IP may hold (more are reset)
//	quota:                                # optional; no metrics = no request is charged (docs/design.md §7)
//	  metrics:
//	    - name: read-requests             # required, unique; same syntax as other names
//	      unit: requests                  # requests (default) | bytes (request payload bytes; a body
//	                                      # without a declared length is refused 411)
//	      default_limit: 600              # required, per consumer per minute, 0..1e12
//	  charges:                            # a request charges every entry it matches
//	    - service: web                    # required, a service
//	      method: POST                    # optional, upper case; default every method
//	      path_prefix: /api/              # default "/"; matched as a route's path_prefix
//	      metric: read-requests           # required, a metric
//	      cost: 1                         # per request (requests) or per byte (bytes), 1..1e6, default 1
//	  consumers:                          # API key (x-api-key header, else the key query parameter) → project
//	    - api_key: k-8-to-256-bytes       # required, unique, printable ASCII; a secret (redacted like cookie secrets)
//	      project: acme                   # required; same syntax as other names; "anonymous" is reserved
//	  producer_overrides:                 # the service owner's limit for a project: may raise or lower the default
//	    - {project: acme, metric: read-requests, limit: 6000}
//	  consumer_overrides:                 # a project's own cap: can only lower its limit
//	    - {project: acme, metric: read-requests, limit: 300}
//	  allow_anonymous: false              # true: requests without a known key are charged to "anonymous"; false: 401
//
// A project's limit for a metric (Config.QuotaLimit, lb/quota.EffectiveLimit):
// no override ⇒ default_limit; producer override only ⇒ it; consumer override
// only ⇒ min(it, default_limit); both ⇒ min(producer, consumer). The
// control plane's AllocateQuota charges these limits and the gfes enforce
// them (internal/gfe/quotaclient).
//
// The defaults of a listener depend on its protocol (DefaultListener): the
// values shown are those of http and https, and of tcp for the tcp-only
// fields.
//
// # Bounds
//
// Every number has an upper bound, so that nothing derived from a valid
// config overflows (the first security review, finding 7: SECURITY.md): rates (max_rate_per_instance,
// max_rate, utilization_rate_per_instance) at most 1e9 requests/s; backend
// connection limits at most 1e9; at most 10000 instances per group and a
// max_concurrency of at most 1e6 (so a group's capacity is at most 1e13
// and the planner's totals stay finite); route timeouts, idle timeouts
// and ejection times at most 24h; health check intervals, feedback hold and
// recover_delay, read_header_timeout and first_byte_timeout at most 1h;
// queue_delay at most 1m; thresholds at most 100; outlier triggers at
// most 10000; spill.slope at most 1000; cookie_ttl at most 400 days; an
// autoscaling block's instances at most 10000, its CPUs per instance at most
// 1000, its windows and cold start at most 1h (the long concurrency window
// and idle timeout 24h, act_interval 1m).
//
// The durations whose tiny values empty the plan or keep a group from
// scaling have a lower bound too: health_check.interval at least 100ms
// and its timeout at least 50ms (below, healthy backends flap); a route's
// timeout and a set per_try_timeout at least 10ms (below, every request
// times out against its backend and outlier detection ejects them all);
// feedback.queue_delay at least 1ms; autoscaling cpu_window,
// concurrency_window and demoted_idle_window at least 1s (the
// controller's tick), and min_pending_wait at least 100ms (a shorter wait
// never asks for an instance).
// Durations are strings as time.ParseDuration reads them ("5s", "1m30s"); a
// bare number is rejected rather than read as nanoseconds. Keys are
// case-insensitive (viper lower-cases them). A key with no value ("spill:")
// is the same as an absent key.
//
// # Loading
//
// Load and Parse read YAML through viper, check the raw tree against the
// schema (unknown keys and values of the wrong type are errors that name
// their path, inside lists too: "services[0].polcy: unknown field"), fill
// defaults, decode with viper.UnmarshalExact and run Validate. Every problem
// is reported at once, joined with errors.Join, each a *FieldError whose text
// is "file: path: message":
//
//	configs/bad.yaml: services[1].backends[0].group: unknown instance group "eu-west-x"
//
// # Environment overrides
//
// Load (not Parse) lets environment variables override any scalar field. The
// variable's name is SPILLWAY_ followed by the field's path with list indexes
// as numbers, every separator an underscore, upper-cased (viper's convention
// for nested keys, extended to list entries):
//
//	services[0].backends[1].capacity_scaler  ←  SPILLWAY_SERVICES_0_BACKENDS_1_CAPACITY_SCALER=0
//	routes[0].host                           ←  SPILLWAY_ROUTES_0_HOST=api.example.com
//	services[2].health_check.interval        ←  SPILLWAY_SERVICES_2_HEALTH_CHECK_INTERVAL=10s
//
// An override can only change a field of a list entry that exists in the
// file; it cannot add entries. Values are parsed for the field's type and
// then validated like the file; a listener whose protocol is overridden
// takes the defaults of its new protocol. A variable that starts with
// SPILLWAY_REGIONS_, SPILLWAY_SERVICES_, SPILLWAY_ROUTES_ or
// SPILLWAY_LISTENERS_ but names no field is an error (a typo must not be
// ignored); other SPILLWAY_* variables are left to the binaries' own flags.
//
// # After loading
//
// A *Config from Load, Parse or New is read-only and safe for concurrent use;
// callers must never write to it. Its helpers answer from an index built at
// load time: Service, Listener and Group look up by name (a GroupRef carries
// the group's region and zone), Groups lists every group, Route matches a
// request
// (exact host before wildcard before "*", then longest path prefix), and
// GroupCapacity / Backend.Capacity compute a group's serving capacity from its
// healthy instance count.
//
// # Demoted instances and empty groups
//
// An instance with demoted: true is kept for overflow only (docs/design.md
// §6): the autoscaler sets it, in the configuration the control plane serves
// to the gfes, on the instances it scaled down and will stop; an operator may
// set it for a warm standby. A demoted instance counts for nothing in its
// group's capacity (Group.ActiveInstances: a group of 3 healthy instances of
// which 1 is demoted plans the capacity of 2), and a gfe sends it a request
// only when every healthy non-demoted instance of the group is at its
// concurrency limit. A group with an autoscaling block (max_instances ≥ 1)
// may have no instances at all: it scales from zero, has capacity 0 until the
// control plane adds the instances it starts, and the planner gives its share
// to the other groups. Every other group needs at least one instance.
//
// # Strict for the operator, tolerant on the wire
//
// Marshal writes a Config back as YAML that Parse reads into an equal
// Config, so the control plane can ship the effective configuration (after
// overrides) to the gfes; it writes only the fields whose value differs
// from their default. Load and Parse, for files an operator writes, refuse
// every unknown field with its path. ParseSnapshot, for what a control
// plane sends, ignores a field it does not know and returns its path, so
// that a gfe one release behind applies the rest instead of refusing the
// whole snapshot. Fields lists the schema's field paths: a gfe states them
// in its snapshot stream, and MarshalFor leaves out for it every field it
// does not list (BaselineFields for a gfe from before 0.1.0, which states
// none and parses strictly), returning the ones the operator set so that
// the control plane reports them. See docs/design.md ("Snapshot wire format").
package config
