package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/topology"
)

// The stray-response deployment: one gfe at 127.91.0.1 serving from a
// local config, whose backends are the test's own misbehaving servers
// (gfetest.StrayBackend) at 127.91.1.1; its clients come from 127.91.2.x.
const strayNet = "127.91"

// localGFE is a gfe started on its own from a local config.
type localGFE struct {
	proc   *proc.Proc
	listen string // the --listen listener's address (fast path)
	slow   string // the "slow" listener's address (fast_path: false)
	admin  string // the admin listener's URL
}

// startLocalGFE starts a gfe at host serving cfg (a config without
// listeners) plus a listener "slow" with fast_path: false, and waits for
// its admin listener; the test's cleanup stops it.
func startLocalGFE(t *testing.T, host, cfg string) *localGFE {
	t.Helper()
	listen, slow, admin := freeTCPPort(t, host), freeTCPPort(t, host), freeTCPPort(t, host)
	cfg += fmt.Sprintf("listeners:\n  - {name: slow, protocol: http, port: %d, fast_path: false}\n", slow)
	path := filepath.Join(t.TempDir(), "gfe.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &localGFE{listen: fmt.Sprintf("%s:%d", host, listen), slow: fmt.Sprintf("%s:%d", host, slow), admin: fmt.Sprintf("http://%s:%d", host, admin)}
	p, err := proc.Start("gfe-local", bins["gfe"], proc.Options{},
		"--site", "nyc", "--node", "gfe-local", "--config", path, "--listen", g.listen,
		"--admin", fmt.Sprintf("%s:%d", host, admin), "--gossip-addr", fmt.Sprintf("%s:%d", host, freeTCPPort(t, host)), "--log-format", "json")
	if err != nil {
		t.Fatal(err)
	}
	g.proc = p
	t.Cleanup(func() {
		p.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("--- gfe log (tail):\n%s", tail(p.Output(), 4000))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := proc.WaitHTTP(ctx, g.admin+"/status"); err != nil {
		t.Fatalf("gfe admin: %v", err)
	}
	return g
}

// rawRequest sends one request with Host host from local address from to
// addr, on a connection of its own that closes after it, and returns the
// answer, its body read.
func rawRequest(t *testing.T, from, addr, method, host, path string) (*http.Response, string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", method, path, host)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s%s via %s: %v", method, host, path, addr, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s%s via %s: reading the body: %v", method, host, path, addr, err)
	}
	return resp, string(body)
}

// TestStrayResponsesNeverCrossClients: behind the real gfe, a backend
// that sends bytes after an answer nobody asked for — a body on HEAD or
// 304, a body longer than its Content-Length, a second response with the
// victim's Set-Cookie — in the answer's segment or a later one, once the
// gfe holds the connection idle, never has them answer another client:
// /victim2, asked from another address, gets its own answer and no
// cookie, on the fast path (where the gfe counts the connection in
// spillway_gfe_backend_unsolicited_total) as on net/http alone. Before the
// fix, the fast path gave the second client the victim's response and
// session cookie.
func TestStrayResponsesNeverCrossClients(t *testing.T) {
	type run struct {
		s       gfetest.Stray
		slow    bool
		b       *gfetest.StrayBackend
		service string
	}
	var runs []*run
	var groups, services, routes strings.Builder
	for _, s := range gfetest.Strays() {
		if s.Extra == "" {
			continue
		}
		for _, slow := range []bool{false, true} {
			r := &run{s: s, slow: slow, b: gfetest.NewStrayBackend(t, strayNet+".1.1", s), service: fmt.Sprintf("s%d", len(runs))}
			runs = append(runs, r)
			fmt.Fprintf(&groups, "          - {name: g%s, instances: [{address: %q}]}\n", r.service, r.b.Addr)
			fmt.Fprintf(&services, "  - {name: %s, backends: [{group: g%s, max_rate_per_instance: 1000}]}\n", r.service, r.service)
			fmt.Fprintf(&routes, "  - {host: %s.test, service: %s, retries: 0}\n", r.service, r.service)
		}
	}
	cfg := "regions:\n  - name: r1\n    zones:\n      - name: z1\n        groups:\n" + groups.String() +
		"services:\n" + services.String() + "routes:\n" + routes.String()
	g := startLocalGFE(t, strayNet+".0.1", cfg)

	victim, other := strayNet+".2.1", strayNet+".2.2"
	for _, r := range runs {
		addr, path := g.listen, "fast"
		if r.slow {
			addr, path = g.slow, "net/http"
		}
		host := r.service + ".test"
		err := topology.WaitFor(context.Background(), 20*time.Second, func() (bool, error) {
			resp, _ := rawRequest(t, other, addr, http.MethodGet, host, "/ready")
			return resp.StatusCode == http.StatusOK, fmt.Errorf("%s: /ready answered %d", host, resp.StatusCode)
		})
		if err != nil {
			t.Fatal(err)
		}

		resp, body := rawRequest(t, victim, addr, r.s.Method, host, "/victim1")
		if resp.StatusCode/100 == 5 || !strings.Contains(resp.Header.Get("Set-Cookie"), gfetest.StrayCookie) || strings.Contains(body, "stray") {
			t.Errorf("%s, %s: the victim's own answer %d %q, Set-Cookie %q", path, r.s.Name, resp.StatusCode, body, resp.Header.Get("Set-Cookie"))
			continue
		}
		r.b.SendExtra(t) // in the gfe's socket from here on
		if r.slow {
			// net/http closes the connection from its own goroutine when
			// the bytes arrive; the next request could take it first.
			r.b.WaitVictimClosed(t)
		}
		resp, body = rawRequest(t, other, addr, http.MethodGet, host, "/victim2")
		if resp.StatusCode != http.StatusOK || body != "/victim2" || len(resp.Header.Values("Set-Cookie")) != 0 {
			t.Errorf("%s, %s: another client's /victim2 got %d %q with Set-Cookie %q, want its own 200 \"/victim2\" and no cookie",
				path, r.s.Name, resp.StatusCode, body, resp.Header.Values("Set-Cookie"))
		}
	}

	m := scrape(t, g.admin+"/metrics")
	for _, r := range runs {
		want := 1.0 // the fast path closed the victim's connection for its stray bytes
		if r.slow {
			want = 0 // net/http's Transport closes it; the gfe does not see why
		}
		if v := m.value("spillway_gfe_backend_unsolicited_total", "service="+r.service); v != want {
			t.Errorf("%s (net/http alone: %v): spillway_gfe_backend_unsolicited_total = %v, want %v", r.s.Name, r.slow, v, want)
		}
	}
}
