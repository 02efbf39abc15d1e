package gfe

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/snapshot"
)

// TestClientWaitsForFirstSnapshot: a client that connects to a gfe before
// its first snapshot waits in the listen backlog, unanswered, and is
// served by a backend once the snapshot arrives — never answered 503 "no
// configuration yet" (a gfe restarted behind a DNS name takes clients at
// once).
func TestClientWaitsForFirstSnapshot(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	c := edgeConfig(t, []string{b.addr()}, "")

	cfg := DefaultConfig()
	cfg.Node, cfg.Site = "gfe-nyc", "nyc"
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	g := &fakeGossip{node: cfg.Node, states: map[string]gossip.NodeState{}}
	e, err := New(cfg, Options{Gossip: g, Clock: clock.NewFake(time.Unix(1_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	re := &runningEdge{Daemon: e, cancel: cancel, done: make(chan error, 1)}
	go func() { re.done <- e.Run(ctx) }()
	t.Cleanup(func() { re.stop(t) })
	waitUntil(t, "the gfe to listen", func() bool { return e.ListenAddr() != nil })

	conn, err := net.DialTimeout("tcp", e.ListenAddr().String(), lnTestTimeout) // completes in the kernel's backlog
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// Without the gate, the 503 comes within a millisecond; a busy machine
	// can only make this wait pass more easily, never fail it.
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 1)
	if n, err := conn.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("before any snapshot the gfe answered (%d bytes, %v); want no answer yet", n, err)
	}
	if e.Table() != nil {
		t.Fatal("table before the first snapshot")
	}

	if err := e.ApplySnapshot(snapshot.FromConfig("v1", c)); err != nil {
		t.Fatal(err)
	}
	e.Wake()
	conn.SetReadDeadline(time.Now().Add(lnTestTimeout))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("after the snapshot: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Backend") != "b1" {
		t.Fatalf("after the snapshot: %d from %q; want 200 from b1", resp.StatusCode, resp.Header.Get("X-Backend"))
	}
}
