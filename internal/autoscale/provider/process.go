package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/lb/clock"
)

// ProcessConfig configures a Process provider.
type ProcessConfig struct {
	// Command is the argv of one instance, program first, each element a
	// text/template over Fields, for example
	//
	//	["/usr/local/bin/testbackend",
	//	 "--instance", "name={{.Name}},addr={{.Address}},region={{.Region}},zone={{.Zone}}",
	//	 "--startup-delay", "2s"]
	//
	// It is run directly, without a shell (use "sh", "-c", "..." for one).
	// Required; every element must parse and execute over Fields.
	Command []string
	// Host is the host of every instance's address and the one the port
	// check binds. Default "127.0.0.1".
	Host string
	// Ports is the range instance ports are taken from (see Start).
	// Required.
	Ports PortRange
	// DrainTimeout is how long Stop waits, after SIGTERM, for an instance
	// to exit before it kills it. Default 10s. It should exceed the
	// instance's own graceful shutdown bound (testbackend's
	// --shutdown-timeout, 5s by default).
	DrainTimeout time.Duration
	// Dir is the working directory of the instances; "" is the caller's.
	Dir string
	// Env is added to the caller's environment for every instance, as
	// KEY=VALUE.
	Env []string
}

// PortRange is the ports First..Last, both included.
type PortRange struct{ First, Last int }

// Fields are what a ProcessConfig.Command template sees for one instance.
type Fields struct {
	// Group, Region and Zone are the instance's Group.
	Group, Region, Zone string
	// Index numbers the instances of a group, from 1, in the order the
	// provider started them; Name is "<Group>-<Index>", unique among the
	// instances this provider has started.
	Index int
	Name  string
	// Host, Port and Address ("Host:Port") are where the instance must
	// listen.
	Host    string
	Port    int
	Address string
}

// ProcessOptions holds the dependencies of a Process provider.
type ProcessOptions struct {
	// OnExit, if set, is called once for every instance that exits by
	// itself (not through Stop), after it has been reaped and its port
	// released. It is called from the instance's reaper goroutine, one
	// call per instance, possibly concurrently: it must not block.
	OnExit func(Exit)
	// Output receives the instances' stdout and stderr, each line
	// prefixed with "[NAME] ". Nil discards them (Exit keeps the tail).
	Output io.Writer
	// Clock times the drain timeout. Nil means the real clock.
	Clock clock.Clock
	// Logger receives one line per start, stop and exit.
	Logger zerolog.Logger
}

// Exit reports an instance that exited by itself.
type Exit struct {
	Instance Instance
	// Err is the exit status (an *exec.ExitError), nil for status 0.
	Err error
	// Output is the last outputTail bytes of its stdout and stderr.
	Output string
}

// outputTail is how much of an instance's output Exit keeps.
const outputTail = 4096

// Process is the process provider: each instance is a local process
// started from a command template, in a process group of its own (see the
// package doc). It is safe for concurrent use.
type Process struct {
	// Immutable after NewProcess.
	cfg    ProcessConfig
	argv   []*template.Template
	opts   ProcessOptions
	clock  clock.Clock
	logger zerolog.Logger

	// Guarded by mu.
	mu       sync.Mutex
	children map[string]*child // by address
	ports    map[int]bool      // ports held by children
	next     map[string]int    // next Index per group
}

// child is one running instance.
type child struct {
	inst Instance
	cmd  *exec.Cmd
	out  *tailWriter
	done chan struct{} // closed once reaped
	// stopping is set by Stop (under Process.mu) before it signals.
	stopping bool
}

