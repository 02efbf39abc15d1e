package affinity

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/lb/backend"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func backendNames(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("10.1.0.%d:8080", i+1)
	}
	return s
}

// fakeFallback is a round-robin Selector over backends that counts its
// calls and can be made to fail.
type fakeFallback struct {
	backends []string
	rr       backend.RoundRobin
	calls    atomic.Int64
	err      error
}

func (f *fakeFallback) Select(Request) (string, error) {
	f.calls.Add(1)
	if f.err != nil {
		return "", f.err
	}
	i, _ := f.rr.Pick(len(f.backends))
	return f.backends[i], nil
}

func testKey(i byte) []byte {
	k := make([]byte, MinKeyLen)
	for j := range k {
		k[j] = i + byte(j)
	}
	return k
}

func mustKeyring(t testing.TB, ids ...byte) *Keyring {
	t.Helper()
	keys := make([][]byte, len(ids))
	for i, id := range ids {
		keys[i] = testKey(id)
	}
	kr, err := NewKeyring(keys...)
	if err != nil {
		t.Fatalf("NewKeyring() error = %v", err)
	}
	return kr
}

func config(mode Mode) Config {
	c := DefaultConfig()
	c.Mode = mode
	c.HTTPCookie = "session"
	c.HeaderName = "X-User-Id"
	return c
}

// down is a set of unavailable backends, read by Options.Available.
type down map[string]bool

func (d down) available(b string) bool { return !d[b] }

func mustPicker(t testing.TB, mode Mode, backends []string, fb Selector, d down) *Picker {
	t.Helper()
	p, err := New(config(mode), backends, fb, Options{Available: d.available, Keyring: mustKeyring(t, 1)})
	if err != nil {
		t.Fatalf("New(%s) error = %v", mode, err)
	}
	return p
}

