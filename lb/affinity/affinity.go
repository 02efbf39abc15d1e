package affinity

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/lb/hashing"
)

// Mode is a session affinity mode (docs/design.md §4). The names are those of
// the configuration file.
type Mode string

// The session affinity modes.
const (
	// ModeNone means no affinity: every request goes to the fallback.
	ModeNone Mode = "none"
	// ModeClientIP pins by the 2-tuple client IP + destination IP
	// (hashing.Key2), as Google Cloud's CLIENT_IP does.
	ModeClientIP Mode = "client_ip"
	// ModeClientIPProto pins by client IP + destination IP + protocol
	// (hashing.Key3).
	ModeClientIPProto Mode = "client_ip_proto"
	// ModeClientIPPortProto pins by client IP + destination IP + protocol +
	// client port + destination port (hashing.Key5), so in practice one
	// client connection.
	ModeClientIPPortProto Mode = "client_ip_port_proto"
	// ModeGeneratedCookie pins by a cookie the gfe itself issues, which
	// names the backend, carries an expiry and is signed with HMAC-SHA256
	// (Config.CookieName, Config.CookieTTL, Options.Keyring).
	ModeGeneratedCookie Mode = "generated_cookie"
	// ModeHTTPCookie pins by the hash of the value of an application
	// cookie (Config.HTTPCookie).
	ModeHTTPCookie Mode = "http_cookie"
	// ModeHeader pins by the hash of the value of a request header
	// (Config.HeaderName).
	ModeHeader Mode = "header"
)

// Modes lists every Mode, in documentation order.
func Modes() []Mode {
	return []Mode{ModeNone, ModeClientIP, ModeClientIPProto, ModeClientIPPortProto,
		ModeGeneratedCookie, ModeHTTPCookie, ModeHeader}
}

// Config is the session affinity of one backend service. Start from
// DefaultConfig, then Validate.
type Config struct {
	// Mode selects what pins a client to a backend. Default ModeNone.
	Mode Mode
	// CookieName is the name of the cookie the gfe issues and reads in
	// ModeGeneratedCookie. Default "SPILLWAY_AFFINITY". Must be an
	// RFC 6265 token. Ignored in other modes.
	CookieName string
	// CookieTTL is how long a generated cookie pins its backend. Default
	// 1h; at least 1s. A pinned request whose cookie has less than half of
	// CookieTTL left is given a fresh cookie for the same backend (sliding
	// expiry), so an active session keeps its backend; a session idle for
	// longer than CookieTTL may move. Longer keeps clients put through
	// longer pauses but lets load rebalance more slowly after scale-out.
	// Ignored in other modes.
	CookieTTL time.Duration
	// HTTPCookie is the name of the application cookie whose value pins
	// the backend in ModeHTTPCookie (for example a session id). Required
	// in that mode; no default. Must be an RFC 6265 token.
	HTTPCookie string
	// HeaderName is the request header whose value pins the backend in
	// ModeHeader (for example "X-User-Id"). Required in that mode; no
	// default. Must be an RFC 9110 token.
	HeaderName string
	// TableSize is the number of slots of the Maglev table that maps keys
	// to backends in the key-based modes (client IP, HTTP cookie, header).
	// Default 65,537; see hashing.Config.TableSize.
	TableSize int
}

// DefaultConfig returns the default affinity: none, with the defaults of the
// generated-cookie mode filled in for when Mode is changed.
func DefaultConfig() Config {
	return Config{
		Mode:       ModeNone,
		CookieName: "SPILLWAY_AFFINITY",
		CookieTTL:  time.Hour, // a browsing session; Google Cloud's default is a session cookie
		TableSize:  hashing.DefaultTableSize,
	}
}

// Validate returns every problem with c, each naming its field, joined with
// errors.Join; or nil.
func (c Config) Validate() error {
	var errs []error
	if !slices.Contains(Modes(), c.Mode) {
		names := make([]string, 0, len(Modes()))
		for _, m := range Modes() {
			names = append(names, string(m))
		}
		errs = append(errs, fmt.Errorf("affinity.mode: unknown mode %q, want one of %s", c.Mode, strings.Join(names, ", ")))
	}
	switch c.Mode {
	case ModeGeneratedCookie:
		if !isToken(c.CookieName) {
			errs = append(errs, fmt.Errorf("affinity.cookie_name: must be a non-empty token, got %q", c.CookieName))
		}
		if c.CookieTTL < time.Second {
			errs = append(errs, fmt.Errorf("affinity.cookie_ttl: must be at least 1s, got %v", c.CookieTTL))
		}
	case ModeHTTPCookie:
		if !isToken(c.HTTPCookie) {
			errs = append(errs, fmt.Errorf("affinity.http_cookie: must be a non-empty token, got %q", c.HTTPCookie))
		}
	case ModeHeader:
		if !isToken(c.HeaderName) {
			errs = append(errs, fmt.Errorf("affinity.header_name: must be a non-empty token, got %q", c.HeaderName))
		}
	}
	if c.keyBased() {
		// The backend count is checked by New; 0 passes here.
		if err := (hashing.Config{TableSize: c.TableSize}).Validate(0); err != nil {
			errs = append(errs, fmt.Errorf("affinity.%w", err))
		}
	}
	return errors.Join(errs...)
}