// NewProcess returns a process provider, having checked cfg (errors name
// the field) and every template.
func NewProcess(cfg ProcessConfig, opts ProcessOptions) (*Process, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	var errs []error
	if len(cfg.Command) == 0 {
		errs = append(errs, errors.New("command: must not be empty"))
	}
	if r := cfg.Ports; r.First < 1 || r.Last > 65535 || r.First > r.Last {
		errs = append(errs, fmt.Errorf("ports: %d..%d, want 1 <= first <= last <= 65535", r.First, r.Last))
	}
	if cfg.DrainTimeout < 0 {
		errs = append(errs, fmt.Errorf("drain_timeout: %v is negative", cfg.DrainTimeout))
	}
	p := &Process{
		cfg: cfg, opts: opts, clock: clock.OrReal(opts.Clock),
		logger:   opts.Logger.With().Str("component", "provider").Str("provider", "process").Logger(),
		children: map[string]*child{}, ports: map[int]bool{}, next: map[string]int{},
	}
	sample := Fields{Group: "g", Region: "r", Zone: "z", Index: 1, Name: "g-1", Host: cfg.Host, Port: cfg.Ports.First,
		Address: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Ports.First))}
	for i, arg := range cfg.Command {
		t, err := template.New(fmt.Sprintf("command[%d]", i)).Option("missingkey=error").Parse(arg)
		if err == nil {
			err = t.Execute(io.Discard, sample)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("command[%d]: %w", i, err))
			continue
		}
		p.argv = append(p.argv, t)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("provider: process: %w", err)
	}
	return p, nil
}

var _ Provider = (*Process)(nil)

// Start starts n instances of g, one process each. Each gets the lowest
// port of ProcessConfig.Ports that none of this provider's instances
// holds and that can be bound on Host now (the check binds and closes it,
// so another program may still take it before the instance binds it). It
// returns once every process has been started (exec'd), whether or not
// it is healthy yet. When no port is left or a process cannot be started
// it returns the instances started so far and the error.
func (p *Process) Start(ctx context.Context, g Group, n int) ([]Instance, error) {
	var started []Instance
	for range n {
		if err := ctx.Err(); err != nil {
			return started, fmt.Errorf("provider: process: start %s: %w", g.Name, err)
		}
		inst, err := p.startOne(g)
		if err != nil {
			return started, err
		}
		started = append(started, inst)
	}
	return started, nil
}

// startOne starts one instance of g.
func (p *Process) startOne(g Group) (Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	port, err := p.freePortLocked()
	if err != nil {
		return Instance{}, fmt.Errorf("provider: process: start %s: %w", g.Name, err)
	}
	p.next[g.Name]++
	f := Fields{Group: g.Name, Region: g.Region, Zone: g.Zone, Index: p.next[g.Name], Host: p.cfg.Host, Port: port,
		Address: net.JoinHostPort(p.cfg.Host, strconv.Itoa(port))}
	f.Name = fmt.Sprintf("%s-%d", g.Name, f.Index)
	argv := make([]string, len(p.argv))
	for i, t := range p.argv {
		var b strings.Builder
		if err := t.Execute(&b, f); err != nil {
			return Instance{}, fmt.Errorf("provider: process: start %s: command[%d]: %w", f.Name, i, err)
		}
		argv[i] = b.String()
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = p.cfg.Dir
	cmd.Env = append(os.Environ(), p.cfg.Env...)
	// Its own process group, so that Stop signals everything it started;
	// killed if this process dies, so that nothing outlives the provider.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out := &tailWriter{prefix: "[" + f.Name + "] ", w: p.opts.Output, atStart: true}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return Instance{}, fmt.Errorf("provider: process: start %s: %w", f.Name, err)
	}
	c := &child{
		inst: Instance{Group: g, Address: f.Address, Name: f.Name, PID: cmd.Process.Pid},
		cmd:  cmd, out: out, done: make(chan struct{}),
	}
	p.children[f.Address] = c
	p.ports[port] = true
	p.logger.Info().Str("instance", f.Name).Str("address", f.Address).Int("pid", c.inst.PID).Msg("started")
	go p.reap(c, port)
	return c.inst, nil
}