// client returns the i-th distinct test client.
func client(i int) Request {
	return Request{
		ClientIP:   netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}),
		ClientPort: uint16(30000 + i%1000),
		DestIP:     netip.MustParseAddr("192.0.2.10"),
		DestPort:   443,
		Protocol:   6,
		Cookie:     fmt.Sprintf("sess-%d", i),
		Header:     fmt.Sprintf("user-%d", i),
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		modify  func(*Config)
		wantErr []string
	}{
		{name: "default", modify: func(*Config) {}},
		{name: "every mode", modify: func(c *Config) { c.Mode = ModeClientIPPortProto }},
		{name: "unknown mode", modify: func(c *Config) { c.Mode = "sticky" },
			wantErr: []string{`affinity.mode: unknown mode "sticky", want one of none, client_ip, client_ip_proto, client_ip_port_proto, generated_cookie, http_cookie, header`}},
		{name: "generated cookie defaults", modify: func(c *Config) { c.Mode = ModeGeneratedCookie }},
		{name: "bad cookie", modify: func(c *Config) { c.Mode = ModeGeneratedCookie; c.CookieName = "a b"; c.CookieTTL = 0 },
			wantErr: []string{`affinity.cookie_name: must be a non-empty token, got "a b"`, "affinity.cookie_ttl: must be at least 1s, got 0s"}},
		{name: "http cookie missing", modify: func(c *Config) { c.Mode = ModeHTTPCookie },
			wantErr: []string{`affinity.http_cookie: must be a non-empty token, got ""`}},
		{name: "header ok", modify: func(c *Config) { c.Mode = ModeHeader; c.HeaderName = "X-User-Id" }},
		{name: "header bad", modify: func(c *Config) { c.Mode = ModeHeader; c.HeaderName = "X:Y" },
			wantErr: []string{`affinity.header_name: must be a non-empty token, got "X:Y"`}},
		{name: "table size", modify: func(c *Config) { c.Mode = ModeClientIP; c.TableSize = 1000 },
			wantErr: []string{"affinity.table_size: must be prime, got 1000"}},
		{name: "table size unused", modify: func(c *Config) { c.TableSize = 1000 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.modify(&c)
			err := c.Validate()
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if diff := cmp.Diff(tt.wantErr, got); diff != "" {
				t.Errorf("Validate() errors mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	fb := &fakeFallback{backends: backendNames(3)}
	kr := mustKeyring(t, 1)
	tests := []struct {
		name     string
		cfg      Config
		backends []string
		fallback Selector
		opts     Options
		wantErr  string
	}{
		{name: "invalid config", cfg: config("x"), fallback: fb, wantErr: "affinity.mode"},
		{name: "no fallback", cfg: config(ModeNone), wantErr: "fallback selector is required"},
		{name: "no keyring", cfg: config(ModeGeneratedCookie), fallback: fb, wantErr: "requires a keyring"},
		{name: "duplicate cookie backend", cfg: config(ModeGeneratedCookie), backends: []string{"a", "b", "a"}, fallback: fb, opts: Options{Keyring: kr},
			wantErr: `backends 0 ("a") and 2 ("a") have the same cookie id`},
		{name: "duplicate hashed backend", cfg: config(ModeHeader), backends: []string{"a", "a"}, fallback: fb, wantErr: "duplicate backend name"},
		{name: "table too small", cfg: func() Config { c := config(ModeClientIP); c.TableSize = 3; return c }(), backends: backendNames(3), fallback: fb,
			wantErr: "must be larger than the number of backends (3)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, tt.backends, tt.fallback, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("New() error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestModes checks, for every mode, that one client sticks to one backend
// over 1,000 requests (following the cookie it is given, in
// generated_cookie mode) and that 1,000 clients spread over 10 backends.
func TestModes(t *testing.T) {
	tests := []struct {
		mode Mode
		// wantPinned is whether requests after the first are placed by
		// affinity rather than by the fallback.
		wantPinned bool
		// wantSticky is whether one client always gets one backend.
		wantSticky bool
	}{
		{mode: ModeNone, wantPinned: false, wantSticky: false},
		{mode: ModeClientIP, wantPinned: true, wantSticky: true},
		{mode: ModeClientIPProto, wantPinned: true, wantSticky: true},
		{mode: ModeClientIPPortProto, wantPinned: true, wantSticky: true},
		{mode: ModeGeneratedCookie, wantPinned: true, wantSticky: true},
		{mode: ModeHTTPCookie, wantPinned: true, wantSticky: true},
		{mode: ModeHeader, wantPinned: true, wantSticky: true},
	}
	const backends, clients, requests = 10, 1000, 1000
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			fb := &fakeFallback{backends: backendNames(backends)}
			p := mustPicker(t, tt.mode, backendNames(backends), fb, nil)

			// One client, many requests.
			req := client(7)
			if tt.mode == ModeGeneratedCookie {
				req.Cookie = ""
			}
			seen := map[string]int{}
			pinned := 0
			for i := range requests {
				res, err := p.Pick(req, t0.Add(time.Duration(i)*time.Second))
				if err != nil {
					t.Fatalf("Pick() error = %v", err)
				}
				seen[res.Backend]++
				if res.Pinned {
					pinned++
				}
				if res.SetCookie {
					req.Cookie = res.Cookie // the browser stores it
				}
			}
			wantPinned := 0
			if tt.wantPinned {
				wantPinned = requests
				if tt.mode == ModeGeneratedCookie {
					wantPinned-- // the first request has no cookie yet
				}
			}
			if pinned != wantPinned {
				t.Errorf("%d of %d requests pinned, want %d", pinned, requests, wantPinned)
			}
			if sticky := len(seen) == 1; sticky != tt.wantSticky {
				t.Errorf("one client reached %d backends (%v), want sticky = %v", len(seen), seen, tt.wantSticky)
			}

			// Many clients, one request each.
			per := map[string]int{}
			for i := range clients {
				req := client(i)
				if tt.mode == ModeGeneratedCookie {
					req.Cookie = ""
				}
				res, err := p.Pick(req, t0)
				if err != nil {
					t.Fatalf("Pick() error = %v", err)
				}
				per[res.Backend]++
			}
			// Expected 100 each; binomial σ ≈ 9.5, so 50..150 is over 5σ.
			if len(per) != backends {
				t.Errorf("%d clients reached %d backends, want %d", clients, len(per), backends)
			}
			for b, n := range per {
				if n < 50 || n > 150 {
					t.Errorf("backend %s got %d of %d clients, want 100 ± 50", b, n, clients)
				}
			}
		})
	}
}

// TestKeyParts checks which request fields each key-based mode hashes: a
// field in the key moves the client between backends, a field outside it
// does not.
func TestKeyParts(t *testing.T) {
	vary := map[string]func(r *Request, i int){
		"client ip":   func(r *Request, i int) { r.ClientIP = netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)}) },
		"client port": func(r *Request, i int) { r.ClientPort = uint16(i) },
		"protocol":    func(r *Request, i int) { r.Protocol = uint8(i) },
		"cookie":      func(r *Request, i int) { r.Cookie = fmt.Sprint("c", i) },
		"header":      func(r *Request, i int) { r.Header = fmt.Sprint("h", i) },
	}
	tests := []struct {
		mode  Mode
		moves []string // the fields that move the client; the others must not
	}{
		{mode: ModeClientIP, moves: []string{"client ip"}},
		{mode: ModeClientIPProto, moves: []string{"client ip", "protocol"}},
		{mode: ModeClientIPPortProto, moves: []string{"client ip", "client port", "protocol"}},
		{mode: ModeHTTPCookie, moves: []string{"cookie"}},
		{mode: ModeHeader, moves: []string{"header"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			p := mustPicker(t, tt.mode, backendNames(10), &fakeFallback{backends: backendNames(10)}, nil)
			var got []string
			for _, field := range []string{"client ip", "client port", "protocol", "cookie", "header"} {
				seen := map[string]bool{}
				for i := 1; i <= 200; i++ {
					req := client(1)
					vary[field](&req, i)
					res, err := p.Pick(req, t0)
					if err != nil || !res.Pinned {
						t.Fatalf("Pick() = %+v, %v, want pinned", res, err)
					}
					seen[res.Backend] = true
				}
				if len(seen) > 1 {
					got = append(got, field)
				}
			}
			if diff := cmp.Diff(tt.moves, got); diff != "" {
				t.Errorf("fields that move the client mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFallbackWithoutKey checks that a request lacking what the mode hashes
// goes to the fallback, unpinned.
func TestFallbackWithoutKey(t *testing.T) {
	noKey := map[Mode]func(*Request){
		ModeClientIP:          func(r *Request) { r.ClientIP = netip.Addr{} },
		ModeClientIPProto:     func(r *Request) { r.ClientIP = netip.Addr{} },
		ModeClientIPPortProto: func(r *Request) { r.ClientIP = netip.Addr{} },
		ModeHTTPCookie:        func(r *Request) { r.Cookie = "" },
		ModeHeader:            func(r *Request) { r.Header = "" },
		ModeGeneratedCookie:   func(r *Request) { r.Cookie = "" },
	}
	for mode, strip := range noKey {
		t.Run(string(mode), func(t *testing.T) {
			fb := &fakeFallback{backends: backendNames(4)}
			p := mustPicker(t, mode, backendNames(4), fb, nil)
			var got []string
			for i := range 8 {
				req := client(i)
				strip(&req)
				res, err := p.Pick(req, t0)
				if err != nil || res.Pinned {
					t.Fatalf("Pick() = %+v, %v, want unpinned", res, err)
				}
				if res.SetCookie != (mode == ModeGeneratedCookie) {
					t.Errorf("SetCookie = %v, want %v", res.SetCookie, mode == ModeGeneratedCookie)
				}
				got = append(got, res.Backend)
			}
			want := append(backendNames(4), backendNames(4)...) // round robin
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("backends mismatch (-want +got):\n%s", diff)
			}
			if n := fb.calls.Load(); n != 8 {
				t.Errorf("fallback called %d times, want 8", n)
			}
		})
	}
}

// TestFallbackWhenPinnedUnavailable marks a client's backend unavailable:
// the fallback places it, and once the backend is back the client returns
// to it (key modes) or stays where the new cookie pins it (cookie mode).
func TestFallbackWhenPinnedUnavailable(t *testing.T) {
	for _, mode := range []Mode{ModeClientIP, ModeClientIPProto, ModeClientIPPortProto, ModeHTTPCookie, ModeHeader, ModeGeneratedCookie} {
		t.Run(string(mode), func(t *testing.T) {
			d := down{}
			fb := &fakeFallback{backends: backendNames(5)}
			p := mustPicker(t, mode, backendNames(5), fb, d)
			req := client(3)
			if mode == ModeGeneratedCookie {
				first, err := p.Pick(Request{}, t0)
				if err != nil {
					t.Fatal(err)
				}
				req.Cookie = first.Cookie
			}
			home, err := p.Pick(req, t0)
			if err != nil || !home.Pinned || home.SetCookie {
				t.Fatalf("Pick() = %+v, %v, want pinned without a new cookie", home, err)
			}

			d[home.Backend] = true
			calls := fb.calls.Load()
			moved, err := p.Pick(req, t0)
			if err != nil {
				t.Fatal(err)
			}
			if moved.Pinned || moved.Backend == home.Backend || fb.calls.Load() != calls+1 {
				t.Fatalf("Pick() with %s down = %+v, want the fallback's unpinned choice of another backend", home.Backend, moved)
			}
			if mode == ModeGeneratedCookie {
				if !moved.SetCookie || moved.Cookie == req.Cookie {
					t.Fatalf("Pick() with %s down = %+v, want a new cookie", home.Backend, moved)
				}
				req.Cookie = moved.Cookie
			} else if moved.SetCookie {
				t.Errorf("Pick() in %s set a cookie", mode)
			}

			delete(d, home.Backend)
			back, err := p.Pick(req, t0)
			if err != nil || !back.Pinned {
				t.Fatalf("Pick() after recovery = %+v, %v, want pinned", back, err)
			}
			want := home.Backend
			if mode == ModeGeneratedCookie {
				want = moved.Backend // the re-issued cookie holds
			}
			if back.Backend != want {
				t.Errorf("Pick() after recovery = %s, want %s", back.Backend, want)
			}
		})
	}
}

func TestFallbackError(t *testing.T) {
	errFull := errors.New("no capacity")
	for _, mode := range []Mode{ModeNone, ModeClientIP, ModeGeneratedCookie} {
		p := mustPicker(t, mode, nil, &fakeFallback{err: errFull}, nil)
		if _, err := p.Pick(client(1), t0); !errors.Is(err, errFull) {
			t.Errorf("%s: Pick() error = %v, want wrapping %v", mode, err, errFull)
		}
	}
}

// TestCookieBackendLeft pins a cookie to a backend that then leaves the
// healthy set (a new Picker without it): the cookie is re-issued.
func TestCookieBackendLeft(t *testing.T) {
	all := backendNames(3)
	p := mustPicker(t, ModeGeneratedCookie, all, &fakeFallback{backends: all}, nil)
	first, _ := p.Pick(Request{}, t0) // round robin: all[0]
	rest := all[1:]
	p2 := mustPicker(t, ModeGeneratedCookie, rest, &fakeFallback{backends: rest}, nil)
	res, err := p2.Pick(Request{Cookie: first.Cookie}, t0)
	if err != nil || res.Pinned || !res.SetCookie || res.Backend != rest[0] {
		t.Fatalf("Pick(cookie for %s) on a picker without it = %+v, %v, want unpinned %s with a new cookie", first.Backend, res, err, rest[0])
	}
}

// TestCookieIgnored checks that forged, altered, malformed, expired and
// wrong-key cookies are treated as no cookie: the fallback picks and a new
// cookie is issued, never the backend the value claims.
func TestCookieIgnored(t *testing.T) {
	bs := backendNames(3)
	kr := mustKeyring(t, 1)
	victim := BackendID(bs[2])
	valid := kr.Encode(Cookie{Backend: victim, Expires: t0.Add(time.Hour)})
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	tests := []struct {
		name    string
		value   string
		wantErr error
	}{
		{name: "wrong key", value: mustKeyring(t, 2).Encode(Cookie{Backend: victim, Expires: t0.Add(time.Hour)}), wantErr: ErrBadSignature},
		{name: "expired", value: kr.Encode(Cookie{Backend: victim, Expires: t0}), wantErr: ErrExpiredCookie},
		{name: "altered backend", value: flip(valid, 3), wantErr: ErrBadSignature},
		{name: "altered expiry", value: flip(valid, 20), wantErr: ErrBadSignature},
		{name: "altered mac", value: flip(valid, 60), wantErr: ErrBadSignature},
		{name: "forged zero mac", value: forge(victim, t0.Add(time.Hour), make([]byte, macLen)), wantErr: ErrBadSignature},
		{name: "truncated", value: valid[:len(valid)-1], wantErr: ErrMalformedCookie},
		{name: "extended", value: valid + "A", wantErr: ErrMalformedCookie},
		{name: "padding", value: valid[:len(valid)-2] + "==", wantErr: ErrMalformedCookie},
		{name: "outside alphabet", value: "+" + valid[1:], wantErr: ErrMalformedCookie},
		{name: "newline", value: valid[:10] + "\n" + valid[11:], wantErr: ErrMalformedCookie},
		// The decoder skips newlines: 64 symbols decode to 48 bytes.
		{name: "two newlines", value: valid[:10] + "\r\n" + valid[12:], wantErr: ErrMalformedCookie},
		{name: "trailing bits", value: valid[:len(valid)-1] + nextSymbol(valid[len(valid)-1]), wantErr: ErrMalformedCookie},
		{name: "version 2", value: withVersion(kr, 2, victim, t0.Add(time.Hour)), wantErr: ErrMalformedCookie},
		{name: "empty-ish", value: " ", wantErr: ErrMalformedCookie},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := kr.ParseCookie(tt.value, t0); !errors.Is(err, tt.wantErr) {
				t.Errorf("ParseCookie(%q) error = %v, want %v", tt.value, err, tt.wantErr)
			}
			fb := &fakeFallback{backends: bs}
			p, err := New(config(ModeGeneratedCookie), bs, fb, Options{Keyring: kr})
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Pick(Request{Cookie: tt.value}, t0)
			if err != nil || res.Pinned || !res.SetCookie || res.Backend != bs[0] || fb.calls.Load() != 1 {
				t.Errorf("Pick(%q) = %+v, %v, want the fallback's %s, unpinned, with a new cookie", tt.value, res, err, bs[0])
			}
		})
	}
	// The valid value itself is accepted, so the cases above fail for the
	// reason they name.
	if c, key, err := kr.ParseCookie(valid, t0); err != nil || key != 0 || c.Backend != victim {
		t.Errorf("ParseCookie(valid) = %+v, %d, %v, want backend %#x by key 0", c, key, err, victim)
	}
}

// nextSymbol returns the base64url symbol after c (the last symbol of a
// cookie carries 2 data bits and 4 zero bits; the next symbol sets one of
// the zero bits).
func nextSymbol(c byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	return string(alphabet[(strings.IndexByte(alphabet, c)+1)%64])
}

// forge builds a well-formed cookie with the given MAC.
func forge(backend uint64, exp time.Time, mac []byte) string {
	raw := []byte{cookieVersion}
	raw = append(raw, beUint64(backend)...)
	raw = append(raw, beUint64(uint64(exp.Unix()))...)
	raw = append(raw, mac...)
	return base64URL(raw)
}

// withVersion builds a correctly signed cookie with another version byte.
func withVersion(kr *Keyring, v byte, backend uint64, exp time.Time) string {
	raw := []byte{v}
	raw = append(raw, beUint64(backend)...)
	raw = append(raw, beUint64(uint64(exp.Unix()))...)
	raw = sign(kr.keys[0], raw, raw)
	return base64URL(raw)
}

func TestKeyRotation(t *testing.T) {
	old := mustKeyring(t, 1)
	both := mustKeyring(t, 2, 1) // new key first: signs; old still verifies
	onlyNew := mustKeyring(t, 2)
	id := BackendID("10.1.0.2:8080")
	oldCookie := old.Encode(Cookie{Backend: id, Expires: t0.Add(time.Hour)})

	if c, key, err := both.ParseCookie(oldCookie, t0); err != nil || key != 1 || c.Backend != id {
		t.Errorf("[new, old].ParseCookie(old cookie) = %+v, %d, %v, want backend %#x verified by key 1", c, key, err, id)
	}
	newCookie := both.Encode(Cookie{Backend: id, Expires: t0.Add(time.Hour)})
	if _, key, err := onlyNew.ParseCookie(newCookie, t0); err != nil || key != 0 {
		t.Errorf("[new].ParseCookie([new, old] cookie) key, err = %d, %v, want 0, nil: the first key must sign", key, err)
	}
	if _, _, err := old.ParseCookie(newCookie, t0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("[old].ParseCookie(new cookie) error = %v, want ErrBadSignature", err)
	}
	if _, _, err := onlyNew.ParseCookie(oldCookie, t0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("[new].ParseCookie(old cookie) error = %v, want ErrBadSignature after the old key is retired", err)
	}

	// During rotation a Picker honours the old cookie and re-signs it.
	bs := backendNames(3)
	p, err := New(config(ModeGeneratedCookie), bs, &fakeFallback{backends: bs}, Options{Keyring: both})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Pick(Request{Cookie: oldCookie}, t0)
	if err != nil || !res.Pinned || res.Backend != bs[1] || !res.SetCookie {
		t.Fatalf("Pick(old cookie) = %+v, %v, want pinned %s with a re-signed cookie", res, err, bs[1])
	}
	if c, key, err := onlyNew.ParseCookie(res.Cookie, t0); err != nil || key != 0 || c.Backend != id {
		t.Errorf("re-signed cookie parses as %+v, %d, %v with the new key, want backend %#x", c, key, err, id)
	}
}

// TestCookieExpiry follows one cookie through its life with TTL 1h: honoured
// as is for the first half, refreshed (same backend, new expiry) in the
// second, ignored once expired.
func TestCookieExpiry(t *testing.T) {
	bs := backendNames(4)
	fb := &fakeFallback{backends: bs}
	p := mustPicker(t, ModeGeneratedCookie, bs, fb, nil)
	issued, err := p.Pick(Request{}, t0.Add(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(time.Hour); !issued.Expires.Equal(want) {
		t.Errorf("Expires = %v, want %v (now + TTL, whole seconds)", issued.Expires, want)
	}
	type step struct {
		at         time.Duration
		wantPinned bool
		wantSet    bool
	}
	cookie := issued.Cookie
	for _, s := range []step{
		{at: 10 * time.Minute, wantPinned: true},
		{at: 30*time.Minute - time.Second, wantPinned: true},
		{at: 30*time.Minute + time.Second, wantPinned: true, wantSet: true},
		{at: time.Hour - time.Second, wantPinned: true, wantSet: true},
		{at: time.Hour, wantPinned: false, wantSet: true},
	} {
		res, err := p.Pick(Request{Cookie: cookie}, t0.Add(s.at))
		if err != nil {
			t.Fatal(err)
		}
		if res.Pinned != s.wantPinned || res.SetCookie != s.wantSet {
			t.Errorf("at +%v: Pinned, SetCookie = %v, %v, want %v, %v", s.at, res.Pinned, res.SetCookie, s.wantPinned, s.wantSet)
		}
		if s.wantPinned && res.Backend != issued.Backend {
			t.Errorf("at +%v: backend %s, want %s", s.at, res.Backend, issued.Backend)
		}
		if res.SetCookie {
			if want := t0.Add(s.at + time.Hour).Truncate(time.Second); !res.Expires.Equal(want) {
				t.Errorf("at +%v: new Expires = %v, want %v", s.at, res.Expires, want)
			}
		}
	}
	// A refreshed cookie extends the session past the first expiry.
	refreshed, _ := p.Pick(Request{Cookie: cookie}, t0.Add(45*time.Minute))
	res, _ := p.Pick(Request{Cookie: refreshed.Cookie}, t0.Add(90*time.Minute))
	if !res.Pinned || res.Backend != issued.Backend {
		t.Errorf("refreshed cookie at +90m = %+v, want pinned to %s", res, issued.Backend)
	}
}

func TestNewKeyring(t *testing.T) {
	tests := []struct {
		name    string
		keys    [][]byte
		wantErr string
	}{
		{name: "one", keys: [][]byte{testKey(1)}},
		{name: "two", keys: [][]byte{testKey(1), testKey(2)}},
		{name: "none", wantErr: "at least one key is required"},
		{name: "short", keys: [][]byte{testKey(1), make([]byte, 31)}, wantErr: "key 1: must be at least 32 bytes, got 31"},
		{name: "duplicate", keys: [][]byte{testKey(1), testKey(2), testKey(1)}, wantErr: "key 2: duplicate of key 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kr, err := NewKeyring(tt.keys...)
			if tt.wantErr == "" {
				if err != nil || kr.Len() != len(tt.keys) {
					t.Fatalf("NewKeyring() = %v, %v, want %d keys", kr, err, len(tt.keys))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewKeyring() error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	// The keyring copies its keys.
	k := testKey(1)
	kr, _ := NewKeyring(k)
	c := kr.Encode(Cookie{Backend: 1, Expires: t0.Add(time.Hour)})
	k[0] ^= 0xff
	if _, _, err := kr.ParseCookie(c, t0); err != nil {
		t.Errorf("ParseCookie after the caller changed its key slice: %v, want nil", err)
	}
}

func TestRequestCookie(t *testing.T) {
	want := map[Mode]string{ModeGeneratedCookie: "SPILLWAY_AFFINITY", ModeHTTPCookie: "session"}
	for _, m := range Modes() {
		if got := config(m).RequestCookie(); got != want[m] {
			t.Errorf("%s: RequestCookie() = %q, want %q", m, got, want[m])
		}
	}
}

func TestPickKeyModesDoNotAllocate(t *testing.T) {
	for _, mode := range []Mode{ModeNone, ModeClientIP, ModeClientIPProto, ModeClientIPPortProto, ModeHTTPCookie, ModeHeader} {
		bs := backendNames(10)
		p := mustPicker(t, mode, bs, &fakeFallback{backends: bs}, down{})
		req := client(5)
		if got := testing.AllocsPerRun(1000, func() { p.Pick(req, t0) }); got != 0 {
			t.Errorf("%s: Pick allocs/op = %v, want 0", mode, got)
		}
	}
}
