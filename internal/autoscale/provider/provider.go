package provider

import (
	"context"
	"errors"
)

// Group is the instance group a Provider starts instances for, and where
// it lives: the names of the operator configuration (config.Group,
// config.Zone, config.Region).
type Group struct {
	Name, Region, Zone string
}

// Instance is one instance a Provider started.
type Instance struct {
	// Group the instance belongs to.
	Group Group
	// Address is where the instance serves, host:port: what the
	// controller adds to the group in the snapshot, and what the health
	// checkers probe.
	Address string
	// Name is the provider's name of the instance: the process
	// provider's is "<group>-<index>" (the .Name of its template); the
	// exec provider's is the address.
	Name string
	// PID is the process id of a process provider's instance (the leader
	// of its process group); 0 for the exec provider.
	PID int
}

// Provider starts and stops the instances of groups: the autoscaler's
// actuator. Implementations are safe for concurrent use.
//
// A Provider only starts and stops: an instance it returns from Start may
// still be starting, and it is the control plane's health checks that
// tell when it may get traffic (the controller adds the instance to its
// group in the snapshot; the gfes send it nothing until its check
// passes). Likewise the controller takes an instance out of the snapshot,
// and lets the gfes drain it, before it calls Stop; Stop then drains what
// is left the provider's way (SIGTERM and a drain timeout for processes;
// whatever the operator's command does for exec).
type Provider interface {
	// Start starts n > 0 instances of g and returns them. It returns once
	// they are launched, not once they are healthy. When it cannot start
	// all n it returns those it did start (possibly none) and an error
	// saying why: the caller owns every instance returned, error or not.
	// ctx bounds the start, not the instances' lives.
	Start(ctx context.Context, g Group, n int) ([]Instance, error)
	// Stop stops inst and returns once it is gone: a nil error, or one
	// that wraps ErrKilled, means it no longer runs. Any other error means
	// it may still run. ErrUnknown means the provider does not know inst
	// (never started by it, or already gone).
	Stop(ctx context.Context, inst Instance) error
}

// Errors of Stop.
var (
	// ErrKilled: the instance did not finish draining within the drain
	// timeout (or before Stop's ctx ended) and was killed. It is gone.
	ErrKilled = errors.New("provider: instance killed after the drain timeout")
	// ErrUnknown: the provider runs no such instance.
	ErrUnknown = errors.New("provider: unknown instance")
)
