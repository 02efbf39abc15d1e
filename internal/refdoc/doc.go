// Package refdoc writes Spillway's two reference pages from the code they
// describe, so that neither can drift from it:
//
//   - docs/config.md, the operator configuration: every key of the schema
//     (config.Schema) in schema order with its path, type, unit, default,
//     bounds and doc comment, and one example per top-level section. Types
//     and defaults come from the Go types and Load's defaults; the doc
//     comments from config's source; the bounds from the validator itself,
//     which is handed values below and above every range and whose
//     messages are reported (bounds). Units are the one thing written by
//     hand (units), and a test fails when a number has none.
//   - docs/cli.md, the flags of the four binaries a deployment runs (gfe,
//     controlplane, devpki, testbackend), parsed from each binary's --help.
//
// cmd/refdoc writes both (go generate ./docs/); the package's tests fail
// when a committed page differs from what the code gives now.
package refdoc
