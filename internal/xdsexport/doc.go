// Package xdsexport turns Spillway's waterfall plan into xDS resources, so
// that Envoy fleets and proxyless gRPC clients (google.golang.org/grpc/xds)
// send their requests where the gfes of their site would (docs/design.md §5,
// docs/xds.md).
//
// # Model
//
// Every client of the export is at a site, which its certificate decides:
// the operator's grants (Grant, IDENTITY=SITE[+SITE...][/SERVICE...])
// give each certificate identity its sites and the services it sees, and
// the node's node.locality.region only picks among them (Access.Place). A
// node claiming a site its certificate is not granted is refused with
// PERMISSION_DENIED, on the discovery streams and on LRS alike, and
// counted. The clients of one kind at one site seeing the same services
// share a snapshot (View). For each site and each service a client may
// see the export serves:
//
//   - a ClusterLoadAssignment named after the service, with one locality per
//     instance group: {region, zone, sub_zone: group}. Its
//     load_balancing_weight is the group's share of the site's plan row
//     (Weights), so that the spill of rules 4–6 is in the weights: gRPC
//     honours locality weights by default and treats priorities as strict
//     failover, so a spill cannot be expressed with priorities. Groups
//     the row does not use are priority 1 (failover only, when every
//     endpoint of priority 0 is down). Endpoints carry the control plane's
//     health verdict (HEALTHY or UNHEALTHY; clients skip UNHEALTHY ones);
//   - a Cluster of type EDS over ADS, round robin inside a locality, with
//     common_lb_config.locality_weighted_lb_config (Envoy ignores locality
//     weights without it; gRPC honours them either way);
//   - for gRPC clients (KindGRPC): a Listener per service with an
//     api_listener (HttpConnectionManager, RDS over ADS, the router filter),
//     and a RouteConfiguration of one virtual host ("*") that sends every
//     call to the service's Cluster, so that the target xds:///SERVICE
//     reaches it;
//   - for Envoy (KindEnvoy, node.user_agent_name "envoy"): one listener with
//     a filter chain (HttpConnectionManager, RDS) at Options.EnvoyListen,
//     and a RouteConfiguration that mirrors the configuration's routes
//     (config.Config.Route's precedence as Envoy expresses it: see
//     envoyRoutes).
//
// A site that is not in the plan (no gfe there, or none has measured an
// RTT yet), and a client without a locality, get the plan's aggregate:
// each group weighted by the load all sites send it, or by its healthy
// instances when nothing is planned. Services of a baseline policy
// (round_robin, hashing) get their groups weighted by healthy instances.
//
// # Guarantees
//
//   - Build is pure: the same Input gives the same Resources, with the same
//     versions, whatever the order of map iteration.
//   - A version is the hash of its type's resources (deterministic
//     marshalling), so a plan that does not change pushes nothing, and a
//     change of the plan pushes only ClusterLoadAssignments.
//   - The weights of a site's priority-0 localities are its row's shares
//     scaled to WeightScale and rounded; a share > 0 never rounds to 0.
//
// With Options.LoadReporting every Cluster names this server as its LRS
// server, and LoadReports receives what the clients report: the calls
// they issue, by site and service (Demand), which the control plane plans
// and gossips as demand of their site (they bypass the gfes, so no gfe
// counts it).
//
// # Bounds
//
// No client, allowed or not, can make the export hold more than Limits
// and LRSConfig allow: streams in total and per identity (Gate),
// snapshots for streams (Limits.MaxKeys, each dropped Limits.KeyGrace
// after its last stream), and load-report clusters (only those naming a
// service the client may see, per stream and in total). A site's reported
// demand for a service, summed over its clients, is at most
// LRSConfig.MaxSiteShare × the service's capacity.
//
// What the export does not do: it carries no per-request policy (session
// affinity, retries, quota, outlier ejection): clients apply their own.
package xdsexport
