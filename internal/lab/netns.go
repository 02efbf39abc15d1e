package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNoIP is returned when the ip command (iproute2) is not installed: the
// lab cannot make hosts without it.
var ErrNoIP = errors.New("lab: the ip command (iproute2) is missing: install it (apt-get install -y iproute2); the lab needs it and root")

// RequireIP returns ErrNoIP when the ip command is not on PATH, and an error
// when this process is not root.
func RequireIP() error {
	if _, err := exec.LookPath("ip"); err != nil {
		return ErrNoIP
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("lab: network namespaces need root (running as uid %d)", os.Geteuid())
	}
	return nil
}

// ip runs the ip command with args and returns an error that quotes the
// command line and its output when it fails.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Namespaces returns the names of the network namespaces that start with
// prefix.
func Namespaces(prefix string) ([]string, error) {
	ents, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lab: list namespaces: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// nsPids returns the processes running in namespace ns (ip netns pids).
func nsPids(ctx context.Context, ns string) ([]int, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns pids %s: %w", ns, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// killNamespace kills every process in namespace ns (they are the lab's:
// only the lab starts processes there) and deletes it.
func killNamespace(ctx context.Context, ns string) error {
	pids, err := nsPids(ctx, ns)
	if err != nil {
		return err
	}
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("lab: kill pid %d in %s: %w", p, ns, err)
		}
	}
	return ip(ctx, "netns", "del", ns)
}

// Dialer returns a dial function whose connections are made from inside
// network namespace ns: the socket is created on an OS thread switched into
// ns, and a socket stays in the namespace it was made in. The thread is
// switched back before it is released; a thread that cannot be switched
// back is never released (the runtime ends it with its goroutine).
func Dialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			c, err := dialInNamespace(ctx, ns, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// dialInNamespace is Dialer's work on a goroutine of its own, which it locks
// to its thread.
func dialInNamespace(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("lab: dial %s in %s: %w", addr, ns, err)
	}
	defer orig.Close()
	target, err := os.Open(filepath.Join("/run/netns", ns))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("lab: dial %s in %s: %w", addr, ns, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("lab: dial %s: enter %s: %w", addr, ns, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	if err != nil {
		return nil, fmt.Errorf("lab: dial %s in %s: %w", addr, ns, err)
	}
	return c, nil
}
