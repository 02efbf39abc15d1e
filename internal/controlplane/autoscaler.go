package controlplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"golang.org/x/sync/errgroup"

	"github.com/spillway-lb/spillway/internal/autoscale/controller"
	"github.com/spillway-lb/spillway/internal/autoscale/lease"
	"github.com/spillway-lb/spillway/internal/autoscale/provider"
	"github.com/spillway-lb/spillway/internal/gossip"
)

// AutoscaleConfig runs the autoscaler of the instance groups that have an
// autoscaling block (docs/design.md §6; package
// internal/autoscale/controller). It is off unless Provider is set:
// RequestCapacity then refuses, and autoscaled groups keep their file
// instances only.
type AutoscaleConfig struct {
	// Provider is how instances are started and stopped: "process" (local
	// processes from Command, internal/autoscale/provider.Process) or
	// "exec" (Command run per scale event, provider.Exec). "" = off.
	Provider string
	// Command is the process template (process) or the hook (exec); see
	// package provider. Required with a Provider.
	Command []string
	// Ports is the range process instances listen on. Required for
	// process.
	Ports provider.PortRange
	// Host is the host of process instances' addresses. Default
	// 127.0.0.1.
	Host string
	// DrainTimeout bounds a process instance's exit after SIGTERM before
	// it is killed. Default 10s.
	DrainTimeout time.Duration
	// ExecTimeout bounds one run of the exec hook. Default 5m.
	ExecTimeout time.Duration
	// Tick is how often the rules run; DrainDelay how long an instance
	// is out of the snapshot before it is stopped (controller.Config).
	// Defaults 1s and 5s.
	Tick, DrainDelay time.Duration
	// LeaseTTL is how long a group's lease outlives its holder's last
	// renewal, and how long a starting replica waits before it takes any
	// (lease.Config.TTL). Default 10s.
	LeaseTTL time.Duration
}

func (c AutoscaleConfig) validate(bad func(string, ...any)) {
	switch c.Provider {
	case "":
		return
	case "process":
		if c.Ports.First < 1 || c.Ports.Last > 65535 || c.Ports.First > c.Ports.Last {
			bad("autoscale_ports: must be FIRST-LAST within 1-65535, got %d-%d", c.Ports.First, c.Ports.Last)
		}
	case "exec":
	default:
		bad("autoscale_provider: must be process or exec, got %q", c.Provider)
	}
	if len(c.Command) == 0 {
		bad("autoscale_command: required with autoscale_provider %q", c.Provider)
	}
	for name, d := range map[string]time.Duration{"autoscale_drain_timeout": c.DrainTimeout, "autoscale_exec_timeout": c.ExecTimeout,
		"autoscale_tick": c.Tick, "autoscale_drain_delay": c.DrainDelay, "autoscale_lease_ttl": c.LeaseTTL} {
		if d < 0 {
			bad("%s: must be >= 0, got %v", name, d)
		}
	}
}

// autoscaler is the daemon's autoscaling component: the lease elector and
// the controller, over one provider.
type autoscaler struct {
	elector *lease.Elector
	ctrl    *controller.Controller
	// closeProvider stops what the provider still runs (Process.Close).
	closeProvider func(context.Context) error
}

// newAutoscaler builds the autoscaler of a replica named self that
// publishes through pub.
func newAutoscaler(cfg AutoscaleConfig, self string, replicas map[string]bool, pub *statePublisher, opts Options, reg prometheus.Registerer) (*autoscaler, error) {
	log := opts.Logger.With().Str("component", "autoscaler").Logger()
	a := &autoscaler{closeProvider: func(context.Context) error { return nil }}
	var prov provider.Provider
	switch cfg.Provider {
	case "process":
		p, err := provider.NewProcess(provider.ProcessConfig{Command: cfg.Command, Host: cfg.Host, Ports: cfg.Ports, DrainTimeout: cfg.DrainTimeout},
			provider.ProcessOptions{Logger: log, OnExit: func(e provider.Exit) { a.ctrl.Gone(e.Instance) }})
		if err != nil {
			return nil, fmt.Errorf("autoscaler: %w", err)
		}
		prov, a.closeProvider = p, p.Close
	case "exec":
		p, err := provider.NewExec(provider.ExecConfig{Command: cfg.Command, Timeout: cfg.ExecTimeout}, log)
		if err != nil {
			return nil, fmt.Errorf("autoscaler: %w", err)
		}
		prov = p
	default:
		return nil, fmt.Errorf("autoscaler: unknown provider %q", cfg.Provider)
	}
	medium := &lease.GossipMedium{Node: pub, Self: self, Replicas: replicas, SetLeases: pub.SetLeases}
	if len(replicas) == 0 {
		medium.Replicas = map[string]bool{} // as the health manager: only self counts
	}
	var err error
	a.elector, err = lease.New(lease.Config{Self: self, TTL: cfg.LeaseTTL}, medium, lease.Options{Clock: opts.Clock, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("autoscaler: %w", err)
	}
	a.ctrl, err = controller.New(controller.Config{Tick: cfg.Tick, DrainDelay: cfg.DrainDelay}, controller.Options{
		Clock:    opts.Clock,
		Logger:   opts.Logger,
		Provider: prov,
		Leases:   a.elector,
		Load:     func(group string) controller.Load { return gfeLoad(pub.Snapshot(), group) },
		CPU:      processCPU,
		Publish:  pub.SetAutoscaled,
		Metrics:  controller.NewMetrics(reg),
	})
	if err != nil {
		return nil, fmt.Errorf("autoscaler: %w", err)
	}
	return a, nil
}

// Run runs the elector and the controller until ctx ends, then stops what
// the provider still runs.
func (a *autoscaler) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.elector.Run(gctx) })
	g.Go(func() error { return a.ctrl.Run(gctx) })
	err := g.Wait()
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(err, a.closeProvider(cctx))
}

// gfeLoad sums the gfes' gossiped load on group; its ACT is the mean of
// the gfes' reported ACT limits weighted by their requests in flight (by 1
// each when none has any), 0 when none reports one.
func gfeLoad(snap *gossip.Snapshot, group string) controller.Load {
	var l controller.Load
	if snap == nil {
		return l
	}
	var actSum, actW, actPlain float64
	var actN int
	for _, s := range snap.States {
		if s.Kind != gossip.KindGFE {
			continue
		}
		if g, ok := s.Load[group]; ok {
			l.InFlight += g.InFlight
			l.Requests += g.Requests
			l.Pending += g.Pending
			l.Spilled += g.Spilled
			if g.ACT > 0 {
				actSum += g.ACT * g.InFlight
				actW += g.InFlight
				actPlain += g.ACT
				actN++
			}
		}
	}
	switch {
	case actW > 0:
		l.ACT = actSum / actW
	case actN > 0:
		l.ACT = actPlain / float64(actN)
	}
	return l
}

// processCPU returns the CPU seconds (user + system) a process instance
// has used, from /proc.
func processCPU(in provider.Instance) (float64, bool) {
	if in.PID <= 0 {
		return 0, false
	}
	p, err := procfs.NewProc(in.PID)
	if err != nil {
		return 0, false
	}
	st, err := p.Stat()
	if err != nil {
		return 0, false
	}
	return st.CPUTime(), true
}