// keyBased reports whether the mode maps a request key through a Maglev
// table.
func (c Config) keyBased() bool {
	switch c.Mode {
	case ModeClientIP, ModeClientIPProto, ModeClientIPPortProto, ModeHTTPCookie, ModeHeader:
		return true
	}
	return false
}

// isToken reports whether s is a non-empty token (RFC 9110 §5.6.2, which
// RFC 6265 uses for cookie names).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// Request is what affinity looks at in a request. The caller fills in what
// it has; missing parts make the request key-less and send it to the
// fallback. It is passed by value and not retained.
type Request struct {
	// ClientIP and ClientPort are the client's address (for a proxied
	// request, the address the gfe trusts as the client's). A zero
	// ClientIP means unknown.
	ClientIP   netip.Addr
	ClientPort uint16
	// DestIP and DestPort are the address the client connected to (the
	// gfe's listener or VIP). A zero DestIP hashes as "::".
	DestIP   netip.Addr
	DestPort uint16
	// Protocol is the IANA protocol number of the client connection: 6 for
	// TCP (HTTP/1.1, h2), 17 for UDP (HTTP/3).
	Protocol uint8
	// Cookie is the value of the cookie named by Config.CookieName
	// (ModeGeneratedCookie) or Config.HTTPCookie (ModeHTTPCookie), "" if
	// absent. Config.RequestCookie says which.
	Cookie string
	// Header is the value of the header Config.HeaderName (ModeHeader), ""
	// if absent.
	Header string
}

// RequestCookie returns the name of the cookie whose value the caller must
// put in Request.Cookie, or "" if the mode reads no cookie.
func (c Config) RequestCookie() string {
	switch c.Mode {
	case ModeGeneratedCookie:
		return c.CookieName
	case ModeHTTPCookie:
		return c.HTTPCookie
	}
	return ""
}

// Selector picks a backend for a request that affinity does not place:
// it has no key, or its pinned backend is unavailable. This interface is
// owned by this package; implement it with the service's load-balancing
// policy (waterfall, round robin, least request). Select is called
// concurrently from many goroutines and should not block: Pick blocks for
// as long as Select does. It should choose among the backends given to New
// and only available ones; an error is returned to Pick's caller wrapped.
type Selector interface {
	Select(req Request) (backend string, err error)
}

// SelectorFunc adapts a function to Selector.
type SelectorFunc func(req Request) (string, error)

// Select returns f(req).
func (f SelectorFunc) Select(req Request) (string, error) { return f(req) }

// Options holds the dependencies of a Picker.
type Options struct {
	// Available reports whether a backend can take a request now (in
	// Caddy's terms Healthy() && !Full()). It is the single place where
	// availability is decided: a pinned backend for which it reports
	// false is passed over for the fallback. It is called concurrently
	// and must not block. Nil means every backend given to New is
	// available.
	Available func(backend string) bool
	// Keyring signs and verifies generated cookies. Required in
	// ModeGeneratedCookie, ignored in other modes.
	Keyring *Keyring
}

// Result is the outcome of Picker.Pick.
type Result struct {
	// Backend is the chosen backend's name.
	Backend string
	// Pinned is true when affinity chose Backend (the request's key or
	// cookie maps to an available backend), false when the fallback did.
	Pinned bool
	// SetCookie is true when the caller must send the generated cookie
	// back (Set-Cookie: <Config.CookieName>=<Cookie>; Expires=<Expires>;
	// Path=/; HttpOnly; and Secure on TLS listeners): the request had no
	// valid cookie, its backend was unavailable, its cookie was signed by
	// an old key, or it is near its expiry. Only in ModeGeneratedCookie.
	SetCookie bool
	// Cookie is the new cookie value when SetCookie is true.
	Cookie string
	// Expires is the new cookie's expiry when SetCookie is true.
	Expires time.Time
}

// Picker applies a backend service's session affinity. It is built for one
// set of healthy backends and is immutable after New: it is safe for
// concurrent use, and Pick takes no lock. When the healthy set, the config or
// the keys change, build a new Picker and swap it in (atomic.Pointer).
//
// After Pick returns without error, Result.Backend is:
//   - in ModeNone, the fallback's choice;
//   - in the key-based modes, the backend the Maglev table assigns to the
//     request's key if the request has a key and that backend is available,
//     else the fallback's choice;
//   - in ModeGeneratedCookie, the backend named by the request's cookie if
//     the cookie verifies, has not expired, and names an available backend
//     of this Picker, else the fallback's choice, with a cookie to issue.
type Picker struct {
	// Immutable after New.
	cfg       Config
	backends  []string
	table     *hashing.Maglev // key-based modes only
	ids       map[uint64]int  // BackendID → index into backends; generated cookie only
	available func(string) bool
	keyring   *Keyring
	fallback  Selector
}

