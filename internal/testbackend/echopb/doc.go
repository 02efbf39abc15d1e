// Package echopb holds the Go code generated from echo.proto: the Echo test
// service (package spillway.testing.v1) that the gRPC mode of
// internal/testbackend serves next to the standard grpc.health.v1 service.
// Clients call it through NewEchoClient; the server side lives in
// internal/testbackend.
//
// Regenerate with generate.sh in this directory after editing echo.proto.
package echopb
