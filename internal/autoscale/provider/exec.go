package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// ExecConfig configures an Exec provider.
type ExecConfig struct {
	// Command is the program and its first arguments; each scale event
	// appends its own (see Exec). Required.
	Command []string
	// Timeout bounds one run of the command; when it passes, the command's
	// process group is killed and the event fails. Default 5m: a platform
	// may take minutes to start a machine.
	Timeout time.Duration
	// Dir is the command's working directory; "" is the caller's.
	Dir string
	// Env is added to the caller's environment and the SPILLWAY_*
	// variables of the event, as KEY=VALUE.
	Env []string
}

// maxStdout bounds what Exec reads of a scale-up's stdout: far more than
// any list of addresses, so that a runaway command cannot fill memory.
const maxStdout = 1 << 20

// Exec is the exec hook provider, for real platforms: it runs an
// operator's command per scale event, with a timeout:
//
//	COMMAND... scale-up GROUP N
//	  env SPILLWAY_EVENT=scale-up SPILLWAY_GROUP SPILLWAY_REGION SPILLWAY_ZONE SPILLWAY_COUNT=N
//	  must start N instances and print their host:port, one per line
//	  (see ParseAddresses), and exit 0. It may print fewer when it could
//	  start fewer; Start then returns those and an error.
//	COMMAND... scale-down GROUP ADDRESS
//	  env SPILLWAY_EVENT=scale-down SPILLWAY_GROUP SPILLWAY_REGION SPILLWAY_ZONE SPILLWAY_ADDRESS
//	  must drain and stop the instance at ADDRESS and exit 0 once it is gone.
//
// The command runs without a shell, in a process group of its own, with
// stdin empty; its stderr is logged (the last outputTail bytes) when it
// fails. A run fails when it exits non-zero, times out or prints
// something ParseAddresses rejects; the error says which, and for a
// scale-up that the instances it may have started are unknown to
// Spillway. Exec keeps no state: it is safe for concurrent use, and runs
// of different events may overlap.
type Exec struct {
	cfg    ExecConfig
	logger zerolog.Logger
}

var _ Provider = (*Exec)(nil)

// NewExec returns an exec hook provider, having checked cfg.
func NewExec(cfg ExecConfig, logger zerolog.Logger) (*Exec, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	var errs []error
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		errs = append(errs, errors.New("command: must name a program"))
	}
	if cfg.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout: %v is negative", cfg.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("provider: exec: %w", err)
	}
	return &Exec{cfg: cfg, logger: logger.With().Str("component", "provider").Str("provider", "exec").Logger()}, nil
}

// Start runs "scale-up GROUP N" and returns the instances it printed.
func (e *Exec) Start(ctx context.Context, g Group, n int) ([]Instance, error) {
	event := fmt.Sprintf("scale-up %s %d", g.Name, n)
	stdout, err := e.run(ctx, g, []string{"scale-up", g.Name, strconv.Itoa(n)}, "SPILLWAY_COUNT="+strconv.Itoa(n))
	if err != nil {
		return nil, fmt.Errorf("provider: exec: %s: %w (instances it may have started are unknown to Spillway)", event, err)
	}
	addrs, err := ParseAddresses(stdout, n)
	if err != nil {
		return nil, fmt.Errorf("provider: exec: %s: %w (instances it may have started are unknown to Spillway)", event, err)
	}
	insts := make([]Instance, len(addrs))
	for i, a := range addrs {
		insts[i] = Instance{Group: g, Address: a, Name: a}
	}
	e.logger.Info().Str("group", g.Name).Int("asked", n).Strs("addresses", addrs).Msg("scale-up done")
	if len(addrs) < n {
		return insts, fmt.Errorf("provider: exec: %s: started %d of %d", event, len(addrs), n)
	}
	return insts, nil
}

// Stop runs "scale-down GROUP ADDRESS". A nil error means the command
// exited 0: the instance is gone.
func (e *Exec) Stop(ctx context.Context, inst Instance) error {
	g := inst.Group
	if _, err := e.run(ctx, g, []string{"scale-down", g.Name, inst.Address}, "SPILLWAY_ADDRESS="+inst.Address); err != nil {
		return fmt.Errorf("provider: exec: scale-down %s %s: %w", g.Name, inst.Address, err)
	}
	e.logger.Info().Str("group", g.Name).Str("address", inst.Address).Msg("scale-down done")
	return nil
}

// run runs the command with args appended and the event's environment,
// and returns its stdout.
func (e *Exec) run(ctx context.Context, g Group, args []string, extraEnv string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	argv := append(append([]string(nil), e.cfg.Command...), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = e.cfg.Dir
	cmd.Env = append(os.Environ(), e.cfg.Env...)
	cmd.Env = append(cmd.Env, "SPILLWAY_EVENT="+args[0], "SPILLWAY_GROUP="+g.Name,
		"SPILLWAY_REGION="+g.Region, "SPILLWAY_ZONE="+g.Zone, extraEnv)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On timeout kill the whole group (a shell script's children too), and
	// stop waiting for pipes that a straggler might hold open.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	stdout := &limitedBuffer{max: maxStdout}
	stderr := &tailWriter{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && err != nil:
		return nil, fmt.Errorf("timed out after %v: %w%s", e.cfg.Timeout, ctx.Err(), stderrNote(stderr))
	case err != nil:
		return nil, fmt.Errorf("%w%s", err, stderrNote(stderr))
	case stdout.over:
		return nil, fmt.Errorf("stdout longer than %d bytes", maxStdout)
	}
	return stdout.Bytes(), nil
}

// stderrNote returns ": stderr: TAIL" for the tail of a failed command's
// stderr, or "" if it wrote none.
func stderrNote(t *tailWriter) string {
	s := strings.TrimSpace(t.tail())
	if s == "" {
		return ""
	}
	return ": stderr: " + s
}

// limitedBuffer keeps the first max bytes written to it and notes whether
// more came.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	n := len(p) // all of it is taken, kept or not, so that the command is not cut off
	room := b.max - b.Len()
	if len(p) > room {
		b.over = true
		p = p[:max(room, 0)]
	}
	b.Buffer.Write(p)
	return n, nil
}
