// Package provider holds the autoscaler's actuators (docs/design.md
// §6): a Provider starts instances of an instance group and stops them.
// The autoscaler's controller decides how many instances a group needs
// (the rules of lb/autoscale); a Provider makes it so. Two implementations:
//
//	Process  local backend processes from a command template: the provider
//	         that lets the whole loop run for real on one machine (tests,
//	         demo, benchmarks).
//	Exec     an operator's command per scale event, for real platforms
//	         (a cloud API, a container scheduler).
//
// # What a Provider guarantees, and what it leaves to the controller
//
// Start returns once the instances are launched; it does not wait for them
// to be healthy. The controller adds them to their group in the snapshot,
// where the control plane's health checks (the Maglev owner's, see
// internal/controlplane) find them failing until they are ready, so the
// gfes send them nothing before their check passes. To stop an instance the
// controller first takes it out of the snapshot and lets the gfes drain it,
// then calls Stop, which drains what is left the provider's way and returns
// once the instance is gone. Every instance Start returns belongs to the
// caller, even when Start also returns an error (a partial scale-up).
//
// # Process
//
// Each instance is one process, started from ProcessConfig.Command, whose
// elements are text/template templates over Fields (.Group, .Region,
// .Zone, .Index, .Name, .Host, .Port, .Address), for example the test
// backend with a 20s cold start:
//
//	testbackend --instance name={{.Name}},addr={{.Address}},region={{.Region}},zone={{.Zone}} --startup-delay 20s
//
// Its port is the lowest of ProcessConfig.Ports that none of the provider's
// instances holds and that can be bound now. Each process leads a process
// group of its own and is killed if the provider's process dies
// (PR_SET_PDEATHSIG), so nothing outlives the provider. (The kernel ties
// that signal to the thread that started the child; Go keeps its threads
// unless a goroutine locked to one with runtime.LockOSThread exits without
// unlocking it, so never call Start from such a goroutine.) Stop drains: SIGTERM
// to the group, up to DrainTimeout for the process to exit, then SIGKILL;
// it returns once the process is reaped (ErrKilled if it had to be
// killed). A process that exits by itself is reaped, its port released,
// and reported to ProcessOptions.OnExit with its exit status and the tail
// of its output. When a process has been reaped, whatever is left of its
// group is killed: an instance never leaves children behind.
//
// # Exec
//
// Exec runs COMMAND scale-up GROUP N, which prints the new instances'
// host:port one per line (ParseAddresses, strict: an error names the
// line), and COMMAND scale-down GROUP ADDRESS, each with SPILLWAY_*
// environment variables and a timeout, in a process group that is killed
// when the timeout passes. See Exec.
package provider