// New returns a Picker applying cfg over backends, the backend service's
// healthy backends identified by unique names, with fallback for the
// requests that affinity does not place. It validates cfg.
func New(cfg Config, backends []string, fallback Selector, opts Options) (*Picker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if fallback == nil {
		return nil, errors.New("affinity: a fallback selector is required")
	}
	p := &Picker{
		cfg:       cfg,
		backends:  slices.Clone(backends),
		available: opts.Available,
		keyring:   opts.Keyring,
		fallback:  fallback,
	}
	switch {
	case cfg.keyBased():
		t, err := hashing.NewMaglev(hashing.Config{TableSize: cfg.TableSize}, backends)
		if err != nil {
			return nil, fmt.Errorf("affinity: %w", err)
		}
		p.table = t
	case cfg.Mode == ModeGeneratedCookie:
		if opts.Keyring == nil {
			return nil, errors.New("affinity: mode generated_cookie requires a keyring")
		}
		p.ids = make(map[uint64]int, len(backends))
		for i, b := range backends {
			id := BackendID(b)
			if j, dup := p.ids[id]; dup {
				// Equal names, or (odds ~n²/2⁶⁵) a 64-bit collision.
				return nil, fmt.Errorf("affinity: backends %d (%q) and %d (%q) have the same cookie id", j, backends[j], i, b)
			}
			p.ids[id] = i
		}
	}
	return p, nil
}

// Config returns the configuration the Picker was built with.
func (p *Picker) Config() Config { return p.cfg }

// Pick chooses the backend for req at time now (now is used only by the
// generated-cookie mode, to check and set expiry). See Picker for the
// guarantees. Pick does not block unless the fallback or Available does;
// in the key-based modes it allocates nothing of its own.
func (p *Picker) Pick(req Request, now time.Time) (Result, error) {
	switch {
	case p.cfg.Mode == ModeGeneratedCookie:
		return p.pickCookie(req, now)
	case p.table != nil:
		if key, ok := p.key(req); ok {
			if b, ok := p.table.PickName(key); ok && p.isAvailable(b) {
				return Result{Backend: b, Pinned: true}, nil
			}
		}
	}
	b, err := p.fallbackSelect(req)
	return Result{Backend: b}, err
}

// key returns the request's affinity key in a key-based mode, or false if
// the request lacks the part the mode hashes.
func (p *Picker) key(req Request) (uint64, bool) {
	switch p.cfg.Mode {
	case ModeClientIP:
		return hashing.Key2(req.ClientIP, req.DestIP), req.ClientIP.IsValid()
	case ModeClientIPProto:
		return hashing.Key3(req.ClientIP, req.DestIP, req.Protocol), req.ClientIP.IsValid()
	case ModeClientIPPortProto:
		return hashing.Key5(req.ClientIP, req.DestIP, req.Protocol, req.ClientPort, req.DestPort), req.ClientIP.IsValid()
	case ModeHTTPCookie:
		return hashing.String(req.Cookie), req.Cookie != ""
	case ModeHeader:
		return hashing.String(req.Header), req.Header != ""
	}
	return 0, false
}

// pickCookie is Pick in ModeGeneratedCookie. A cookie that does not parse,
// verify or is expired is treated exactly as a missing cookie.
func (p *Picker) pickCookie(req Request, now time.Time) (Result, error) {
	if req.Cookie != "" {
		if c, key, err := p.keyring.ParseCookie(req.Cookie, now); err == nil {
			if i, ok := p.ids[c.Backend]; ok && p.isAvailable(p.backends[i]) {
				res := Result{Backend: p.backends[i], Pinned: true}
				if key != 0 || c.Expires.Sub(now) < p.cfg.CookieTTL/2 {
					res.issue(p.keyring, c.Backend, now, p.cfg.CookieTTL)
				}
				return res, nil
			}
		}
	}
	b, err := p.fallbackSelect(req)
	if err != nil {
		return Result{}, err
	}
	res := Result{Backend: b}
	res.issue(p.keyring, BackendID(b), now, p.cfg.CookieTTL)
	return res, nil
}

// issue sets r's cookie fields to a fresh cookie for backend id.
func (r *Result) issue(kr *Keyring, id uint64, now time.Time, ttl time.Duration) {
	exp := now.Add(ttl).Truncate(time.Second)
	r.SetCookie = true
	r.Cookie = kr.Encode(Cookie{Backend: id, Expires: exp})
	r.Expires = exp
}

func (p *Picker) isAvailable(b string) bool {
	return p.available == nil || p.available(b)
}

func (p *Picker) fallbackSelect(req Request) (string, error) {
	b, err := p.fallback.Select(req)
	if err != nil {
		return "", fmt.Errorf("affinity: fallback: %w", err)
	}
	return b, nil
}
