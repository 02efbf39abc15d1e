// Package controller runs the autoscaler of every autoscaled instance
// group (docs/design.md §6) inside a control-plane replica: it is the
// I/O around lb/autoscale's pure rules.
//
// # Loop
//
// One goroutine (Run) owns everything. A lease taken or lost is acted on
// at once (Leases.Changes), not at the next tick. Every Config.Tick, for
// each group
// with an autoscaling block whose lease this replica holds
// (internal/autoscale/lease: one replica acts on a group at a time), it
//
//  1. samples the group: CPU cores in use by its instances over the tick
//     (Options.CPU, cumulative CPU seconds per instance: the process
//     provider's /proc figures), and the requests the gfes have in flight
//     to it, waiting for it in their pending queues, and send it per second
//     (Options.Load: the gfes' gossiped load, summed). The demand their
//     plans spill past the group to farther regions counts as concurrency
//     too, by Little's law (Load.Concurrency): so the waterfall is the
//     buffer while the region scales up (docs/design.md §6), and the spill
//     ends as capacity arrives;
//  2. calls autoscale.Autoscaler.Tick with that Sample, and logs every
//     decision that changes the count, with its driver and reason;
//  3. reconciles the group's instances with the decision: promotes demoted
//     instances, starts new ones through the Provider, demotes the
//     surplus (newest first), and stops the demoted instances the rules
//     stopped.
//
// A capacity request from a gfe (Demand, the RequestCapacity RPC) is
// applied at once with Autoscaler.OnDemand, so that a group at zero starts
// its first instance without waiting for the next tick.
//
// # What the gfes see
//
// The controller publishes (Options.Publish) the instances of each group it
// runs: started, not stopping, each with its demoted flag. The control
// plane adds them to the group in the configuration it serves
// (config.Instance.Demoted for the demoted ones, max_concurrency from the
// group's max_concurrency_per_instance), so they are health-checked like
// any instance and get traffic only once healthy: a cold start is an
// instance that fails its check until it is ready.
//
// Stopping drains: an instance to stop is first left out of what is
// published, so the next snapshot takes it away from the gfes; after
// Config.DrainDelay (time for that snapshot to reach them and for requests
// in flight to end) the Provider stops it, which drains the rest its own
// way (SIGTERM and a drain timeout for processes).
//
// # Guarantees
//
//   - Only a lease holder starts or stops instances of a group. When this
//     replica loses a lease it stops acting on the group at once, and
//     drains and stops the instances it started for it (the next holder
//     starts its own): with the process provider, instances live and die
//     with the replica that started them.
//   - The running count never exceeds the group's max_instances, starting
//     and draining instances included.
//   - A provider error leaves the controller running: the failed
//     instances are counted (Status.StartFailures), logged, and the next
//     tick reconciles again.
//
// # ACT
//
// The gfes tune every instance's concurrency limit from the CPU its load
// reports carry (Adaptive Concurrency Tuning, lb/routing) and
// gossip each group's mean tuned limit when it is below
// max_concurrency_per_instance (gossip.GroupLoad.ACT); Load.ACT is their
// mean, weighted by their requests in flight, and the Sample's ACT, so the
// ACT driver scales a group whose instances are CPU-bound out before the
// concurrency driver sees it full.
package controller
