package gfetest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
)

// TCPServer is a tcp listener's Serve running on a loopback port under a
// fake clock.
type TCPServer struct {
	Clock  *clock.Fake
	Ln     net.Listener // the tcp listener
	Addr   string       // its address
	Cancel context.CancelFunc
	// Done receives Serve's result; a test that takes it puts it back for
	// the cleanup.
	Done  chan error
	drain time.Duration
}

// ServeTCP runs serve (a tcp proxy's Serve of listener l) on a new loopback
// socket under clk, whose drain lasts drain. The test's cleanup stops it.
// It returns once the control-state watcher's ticker is armed, before any
// test step advances the clock.
func ServeTCP(t *testing.T, clk *clock.Fake, drain time.Duration, l *config.Listener, serve func(context.Context, net.Listener, *config.Listener) error) *TCPServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &TCPServer{Clock: clk, Ln: ln, Addr: ln.Addr().String(), Cancel: cancel, Done: make(chan error, 1), drain: drain}
	go func() { h.Done <- serve(ctx, ln, l) }()
	t.Cleanup(func() {
		select {
		case <-h.Done: // the test stopped it
		default:
			h.Stop(t)
		}
	})
	h.BlockUntil(t, 1)
	return h
}

// BlockUntil waits until n timers or tickers wait on the clock.
func (h *TCPServer) BlockUntil(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), TCPTestTimeout)
	defer cancel()
	if err := h.Clock.BlockUntil(ctx, n); err != nil {
		t.Fatalf("waiting for %d timers: %v (have %d)", n, err, h.Clock.Waiters())
	}
}

// Stop cancels Serve, runs its drain out and returns its result.
func (h *TCPServer) Stop(t *testing.T) error {
	t.Helper()
	h.Cancel()
	ctx, cancel := context.WithTimeout(context.Background(), TCPTestTimeout)
	defer cancel()
	// Either every connection ends and Serve returns at once, or the
	// drain timer gets armed next to the watcher's ticker.
	armed := make(chan error, 1)
	go func() { armed <- h.Clock.BlockUntil(ctx, 2) }()
	select {
	case err := <-h.Done:
		h.Done <- err // for the cleanup
		return err
	case err := <-armed:
		if err != nil {
			t.Fatalf("Serve neither returned nor armed its drain timer: %v", err)
		}
	}
	h.Clock.Advance(h.drain)
	select {
	case err := <-h.Done:
		h.Done <- err
		return err
	case <-ctx.Done():
		t.Fatal("Serve did not return")
		return nil
	}
}

// Open dials n connections and counts them by backend.
func (h *TCPServer) Open(t *testing.T, n int) ([]*TCPClient, map[string]int) {
	t.Helper()
	cs := make([]*TCPClient, n)
	by := map[string]int{}
	for i := range cs {
		cs[i] = DialTCP(t, h.Addr)
		by[cs[i].Backend]++
	}
	return cs, by
}
