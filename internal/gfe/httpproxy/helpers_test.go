package httpproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/routing"
)

// Helpers of the session tests (affinity, outlier detection, retries).

// testBackend is a real HTTP server standing in for one instance. It names
// itself in X-Spillway-Backend, answers status (200 when 0), counts the
// requests it got, and echoes what it received of the request's body
// (X-Body), Cookie (X-Got-Cookie), X-Real-IP (X-Got-Real-Ip) and path
// (X-Got-Path, raw|decoded).
type testBackend struct {
	*httptest.Server
	name   string
	status atomic.Int32
	hits   atomic.Int64
}

func newTestBackend(t testing.TB, name string) *testBackend {
	t.Helper()
	b := &testBackend{name: name}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Spillway-Backend", name)
		w.Header().Set("X-Body", string(body))
		// What reached the backend of what the client sent (security tests).
		w.Header().Set("X-Got-Cookie", strings.Join(r.Header["Cookie"], " | "))
		w.Header().Set("X-Got-Real-Ip", strings.Join(r.Header["X-Real-Ip"], ","))
		w.Header().Set("X-Got-Path", r.URL.RawPath+"|"+r.URL.Path)
		if s := b.status.Load(); s != 0 {
			w.WriteHeader(int(s))
		}
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *testBackend) addr() string { return strings.TrimPrefix(b.URL, "http://") }

// testGFE is a proxy and the stand-in planner whose tables it reads.
type testGFE struct {
	proxy *Proxy
	p     *gfetest.Planner
}

// sessionEdge returns a proxy at site nyc (us-east 5 ms, eu-west 80 ms)
// serving cfg, with a first table built at the fake clock's time.
func sessionEdge(t testing.TB, cfg *config.Config) (*testGFE, *clock.Fake) {
	t.Helper()
	p := gfetest.NewPlanner(gfetest.Rand()) // seeded, and safe for parallel benchmarks
	p.Apply(snapshot.FromConfig("v1", cfg))
	p.Step()
	proxy, err := New(Config{}, Options{Planner: p, Clock: p.Clock, Rand: p.Rand})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.CloseIdleConnections)
	return &testGFE{proxy: proxy, p: p}, p.Clock
}

// decisions returns how many decisions of the service "web" were made
// for reason r.
func (e *testGFE) decisions(r routing.Reason) int64 {
	return e.p.Table().Services["web"].Meters().Decisions[r].Load()
}

// member returns the member of svc's scope with address addr.
func member(t testing.TB, svc *routing.Service, addr string) *routing.Member {
	t.Helper()
	m, ok := svc.Member(addr)
	if !ok {
		t.Fatalf("%s is not in the scope", addr)
	}
	return m
}

// holdSlots takes one slot of each of svc's backends at addrs (all of a
// max_concurrency 1 backend's) until the test ends.
func holdSlots(t testing.TB, svc *routing.Service, addrs ...string) {
	t.Helper()
	for _, addr := range addrs {
		m := member(t, svc, addr)
		m.B.TryAcquire()
		t.Cleanup(m.B.Release)
	}
}

// pickAffinity picks for r, whose flow is k, by svc's session affinity,
// as the proxy does.
func pickAffinity(svc *routing.Service, r *http.Request, k routing.Flow, now time.Time, rnd func() uint64) (routing.Pick, routing.Cookie, error) {
	return svc.PickAffinity(affinityRequest(svc.Affinity(), (*httpView)(r), k), now, rnd)
}

// do sends one request through the proxy in process, from client address
// remote, and returns the recorded response.
func do(t testing.TB, e *testGFE, method, remote string, body string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, "http://gfe.test/x", rd)
	req.RemoteAddr = remote
	for k, vs := range header {
		req.Header[k] = vs
	}
	if viaFast {
		return doFast(t, e.proxy, req)
	}
	w := httptest.NewRecorder()
	e.proxy.ServeHTTP(w, req)
	return w
}
