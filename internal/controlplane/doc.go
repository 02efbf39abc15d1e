// Package controlplane is the control-plane daemon of Spillway
// (docs/design.md §5): it serves the operator configuration and the health of
// every backend instance to the gfes, over the ControlPlane gRPC service of
// proto/spillway/v1. cmd/controlplane only turns flags into a Config and runs
// the Daemon's Components.
//
// # Model
//
// One goroutine, the health manager's, builds every State the daemon serves
// (STYLE §4): the last good configuration plus one health verdict per
// instance, under a content version. States are immutable; the gRPC streams
// read the current one and wait for the next. Everything else only wakes
// that goroutine:
//
//	config file ──(fsnotify, debounce)──► reloader ──ApplyConfig──┐
//	lb/health Checkers ──OnChange─────────────────────────────────┤
//	gossip (other replicas' GroupStates, membership) ─────────────┤
//	                                                               ▼
//	                                 health manager: ownership, checks, merge
//	                                   │ State ──► hub ──► StreamSnapshots (per gfe)
//	                                   └ GroupStates of owned groups ──► gossip
//
// # Configuration and versions
//
// The file is loaded with config.Load (viper, SPILLWAY_* overrides) and
// validated; a change is applied only if it is valid, and an invalid one is
// logged field by field, counted (spillway_controlplane_config_reloads_total
// {result="failure"}) and otherwise ignored: the last good configuration
// stays in service. Each accepted configuration gets Version "<n>-<hash>",
// n counting accepted configurations and hash the first 12 hex digits of the
// SHA-256 of its canonical YAML (config.Marshal: the effective
// configuration after overrides, only the fields that differ from their
// defaults, which is also what snapshots carry, so a gfe parses exactly
// what was validated here). Rewriting the file with the same effective
// content makes no new version.
//
// A snapshot's version is "<config hash>-<health hash>", the health hash
// covering each instance's (group, address, healthy). It depends on content
// only, so replicas that agree serve the same version, and a gfe that
// reconnects to another replica is not pushed what it already has.
//
// # gfes of other releases
//
// Each gfe states the configuration fields it reads (Node.config_fields; none
// for a gfe from before 0.1.0, which is assumed to read
// config.BaselineFields). A gfe that lacks a field the configuration sets is
// sent the snapshot without it (config.MarshalFor, one form per schema,
// wire.go), under the version "<that form's hash>-<health hash>", and its
// NodeStatus names the fields it cannot honour (dropped_fields). A gfe whose
// last answer was a NACK is lagging (NodeStatus.Lagging, /status
// lagging_gfes). Both, and each gfe's build, are exported per connected gfe
// (gfeCollector: spillway_controlplane_gfe_*). docs/design.md ("Snapshot wire
// format") says why the snapshot stays YAML.
//
// # Sharing health checks
//
// Every instance group is checked by one replica: the Maglev owner
// (lb/hashing) of the group's name among the alive control planes seen in
// gossip (members listed in Config.Replicas whose state has kind
// controlplane and, with TLS, is sealed by their own certificate; self
// included). Each
// replica runs lb/health Checkers for its groups only, with each service's
// health_check settings (an instance used by several services is healthy
// only if every service's check passes), and gossips a GroupState per
// owned group: instances, healthy count and the healthy addresses. These
// are health, not capacity: they count demoted instances too (a gfe needs
// their health to send them overflow), while every gfe plans capacity from
// the config's active instances (config.GroupCapacity). An autoscaled group
// without instances has nothing to check and is gossiped as 0 of 0. For every other group it
// serves the owner's gossiped verdicts, so a gfe gets the full picture from
// any replica. When a replica dies its groups move to the others, which keep
// serving its last verdicts until their own checks decide; see merge for the
// exact precedence.
//
// # Snapshot protocol
//
// StreamSnapshots follows the xDS-style protocol documented in
// controlplane.proto: the current State is pushed once Ready (skipped if the
// gfe announces that version), then again whenever its version changes; the
// gfe's ACK or NACK of the latest push is recorded per node (Daemon.Node,
// /status) and counted; NACKs are logged with the gfe's error and never stop
// later pushes. RequestCapacity validates, logs and counts requests and
// hands them to the autoscaler (Autoscale), which answers whether the group
// is recommended the instances wanted; without --autoscale-provider it
// answers granted=false, "no autoscaler configured". The server also
// registers the standard gRPC health service (SERVING once Ready) and
// reflection.
//
// # Autoscaler
//
// With Config.Autoscale.Provider set, the autoscaler component runs the
// lease elector (internal/autoscale/lease, over this replica's gossip) and
// the controller (internal/autoscale/controller) for every group with an
// autoscaling block. The holder of a group's lease publishes the
// instances it runs (gossip.NodeState.Autoscaled, through
// statePublisher.SetAutoscaled); every replica's health manager adds the
// vouched replicas' published instances to their groups
// (autoscaledFrom, withAutoscaled: re-marshaled and re-parsed, so that it
// is validated as a gfe will parse it) and checks and serves them like the
// file's instances. The gfes' load comes from their gossip
// (NodeState.Load); an instance's CPU from /proc (process provider).
//
// # xDS export
//
// With Config.XDS.Listen set, the xds component serves the plan over xDS
// (package xdsexport) on a listener of its own, with the control plane's
// certificate and the grants XDS.AllowedClients, which place every client
// at a site of its certificate's (a claim of another site is refused) and
// bound what clients can make the replica hold (XDS.Limits). Every
// XDS.PlanInterval, and whenever a new State is stored, it runs the gfes'
// table build (lb/routing.Builder: gossip bounds, capacity
// factors, the planner, damping) over the served State and every gfe's
// gossiped state, exactly as a gfe plans but without a site of its own,
// and hands each planned service's plan to the export, which pushes each
// site's row to the clients at that site. Nothing is served before the
// State is Ready. With XDS.LoadReportInterval > 0 the clients report their
// calls over LRS (xdsexport.LoadReports), each site's bounded to
// XDS.MaxSiteDemand × the service's capacity; each interval the component
// gossips them, for the sites that have a gfe and at most 4096 site and
// service pairs, as this replica's SiteDemand, which every gfe and the
// export itself add to the site's demand (routinginput.Peers). The
// replica's gossip state has several writers, the health manager
// (groups), the export (site demand) and, once the autoscaler runs here,
// the lease elector (claims, through lease.GossipMedium.SetLeases):
// statePublisher composes them, keeping each one's part.
//
// # Admin
//
// The admin listener (loopback by default, unauthenticated) serves
// /metrics (spillway_controlplane_* and the Go and process collectors),
// /healthz, /readyz (200 once the startup health view has settled), /status
// (JSON: versions, ownership, health, gfes) and /debug/pprof/.
package controlplane
