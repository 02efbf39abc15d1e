package httpproxy

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/routing"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/lb/affinity"
)

const testSecret = "session-test-secret-0123456789abcdef"

func TestCookieValue(t *testing.T) {
	tests := []struct {
		name   string
		header []string
		want   string
	}{
		{"absent", nil, ""},
		{"only", []string{"SID=abc"}, "abc"},
		{"among others", []string{"a=1; SID=abc; b=2"}, "abc"},
		{"no spaces", []string{"a=1;SID=abc"}, "abc"},
		{"quoted", []string{`SID="abc"`}, "abc"},
		{"second header", []string{"a=1", "SID=xyz"}, "xyz"},
		{"first wins", []string{"SID=1; SID=2"}, "1"},
		{"prefix is not the name", []string{"XSID=abc; SIDX=def"}, ""},
		{"empty value", []string{"SID="}, ""},
		{"no equals", []string{"SID"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.header != nil {
				h["Cookie"] = tt.header
			}
			if got := cookieValue(h, "SID"); got != tt.want {
				t.Errorf("cookieValue(%q) = %q, want %q", tt.header, got, tt.want)
			}
		})
	}
}

// cookieOf returns the value of the named cookie set by w, or "".
func cookieOf(h http.Header, name string) (*http.Cookie, bool) {
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == name {
			return c, true
		}
	}
	return nil, false
}

// threeBackends returns three backends in one zone of us-east and the
// regions of a config over them.
func threeBackends(t *testing.T) ([]*testBackend, []gfetest.Region) {
	t.Helper()
	bs := []*testBackend{newTestBackend(t, "b1"), newTestBackend(t, "b2"), newTestBackend(t, "b3")}
	return bs, []gfetest.Region{{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{bs[0].addr(), bs[1].addr(), bs[2].addr()}}}}}
}

// TestGeneratedCookieAffinity follows one client through the life of its
// cookie: issued on the first request, honoured on every gfe of the
// deployment, ignored when forged or expired (and replaced), and replaced
// when its backend turns unhealthy.
func TestGeneratedCookieAffinity(t *testing.T) {
	bs, regions := threeBackends(t)
	for _, policy := range []string{"waterfall", "round_robin"} {
		t.Run(policy, func(t *testing.T) {
			cfg := gfetest.SessionConfig(t, policy, regions, `session_affinity: {type: generated_cookie, cookie_name: SID, cookie_ttl: 1h, cookie_secret: `+testSecret+`}`, "")
			e, clk := sessionEdge(t, cfg)
			const client = "192.0.2.7:40000"

			w := do(t, e, "GET", client, "", nil)
			c, ok := cookieOf(w.Header(), "SID")
			if w.Code != 200 || !ok {
				t.Fatalf("first request: status %d, Set-Cookie %q; want 200 and a SID cookie", w.Code, w.Header()["Set-Cookie"])
			}
			if c.MaxAge != 3600 || !c.HttpOnly || c.Path != "/" {
				t.Errorf("cookie %+v: want Max-Age 3600, HttpOnly, Path /", c)
			}
			first := w.Header().Get("X-Spillway-Backend")
			withCookie := func(v string) http.Header { return http.Header{"Cookie": {"SID=" + v}} }

			// 300 requests with the cookie: one backend, no new cookie.
			for i := range 300 {
				w := do(t, e, "GET", client, "", withCookie(c.Value))
				if got := w.Header().Get("X-Spillway-Backend"); got != first || w.Header().Get("Set-Cookie") != "" {
					t.Fatalf("request %d with the cookie went to %s (Set-Cookie %q), want %s and no new cookie", i, got, w.Header().Get("Set-Cookie"), first)
				}
			}
			if got := e.decisions(routing.ReasonAffinity); got != 300 {
				t.Errorf("affinity decisions = %d, want 300", got)
			}

			// Another gfe of the deployment honours it.
			e2, _ := sessionEdge(t, cfg)
			for range 20 {
				if got := do(t, e2, "GET", client, "", withCookie(c.Value)).Header().Get("X-Spillway-Backend"); got != first {
					t.Fatalf("second gfe sent the cookie's client to %s, want %s", got, first)
				}
			}

			// Forged: a cookie signed with another secret naming another
			// backend is ignored and replaced.
			other := bs[0].addr()
			if other == addrOf(bs, first) {
				other = bs[1].addr()
			}
			forgedKR, _ := affinity.NewKeyring(routing.DeriveCookieKey("another-secret-0123456789abcdef-xyz", "web"))
			forged := forgedKR.Encode(affinity.Cookie{Backend: affinity.BackendID(other), Expires: clk.Now().Add(time.Hour)})
			pinnedBefore := e.decisions(routing.ReasonAffinity)
			w = do(t, e, "GET", client, "", withCookie(forged))
			nc, ok := cookieOf(w.Header(), "SID")
			if !ok || nc.Value == forged {
				t.Fatalf("forged cookie: Set-Cookie %q, want a new cookie", w.Header()["Set-Cookie"])
			}
			if got := e.decisions(routing.ReasonAffinity); got != pinnedBefore {
				t.Errorf("forged cookie counted as affinity (%d -> %d)", pinnedBefore, got)
			}
			if got := do(t, e, "GET", client, "", withCookie(nc.Value)).Header().Get("X-Spillway-Backend"); got != w.Header().Get("X-Spillway-Backend") {
				t.Errorf("the cookie issued for a forged one pins %s, want %s", got, w.Header().Get("X-Spillway-Backend"))
			}

			// Expired: after the TTL the old cookie is replaced.
			clk.Advance(61 * time.Minute)
			w = do(t, e, "GET", client, "", withCookie(c.Value))
			if nc, ok := cookieOf(w.Header(), "SID"); !ok || nc.Value == c.Value {
				t.Fatalf("expired cookie: Set-Cookie %q, want a new cookie", w.Header()["Set-Cookie"])
			}
			c, _ = cookieOf(w.Header(), "SID")
			pinned := w.Header().Get("X-Spillway-Backend")

			// The pinned backend turns unhealthy: the client moves once and
			// gets a cookie for its new backend, which then holds.
			e.p.Apply(snapshot.FromConfig("v2", cfg, addrOf(bs, pinned)))
			e.p.Step()
			w = do(t, e, "GET", client, "", withCookie(c.Value))
			moved := w.Header().Get("X-Spillway-Backend")
			nc, ok = cookieOf(w.Header(), "SID")
			if moved == pinned || !ok {
				t.Fatalf("after %s turned unhealthy: went to %s with Set-Cookie %q, want another backend and a new cookie", pinned, moved, w.Header()["Set-Cookie"])
			}
			for range 50 {
				if got := do(t, e, "GET", client, "", withCookie(nc.Value)).Header().Get("X-Spillway-Backend"); got != moved {
					t.Fatalf("re-issued cookie pins %s, want %s", got, moved)
				}
			}
		})
	}
}

