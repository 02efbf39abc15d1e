package gfe

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/clock"
)

// TestMaxConnectionAge: a kept-alive client connection is ended once it
// is older than the listener's max_connection_age (±10%), gracefully: the
// request that finds it over age is served, and the next one goes over a
// new connection — HTTP/1.1 by Connection: close, HTTP/2 by GOAWAY.
func TestMaxConnectionAge(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	port := freePort(t)
	c := edgeConfig(t, []string{b.addr()}, fmt.Sprintf("listeners:\n  - {name: web, protocol: http, port: %d, max_connection_age: 1m}\n", port))
	e := startEdge(t, c, time.Second)
	clk := e.clk.(*clock.Fake)
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	waitUntil(t, "the listener", func() bool {
		return rawRequest(t, fmt.Sprintf("127.0.0.1:%d", port), "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") == http.StatusOK
	})

	t.Run("HTTP/1.1", func(t *testing.T) {
		var d dialCounter
		cl := &http.Client{Transport: &http.Transport{DialContext: d.dial}, Timeout: lnTestTimeout}
		for range 3 {
			if code, _, _ := get(t, cl, url); code != http.StatusOK {
				t.Fatalf("GET: %d", code)
			}
		}
		if n := d.dials.Load(); n != 1 {
			t.Fatalf("%d connections for 3 requests within the age; want 1", n)
		}
		clk.Advance(54 * time.Second) // below 0.9 × 1m: no connection is over age yet
		get(t, cl, url)
		if n := d.dials.Load(); n != 1 {
			t.Fatalf("%d connections at 54 s; want 1", n)
		}
		clk.Advance(13 * time.Second) // 67 s: over 1.1 × 1m
		resp, err := cl.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !resp.Close {
			t.Fatalf("request over age: %d, Connection: close %t; want 200 and close", resp.StatusCode, resp.Close)
		}
		get(t, cl, url)
		if n := d.dials.Load(); n != 2 {
			t.Fatalf("%d connections after the age; want 2 (a new one)", n)
		}
	})

	t.Run("HTTP/2", func(t *testing.T) {
		var d dialCounter
		cl := h2cClient(&d)
		if code, proto, _ := get(t, cl, url); code != http.StatusOK || proto != "HTTP/2.0" {
			t.Fatalf("GET: %d %s; want 200 over HTTP/2.0", code, proto)
		}
		clk.Advance(67 * time.Second)
		// The GOAWAY travels beside the answer; a request sent before the
		// client read it may still use the old connection, so poll until a
		// request goes over a new one (never, without the age limit).
		waitUntil(t, "a request over a new connection after the GOAWAY", func() bool {
			if code, _, _ := get(t, cl, url); code != http.StatusOK {
				t.Fatalf("GET after the age: %d", code)
			}
			return d.dials.Load() == 2
		})
	})
	if got := ageCloses(t, e.Daemon); got != 2 {
		t.Errorf("spillway_gfe_connection_age_closes_total{listener=web} = %v; want 2 (one per connection)", got)
	}
}

// ageCloses returns spillway_gfe_connection_age_closes_total{listener="web"}.
func ageCloses(t *testing.T, d *Daemon) float64 {
	t.Helper()
	mfs, err := d.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "spillway_gfe_connection_age_closes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "listener" && l.GetValue() == "web" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
