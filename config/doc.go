// Package config is Spillway's operator configuration: the YAML schema that
// describes regions, zones, instance groups and their instances, the backend
// services that use those groups, and the routes that lead to the services
// (DESIGN §2, §4, §5), with its loader and validator.
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
//	            instances:                # required, at least one
//	              - address: 127.0.0.1:9101   # host:port, unique
//	                max_concurrency: 0        # in-flight limit; 0 = unlimited
//	services:                             # required, at least one
//	  - name: web                         # unique
//	    policy: waterfall                 # waterfall | min_rtt | round_robin | least_request | hash2 | hash3 | hash5
//	    hash_scope: global                # hash policies only: global | nearest_region
//	    balancing_mode: RATE              # RATE | CONNECTION | UTILIZATION
//	    backends:                         # required, at least one; a group at most once
//	      - group: us-east-b-web
//	        max_rate_per_instance: 100    # RATE: exactly one of max_rate_per_instance, max_rate (req/s)
//	        # CONNECTION: exactly one of max_connections_per_instance, max_connections
//	        # UTILIZATION: max_utilization in (0,1]
//	        capacity_scaler: 1.0          # [0,1]; 0 drains
//	    session_affinity:
//	      type: none                      # none | client_ip | client_ip_proto | client_ip_port_proto |
//	                                      # generated_cookie | http_cookie | header
//	      cookie_name: ""                 # required for the cookie types, else invalid
//	      cookie_ttl: 0s                  # cookie types only; 0 = session cookie
//	      header_name: ""                 # required for header, else invalid
//	    health_check:
//	      protocol: http                  # http | https | tcp | grpc
//	      path: /healthz                  # http, https
//	      port: 0                         # 0 = the instance's port
//	      grpc_service: ""                # grpc only
//	      interval: 5s                    # > 0
//	      timeout: 1s                     # > 0 and < interval
//	      healthy_threshold: 2            # ≥ 1 consecutive passes
//	      unhealthy_threshold: 3          # ≥ 1 consecutive failures
//	      jitter: 0.1                     # [0,1)
//	    spill:                            # preemptive spill, DESIGN §3 rule 5
//	      threshold: 0.5                  # [0,1]; below it a region keeps min(1, slope·h)
//	      slope: 2                        # > 0
//	routes:                               # required, at least one
//	  - host: "*"                         # exact host, "*.example.com", or "*"
//	    path_prefix: /                    # plain string prefix, starts with "/"
//	    service: web                      # must name a service
//
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
// then validated like the file. A variable that starts with
// SPILLWAY_REGIONS_, SPILLWAY_SERVICES_ or SPILLWAY_ROUTES_ but names no
// field is an error (a typo must not be ignored); other SPILLWAY_* variables
// are left to the binaries' own flags.
//
// # After loading
//
// A *Config from Load, Parse or New is read-only and safe for concurrent use;
// callers must never write to it. Its helpers answer from an index built at
// load time: Service and Group look up by name (a GroupRef carries the
// group's region and zone), Groups lists every group, Route matches a request
// (exact host before wildcard before "*", then longest path prefix), and
// GroupCapacity / Backend.Capacity compute a group's serving capacity from its
// healthy instance count. Marshal writes a Config back as YAML that Parse
// reads into an equal Config, so the control plane can ship the effective
// configuration (after overrides and defaults) to other processes.
package config
