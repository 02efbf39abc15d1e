// Package autoscalebench is the autoscaler offline: `lbsim autoscale`
// replays a recorded trace through lb/autoscale's rules (ParseTrace,
// RunTrace), and `lbsim autoscale-bench` is the autoscaler scorecard (Run):
// the Cloud Run rules, alone and with the waterfall as their buffer, against
// Knative's KPA, the Kubernetes HPA and a clairvoyant oracle (and the rules
// again at Knative's constants), on a deterministic queueing model
// (see autoscale_bench.go's top comment for every rule).
//
// It does no I/O beyond LoadTrace reading the named file and WriteTable
// writing to the given writer.
package autoscalebench
