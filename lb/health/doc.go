// Package health decides whether backends are healthy from active probes
// (docs/design.md §5, STYLE.md §15).
//
// The package has three layers:
//
//   - Config: what an operator sets per health check (protocol, path and
//     expected status for HTTP, gRPC service, interval, timeout, thresholds,
//     jitter), with DefaultConfig and Validate.
//   - The state machine: a pure function next(State, Result, Config) State
//     with consecutive-pass/fail hysteresis, so that one failed or one passed
//     probe never flips a backend that already has a verdict.
//   - Checker: runs probes for a set of Targets on a schedule driven by an
//     injected clock.Clock, feeds each Result through next, and reports status
//     changes through a callback.
//
// This package does no I/O and imports no gRPC: a probe is anything that
// implements Prober. The real HTTP, TCP and gRPC-health probers live in the
// subpackage lb/health/probe, the one place under lb/ allowed to import gRPC
// (it must speak grpc.health.v1 to probe gRPC backends).
//
// # States
//
// A target is Unknown, Healthy or Unhealthy. Only Healthy takes traffic.
//
//   - Unknown is the default start (Config.InitialStatus): no verdict yet.
//     The first passed probe makes it Healthy at once, so a new backend takes
//     traffic as soon as it answers (Envoy does the same: at startup one pass
//     is enough). UnhealthyThreshold consecutive failures make it Unhealthy.
//     A target never returns to Unknown.
//   - Healthy becomes Unhealthy after UnhealthyThreshold consecutive failed
//     probes.
//   - Unhealthy becomes Healthy after HealthyThreshold consecutive passed
//     probes.
//
// An operator who wants a new backend to earn HealthyThreshold passes before
// it takes traffic sets InitialStatus to "unhealthy"; one who wants new
// backends to take traffic before their first probe sets "healthy".
//
// Health results reach the data plane only through the next snapshot the
// control plane builds from the Checker's changes (STYLE.md §4, §15).
package health
