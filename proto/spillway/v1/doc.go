// Package spillwayv1 is the generated Go code for the Spillway control-plane
// API, proto/spillway/v1/controlplane.proto (package spillway.v1): the
// ControlPlane gRPC service and its messages. Read the .proto for the
// protocol; every message and field is documented there.
//
// Do not edit the *.pb.go files: change the .proto and run proto/generate.sh,
// which regenerates them with pinned protoc-gen-go and protoc-gen-go-grpc
// versions, then commit both.
//
// Only the gRPC edges (cmd/controlplane, cmd/gfe and their translation
// functions) import this package; lb/* never does (STYLE.md §2).
package spillwayv1
