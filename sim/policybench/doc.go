// Package policybench is `lbsim bench`: it runs a scenario's timeline
// (package sim) step by step with one simulated gfe per site that runs the
// gfe's own routing, and scores every load-balancing policy on the same
// trace.
//
// A routing.Builder (lb/routing) per site builds the routing table from a
// snapshot of the world as gossip shows it, and the site's demand is split
// over instances as that table picks (the plan row's Picker, round robin
// over the pool, or the table's Maglev for every synthetic client
// connection). Each gfe closes the loop as the gfe does: what its requests
// ended in on each instance (served and how fast, refused by a full queue,
// failed at an instance that is down, load reports) goes into the builder's
// backend counters, and the builder's capacity factors are gossiped to the
// other gfes (timeline feedback and model load_reports turn this off). The
// queueing of the backends (model.go), the LP optimum (sim.SolveLP) and the
// metrics are the simulator's own. See Run for the model.
//
// The rows are benchpolicy.Rows, the rows of the real benchmark
// (internal/realbench) too. Package policybench does no I/O beyond
// Result's writers writing to the given writer.
package policybench