func addrOf(bs []*testBackend, name string) string {
	for _, b := range bs {
		if b.name == name {
			return b.addr()
		}
	}
	return ""
}

// TestCookieRotation: a cookie signed with the previous secret keeps its
// backend and is re-signed with the current one.
func TestCookieRotation(t *testing.T) {
	_, regions := threeBackends(t)
	const newSecret = "the-new-secret-0123456789abcdef-xyz"
	old := gfetest.SessionConfig(t, "round_robin", regions, `session_affinity: {type: generated_cookie, cookie_name: SID, cookie_secret: `+testSecret+`}`, "")
	rotated := gfetest.SessionConfig(t, "round_robin", regions, `session_affinity: {type: generated_cookie, cookie_name: SID, cookie_secret: `+newSecret+`, previous_cookie_secret: `+testSecret+`}`, "")
	e1, _ := sessionEdge(t, old)
	w := do(t, e1, "GET", "192.0.2.1:1", "", nil)
	c, _ := cookieOf(w.Header(), "SID")
	if c.MaxAge != 0 || !c.Expires.IsZero() {
		t.Errorf("cookie_ttl 0: cookie %+v, want a session cookie (no Max-Age, no Expires)", c)
	}
	e2, _ := sessionEdge(t, rotated)
	w2 := do(t, e2, "GET", "192.0.2.1:1", "", http.Header{"Cookie": {"SID=" + c.Value}})
	if got, want := w2.Header().Get("X-Spillway-Backend"), w.Header().Get("X-Spillway-Backend"); got != want {
		t.Errorf("after rotation the old cookie pins %s, want %s", got, want)
	}
	nc, ok := cookieOf(w2.Header(), "SID")
	if !ok || nc.Value == c.Value {
		t.Fatalf("after rotation: Set-Cookie %q, want the cookie re-signed", w2.Header()["Set-Cookie"])
	}
	// The re-signed cookie verifies with the new secret alone.
	only := gfetest.SessionConfig(t, "round_robin", regions, `session_affinity: {type: generated_cookie, cookie_name: SID, cookie_secret: `+newSecret+`}`, "")
	e3, _ := sessionEdge(t, only)
	w3 := do(t, e3, "GET", "192.0.2.1:1", "", http.Header{"Cookie": {"SID=" + nc.Value}})
	if got := w3.Header().Get("X-Spillway-Backend"); got != w.Header().Get("X-Spillway-Backend") || w3.Header().Get("Set-Cookie") != "" {
		t.Errorf("re-signed cookie on a gfe with only the new secret: %s, Set-Cookie %q; want %s and none", got, w3.Header().Get("Set-Cookie"), w.Header().Get("X-Spillway-Backend"))
	}
}

