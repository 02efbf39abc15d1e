// Package loadreport reads the load reports that backends attach to their
// answers the ORCA way (Open Request Cost Aggregation), one of the local
// signals with which a gfe tightens a group's effective capacity before
// gossip catches up (docs/design.md §3, rule 8). It is pure: no I/O, clock or
// global state.
//
// # Where reports come from
//
// An HTTP backend sets the response header Endpoint-Load-Metrics (Header)
// in one of the three formats Envoy defines; Parse reads its value. A gRPC
// backend sends a serialized xds.data.orca.v3.OrcaLoadReport, per call in
// the trailer endpoint-load-metrics-bin (GRPCTrailer) or out of band on an
// OpenRcaService stream; google.golang.org/grpc/orca decodes those, and
// FromProto turns the proto into a Report.
//
// # Formats
//
// The header value is a format name, one space, and the report:
//
//	TEXT application_utilization=0.7, rps_fractional=95, named_metrics.queue=3
//	JSON {"applicationUtilization":0.7,"rpsFractional":95,"namedMetrics":{"queue":3}}
//	BIN MQAAAAAAwFdAQhAKBXF1ZXVlEQAAAAAAAAhASWZmZmZmZuY/
//
// TEXT is a comma-separated list of key=value elements, with optional
// spaces or tabs around elements, keys and values; empty elements are
// skipped, as RFC 9110 asks of list headers, so "TEXT" alone is an empty
// report. Keys are case-sensitive: cpu_utilization, mem_utilization,
// application_utilization, rps_fractional, eps and named_metrics.NAME.
// Values are decimal numbers as strconv.ParseFloat reads them.
//
// JSON is the protojson form of OrcaLoadReport: field names in lowerCamelCase
// or as in the proto, numbers or the strings protojson accepts for doubles.
//
// BIN is the standard base64 (padding optional) of the serialized proto.
// When a proto's rps_fractional is 0, its deprecated integer rps is read in
// its place.
//
// # What Parse guarantees
//
//   - Every value of a Report it returns is finite and >= 0. A report whose
//     kept fields hold NaN, an infinity or a negative number is rejected,
//     not clamped: a backend that sends one is broken and should be seen so.
//   - It is forward compatible: unknown keys and proto fields, the
//     utilization map, request costs and named metrics other than "queue"
//     (QueueMetric) are ignored, so a backend may send more than Spillway
//     reads.
//   - A TEXT key that Report keeps may appear once. The proto fields cannot
//     tell "0" from "unset", so a repeated key has no single meaning (Envoy
//     rejects it too).
//   - Every error wraps ErrFormat, ErrSyntax or ErrValue and names the
//     problem; a TEXT error also names the element (counted from 1) and
//     its byte offset in the header value.
//   - Parsing a TEXT report does not allocate (a JSON or BIN report does:
//     it is decoded into the proto first). A gfe can parse the header of
//     every response it proxies.
//
// Format writes a Report in TEXT form such that Parse reads it back
// unchanged.
//
// # Reading a report
//
// Report.Utilization is the one number a balancer weighs: the backend's
// application_utilization when it reports one, else its cpu_utilization,
// the preference of gRPC's weighted round robin (gRFC A58). Utilizations
// are fractions of what the backend can serve; above 1 means demand above
// that: requests queue or are rejected, and the excess is what the gfe
// should move elsewhere. RPSFractional and EPS are requests and errors per
// second; Queue is the backend's named metric "queue", requests waiting
// for it to start them.
package loadreport