// freePortLocked returns the lowest port of the range that no child holds
// and that can be bound now. Caller must hold p.mu.
func (p *Process) freePortLocked() (int, error) {
	for port := p.cfg.Ports.First; port <= p.cfg.Ports.Last; port++ {
		if p.ports[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(p.cfg.Host, strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = ln.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port in %d..%d on %s", p.cfg.Ports.First, p.cfg.Ports.Last, p.cfg.Host)
}

// reap waits for c's process, kills what is left of its process group,
// forgets it and releases its port, then reports the exit unless Stop
// asked for it.
func (p *Process) reap(c *child, port int) {
	err := c.cmd.Wait()
	_ = syscall.Kill(-c.inst.PID, syscall.SIGKILL) // stragglers of its group; ESRCH if none
	p.mu.Lock()
	delete(p.children, c.inst.Address)
	delete(p.ports, port)
	stopping := c.stopping
	p.mu.Unlock()
	close(c.done)
	if stopping {
		return
	}
	p.logger.Warn().Str("instance", c.inst.Name).Str("address", c.inst.Address).AnErr("exit", err).Msg("exited by itself")
	if p.opts.OnExit != nil {
		p.opts.OnExit(Exit{Instance: c.inst, Err: err, Output: c.out.tail()})
	}
}

// Stop drains inst: SIGTERM to its process group, then, if it has not
// exited within DrainTimeout or before ctx ends, SIGKILL to the group; it
// returns once the process is reaped and its group killed. It returns nil
// when the instance exited after SIGTERM, an error wrapping ErrKilled when
// it had to be killed, and ErrUnknown when no such instance runs (for
// example one that exited by itself: OnExit has then been called).
func (p *Process) Stop(ctx context.Context, inst Instance) error {
	p.mu.Lock()
	c := p.children[inst.Address]
	if c == nil || (inst.PID != 0 && c.inst.PID != inst.PID) {
		p.mu.Unlock()
		return fmt.Errorf("provider: process: stop %s (%s): %w", inst.Name, inst.Address, ErrUnknown)
	}
	c.stopping = true
	p.mu.Unlock()

	pid := c.inst.PID
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	t := p.clock.NewTimer(p.cfg.DrainTimeout)
	defer t.Stop()
	var why string
	select {
	case <-c.done:
		p.logger.Info().Str("instance", c.inst.Name).Str("address", c.inst.Address).Msg("stopped")
		return nil
	case <-t.C():
		why = fmt.Sprintf("not exited %v after SIGTERM", p.cfg.DrainTimeout)
	case <-ctx.Done():
		why = ctx.Err().Error()
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-c.done
	p.logger.Warn().Str("instance", c.inst.Name).Str("address", c.inst.Address).Str("why", why).Msg("killed")
	return fmt.Errorf("provider: process: stop %s (%s): %s: %w", c.inst.Name, c.inst.Address, why, ErrKilled)
}

// Instances returns the instances running now, by name.
func (p *Process) Instances() []Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Instance, 0, len(p.children))
	for _, c := range p.children {
		out = append(out, c.inst)
	}
	slices.SortFunc(out, func(a, b Instance) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Close stops every running instance, concurrently (see Stop), and
// returns once all are gone. Errors other than ErrKilled are joined.
func (p *Process) Close(ctx context.Context) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, inst := range p.Instances() {
		wg.Go(func() {
			if err := p.Stop(ctx, inst); err != nil && !errors.Is(err, ErrKilled) && !errors.Is(err, ErrUnknown) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// tailWriter keeps the last outputTail bytes written to it and copies them,
// each line prefixed, to w if set. os/exec calls Write from one goroutine
// at a time when Stdout and Stderr are the same writer; tail is read after
// the process is reaped, and mu orders both.
type tailWriter struct {
	prefix  string
	w       io.Writer
	mu      sync.Mutex
	buf     []byte
	atStart bool
}

func (t *tailWriter) Write(b []byte) (int, error) {
	n := len(b)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > outputTail {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-outputTail:]...)
	}
	if t.w != nil {
		var out []byte
		for len(b) > 0 {
			if t.atStart {
				out = append(out, t.prefix...)
			}
			line, rest, nl := bytes.Cut(b, []byte{'\n'})
			out = append(out, line...)
			if nl {
				out = append(out, '\n')
			}
			t.atStart = nl
			b = rest
		}
		_, _ = t.w.Write(out) // the instance's output must not fail it
	}
	return n, nil
}

func (t *tailWriter) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
