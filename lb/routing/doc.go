// Package routing is the routing build every program that routes shares:
// from one typed world — a Fleet (the snapshot's services, groups,
// instances and instance health), the other nodes' Peers (every site's
// demand, RTT and capacity factors, from gossip) and this node's own view
// (Self, and the signals of its Backends) at Now — the immutable Table that
// every request and connection picks its backend from, with a plan per
// planned service. The gfe routes by it (internal/gfe), the control
// plane's xDS export plans by it (internal/controlplane) and the simulator
// runs it (sim), so that the plan a simulation scores is the plan a gfe
// serves.
//
// It is pure: no I/O, no goroutines, no logger or metrics registry, and it
// imports nothing under internal/ (a test in docs/ enforces it). Time
// comes in as an argument (Input.Now) or, for a picker a request gives no
// time, through Options.Now. Each source of the input translates into it
// once, next to its owner: the snapshot stream in internal/snapshot
// (Snapshot holds a Fleet), gossip in internal/routinginput (Peers), the
// xDS export's State in internal/controlplane, the simulator's world in
// sim (FromConfig). The input types are in input.go, with the unit of
// every field.
//
// # Model
//
// A Builder owns what outlives one table: the Backends (lb/backend, with
// their in-flight counters), each service's Meters (decisions, failures,
// arrivals, round-robin cursor), its outlier detector and its previous
// plan. Build makes, for every service of the config:
//
//  1. members: every healthy instance of the service's groups, registered
//     with the service's outlier detection;
//  2. the pool: the members less those ejected at Now (for hashing with
//     scope nearest_region, only the nearest region's), with the baseline
//     pickers over it — round robin, least request (lb/backend) or Maglev
//     (lb/hashing) — its active members first and its demoted ones
//     (config.Instance.Demoted) after them;
//  3. for a planned policy (waterfall, min_rtt): the World (BuildWorld),
//     the plan (waterfall.Compute or ComputeMinRTT, then Damp against the
//     previous plan) and the waterfall.Picker over this site's row;
//  4. the scope: the members this site may use in the order retries prefer
//     regions (the row's groups for a planned policy with a row, else all
//     members nearest region first), and the session affinity over it;
//     and the reach: the scope, then the members of the site's farther
//     regions, where a retry after an unreachable backend may go.
//
// # Guarantees
//
//   - A Table and its Services are never changed after Build returns; the
//     atomics they point at (Meters, Backends, outlier Hosts) outlive
//     tables, so counts, limits and round-robin order carry over.
//   - Pick, PickAt, PickAffinity (when it issues no cookie), RetryPick and
//     NearestFree are safe for concurrent use, never block, and (but for
//     PickAffinity's cookies) do not allocate (TestPickDoesNotAllocate,
//     the affinity Alloc test in internal/gfe/httpproxy).
//   - Demoted instances count for nothing in a group's capacity (the
//     world, the capacity estimators, Bounds, CheckPlannable: healthy
//     active over active instances), and every pick takes one only when
//     the active instances it competes with are full: the waterfall
//     Picker's group (waterfall.NewPickerDemoted), the baseline pool
//     (hashing hashes over the active members), and RetryPick and
//     NearestFree prefer an active member of equal rank. Session affinity
//     never pins to a demoted instance while its scope has an active one
//     (TestDemoted*). An autoscaled group without instances has capacity 0
//     and no share; its site's requests go to the other groups
//     (TestEmptyAutoscaledGroup).
//   - A pick that succeeds holds one slot of its backend, released with
//     Pick.Done; a failed pick holds none. Errors are ErrNoBackend or
//     ErrAllBusy (ErrorLabel gives their fixed metric labels).
//   - A service whose plan fails keeps its previous table's entry; Build
//     returns the problem once (until it changes or goes away) instead of
//     logging it.
//   - BuildWorld, and so the plan, depend only on the inputs: equal inputs
//     give equal tables whatever the order of Peers.
//   - What peers gossip is believed only within plausibility (docs/design.md §9):
//     a site's RTT is the median over its gfes, this gfe's own measurement
//     breaking a tie at its own site, so one lying gfe cannot move its site
//     (BuildWorld); with Config.Bounds a peer's RTT, demand and demand
//     growth are clamped, a new peer counts no demand in its first build,
//     and a peer's capacity factor counts at least feedback.min_factor.
//     Clamps are returned by TakeClamps for the caller's metric and log.
//
// # Example
//
// The gfe's planner, every PlanInterval:
//
//	demand := b.Demand(now) // requests/s per service, from the Meters
//	t, problems := b.Build(routing.Input{Fleet: &cs.Fleet, Peers: routinginput.Peers(g),
//		Self: routing.Peer{Node: node, Site: site, RTT: rtt, Demand: demand}, Now: now})
//	table.Store(t)
//
// and a request:
//
//	svc := table.Load().Services[route.Service]
//	pk, err := svc.Pick(rnd, routing.Flow{Src: client, Dst: listener})
//	if err != nil { /* 503, or 429 for ErrAllBusy */ }
//	defer pk.Done()
package routing