// TestKeyAffinity checks the key-based modes: one client stays on one
// backend over many requests, many clients spread, and the http_cookie
// mode issues the cookie to a client that has none.
func TestKeyAffinity(t *testing.T) {
	_, regions := threeBackends(t)
	tests := []struct {
		name     string
		affinity string
		// client returns the address and header of client i.
		client func(i int) (string, http.Header)
	}{
		{"client_ip", "{type: client_ip}", func(i int) (string, http.Header) {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), uint16(40000+i)).String(), nil
		}},
		{"client_ip_port_proto", "{type: client_ip_port_proto}", func(i int) (string, http.Header) {
			return netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), uint16(40000+i)).String(), nil
		}},
		{"header", "{type: header, header_name: x-user-id}", func(i int) (string, http.Header) {
			return "192.0.2.1:1", http.Header{"X-User-Id": {strings.Repeat("u", i+1)}}
		}},
		{"http_cookie", "{type: http_cookie, cookie_name: app}", func(i int) (string, http.Header) {
			return "192.0.2.1:1", http.Header{"Cookie": {"app=session-" + strings.Repeat("x", i)}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := sessionEdge(t, gfetest.SessionConfig(t, "waterfall", regions, "session_affinity: "+tt.affinity, ""))
			spread := map[string]int{}
			for i := range 30 {
				remote, h := tt.client(i)
				seen := map[string]int{}
				for range 20 {
					seen[do(t, e, "GET", remote, "", h).Header().Get("X-Spillway-Backend")]++
				}
				if len(seen) != 1 {
					t.Fatalf("client %d went to %v, want one backend", i, seen)
				}
				for b := range seen {
					spread[b]++
				}
			}
			if len(spread) != 3 {
				t.Errorf("30 clients went to %v, want all 3 backends used", spread)
			}
			if got := e.decisions(routing.ReasonAffinity); got != 600 {
				t.Errorf("affinity decisions = %d, want 600", got)
			}
		})
	}

	t.Run("http_cookie issued when absent", func(t *testing.T) {
		e, _ := sessionEdge(t, gfetest.SessionConfig(t, "waterfall", regions, "session_affinity: {type: http_cookie, cookie_name: app, cookie_ttl: 10m}", ""))
		w := do(t, e, "GET", "192.0.2.1:1", "", nil)
		c, ok := cookieOf(w.Header(), "app")
		if !ok || len(c.Value) != 32 || c.MaxAge != 600 {
			t.Fatalf("Set-Cookie %q, want app=<32 hex digits>; Max-Age=600", w.Header()["Set-Cookie"])
		}
		first := w.Header().Get("X-Spillway-Backend")
		for range 20 {
			w := do(t, e, "GET", "192.0.2.1:1", "", http.Header{"Cookie": {"app=" + c.Value}})
			if got := w.Header().Get("X-Spillway-Backend"); got != first || w.Header().Get("Set-Cookie") != "" {
				t.Fatalf("with the issued cookie: %s, Set-Cookie %q; want %s and none", got, w.Header().Get("Set-Cookie"), first)
			}
		}
	})
}

// TestAffinityPickDoesNotAllocate checks the request-path pick of the
// key-based modes, and that a generated cookie that pins costs no more
// allocations than verifying it (affinity.Keyring.ParseCookie: its HMAC).
func TestAffinityPickDoesNotAllocate(t *testing.T) {
	_, regions := threeBackends(t)
	for _, a := range []string{"{type: client_ip}", "{type: header, header_name: x-user}", "{type: http_cookie, cookie_name: app}",
		"{type: generated_cookie, cookie_name: SID, cookie_secret: " + testSecret + "}"} {
		t.Run(a, func(t *testing.T) {
			e, clk := sessionEdge(t, gfetest.SessionConfig(t, "waterfall", regions, "session_affinity: "+a, ""))
			svc := e.p.Table().Services["web"]
			req, _ := http.NewRequest("GET", "http://gfe.test/", nil)
			req.Header.Set("X-User", "u1")
			req.Header.Set("Cookie", "app=s1")
			k := routing.Flow{Src: netip.MustParseAddrPort("192.0.2.1:5555"), Dst: netip.MustParseAddrPort("127.0.1.1:8080")}
			_, ck, err := pickAffinity(svc, req, k, clk.Now(), e.p.Rand)
			if err != nil {
				t.Fatal(err)
			}
			if ck.Value != "" {
				req.Header.Set("Cookie", "SID="+ck.Value)
			}
			want := 0.0
			if svc.Affinity().Keyring() != nil {
				want = testing.AllocsPerRun(1000, func() { svc.Affinity().Keyring().ParseCookie(ck.Value, clk.Now()) })
			}
			n := testing.AllocsPerRun(1000, func() {
				pk, ck, err := pickAffinity(svc, req, k, clk.Now(), e.p.Rand)
				if err != nil || ck.Value != "" || pk.Reason != routing.ReasonAffinity {
					t.Fatalf("pickAffinity = %v, %+v, %v; want a pinned pick without cookie", pk.Reason, ck, err)
				}
				pk.Done()
			})
			if n != want {
				t.Errorf("pickAffinity allocates %v times, want %v", n, want)
			}
		})
	}
}
