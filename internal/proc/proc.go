// Package proc builds this module's commands and runs them as child
// processes, for the demo, the end-to-end tests and the real benchmark. A
// child is tied to its parent: it is killed if the parent dies
// (PR_SET_PDEATHSIG), so a Ctrl-C on the demo or a failed test leaves nothing
// running.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ModuleRoot returns the directory of this module's go.mod, found with
// `go env GOMOD` from the current directory.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the spillway module (go env GOMOD is empty)")
	}
	return filepath.Dir(mod), nil
}

// Build compiles ./cmd/<name> for every name into dir and returns the binary
// paths by name. With race set, binaries are built with the race detector.
func Build(ctx context.Context, dir string, race bool, names ...string) (map[string]string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if race {
		args = append(args, "-race")
	}
	for _, n := range names {
		args = append(args, "./cmd/"+n)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %v: %w\n%s", names, err, out)
	}
	bins := make(map[string]string, len(names))
	for _, n := range names {
		bins[n] = filepath.Join(dir, n)
	}
	return bins, nil
}

// Proc is a running child process. Its combined output is kept in memory
// (and copied to Tee when set). Safe for concurrent use.
type Proc struct {
	Name string

	cmd  *exec.Cmd
	done chan struct{}

	mu  sync.Mutex
	out bytes.Buffer
	err error // exit error, valid after done is closed
}

// Options for Start.
type Options struct {
	// Tee receives a copy of the child's output, each line prefixed by
	// its name. Nil keeps the output in memory only.
	Tee io.Writer
	// Env is added to the parent's environment.
	Env []string
}

// Start runs bin with args as a child named name.
func Start(name, bin string, opts Options, args ...string) (*Proc, error) {
	p := &Proc{Name: name, done: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), opts.Env...)
	w := io.Writer(&lockedWriter{p: p})
	if opts.Tee != nil {
		w = io.MultiWriter(w, &prefixWriter{prefix: name + " | ", w: opts.Tee})
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.cmd = cmd
	go p.wait()
	return p, nil
}

func (p *Proc) wait() {
	err := p.cmd.Wait()
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	close(p.done)
}

// Pid returns the child's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the child has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err returns the child's exit error (nil for exit status 0). Only valid
// after Done is closed.
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Output returns everything the child has written so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Signal sends sig to the child.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits up to grace for the child to exit, then kills
// it. It returns the exit error (nil on a clean exit 0).
func (p *Proc) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return p.Err()
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.Err()
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM", p.Name, grace)
	}
}

// Kill kills the child at once (as a crash would) and waits for it.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

type lockedWriter struct{ p *Proc }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

// prefixWriter prefixes every line with prefix. Partial lines are held until
// their newline arrives.
type prefixWriter struct {
	mu     sync.Mutex
	prefix string
	w      io.Writer
	buf    []byte
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		if _, err := fmt.Fprintf(w.w, "%s%s\n", w.prefix, w.buf[:i]); err != nil {
			return 0, err
		}
		w.buf = w.buf[i+1:]
	}
}

// WaitHTTP polls url until it answers 200 or ctx ends.
func WaitHTTP(ctx context.Context, url string) error {
	c := &http.Client{Timeout: time.Second}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", url, ctx.Err(), err)
		case <-t.C:
		}
	}
}
