//go:build linux

package probe

import (
	"context"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/spillway-lb/spillway/lb/health"
)

// fullBacklogListener returns the address of a real loopback listener whose
// accept queue is full, so the kernel drops further SYNs and a connect to it
// hangs until the caller gives up: a TCP server that hangs longer than any
// probe timeout. The listener is made with listen(2) backlog 0 (one queued
// connection), filled with one connection, and never accepted from.
func fullBacklogListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatalf("listen: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	filler, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("filling the accept queue: %v", err)
	}
	t.Cleanup(func() { filler.Close() })
	return addr
}

func TestTCPTimeout(t *testing.T) {
	addr := fullBacklogListener(t)
	ctx, cancel := context.WithTimeout(testCtx(t), shortTimeout)
	defer cancel()
	r := NewTCP(Options{}).Probe(ctx, health.Target{Addr: addr})
	checkResult(t, "listener that never completes a handshake", r, context.DeadlineExceeded)
}
