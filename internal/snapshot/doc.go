// Package snapshot holds the one domain shape of what a control plane serves
// and a gfe applies: a Snapshot, the parsed configuration with the health of
// every instance under one version, converted from the wire form
// (proto/spillway/v1.Snapshot) in one function, FromProto.
//
// The flow is: operator YAML → config.Load (control plane) → canonical YAML
// (the fields the operator set that the receiving gfe reads,
// config.MarshalFor) and health verdicts in a pb.Snapshot → FromProto (gfe,
// config.ParseSnapshot: unknown fields ignored and named) → Snapshot, whose
// routing.Fleet (version, config, health) is the routing build's input
// (lb/routing) → the gfe's routing table. Health has one shape from here
// on: Healthy(addr).
//
// Package snapshot does no I/O.
package snapshot
