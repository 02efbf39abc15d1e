package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// Exec runs cfg in a process of its own — bin is the loadgen command
// (cmd/loadgen), run with args; or a wrapper such as "ip" with args
// "netns", "exec", ns and the command, which runs it elsewhere — and
// returns its Result, as Run would. When ctx ends the process is
// interrupted: it stops starting requests, lets the outstanding ones
// finish, and still reports.
//
// A generator in a process of its own keeps its own CPU budget: the tests
// that drive real deployments run under the race detector, whose cost per
// request would otherwise make the generator, not the system under test,
// the bottleneck.
func Exec(ctx context.Context, bin string, cfg Config, args ...string) (*Result, error) {
	in, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = bytes.NewReader(in)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = cfg.timeout() + 30*time.Second // the drain, and then some
	if err := cmd.Run(); err != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("loadgen %s: %w\n%s", bin, err, stderr.Bytes())
	}
	var res Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("loadgen %s: reading its result: %w\n%s", bin, err, stderr.Bytes())
	}
	return &res, nil
}

// Main is the loadgen command: it reads a Config as JSON on stdin, runs it
// until its Duration has passed or the process is interrupted, and writes
// the Result as JSON on stdout.
func Main(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	var cfg Config
	if err := json.NewDecoder(stdin).Decode(&cfg); err != nil {
		return fmt.Errorf("loadgen: reading the config on stdin: %w", err)
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}
