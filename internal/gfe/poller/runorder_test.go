//go:build linux && !race

// The race detector randomizes the order of Go's run queue on purpose,
// so the order this test asserts holds only without it.

package poller

import (
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestRunOrder: on one P, readers blocked in Read run in the order their
// sockets turned readable, not newest first as with Go's poller alone.
func TestRunOrder(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	g := testGroup(t, 1)
	const n = 8
	var (
		mu  sync.Mutex
		ran []int
		wg  sync.WaitGroup
	)
	peers := make([]net.Conn, n)
	started := make(chan struct{}, n)
	for i := range n {
		a, b := pair(t)
		peers[i] = a
		c := g.Wrap(b)
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			var buf [8]byte
			if _, err := c.Read(buf[:]); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			ran = append(ran, i)
			mu.Unlock()
		}()
	}
	for range n {
		<-started
	}
	// Every reader is parked in its wait once its connection's slot shows
	// it; only then do the writes begin.
	for _, p := range g.ps {
		waitFor(t, func() bool { return waiting(p) == n })
	}
	order := []int{5, 1, 7, 0, 3, 6, 2, 4}
	for _, i := range order { // no yield between writes: nothing else runs meanwhile
		peers[i].Write([]byte{1})
	}
	wg.Wait()
	for k := range order {
		if k >= len(ran) || ran[k] != order[k] {
			t.Fatalf("readers ran in the order %v, want %v", ran, order)
		}
	}
}

// TestSampleTurns: a Group turns its Pollers on while goroutines queue for
// the only P, and off once they no longer do.
func TestSampleTurns(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	g, err := NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.on.Load() {
		t.Fatal("a new Group is on")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 { // each runs 200 µs at a time, the others queued behind it
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for end := time.Now().Add(200 * time.Microsecond); time.Now().Before(end); {
				}
				runtime.Gosched()
			}
		}()
	}
	waitFor(t, g.on.Load)
	close(stop)
	wg.Wait()
	// Light work, each goroutine running as soon as it is runnable.
	quiet := make(chan struct{})
	defer close(quiet)
	go func() {
		for {
			select {
			case <-quiet:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	waitFor(t, func() bool { return !g.on.Load() })
}
