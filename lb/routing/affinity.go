package routing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"net/textproto"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/affinity"
)

// Session affinity (docs/design.md §4, lb/affinity).
//
// The Builder gives every service whose session_affinity is not none an
// affinity.Picker over the service's scope — the healthy backends this site
// may use: for a planned policy those of the groups in the site's plan row,
// so that affinity never pins a client to a region the plan does not send it
// to; for a baseline the pool — with the service's policy pick as the
// fallback Selector and "not ejected by outlier detection and not full" as
// Options.Available. A client's pinned backend is thus kept while it is
// healthy, in this site's plan and has room; otherwise the policy picks and,
// for generated cookies, the client gets a new cookie naming the new backend.
//
// Generated cookies are HMAC-SHA256 signed with a key every gfe derives from
// the service's session_affinity.cookie_secret (DeriveCookieKey), so a
// cookie issued by one gfe is honoured by all; previous_cookie_secret keeps
// verifying during a rotation. A session cookie (cookie_ttl 0) is signed
// with an expiry sessionCookieTTL away, i.e. it does not expire.
//
// The fallback Selector acquires its backend's slot, as every policy pick
// does; so after Pick, a result that is not Pinned holds a slot and a Pinned
// one does not (PickAffinity acquires it, and picks by policy if the pinned
// backend filled up in between).

// sessionCookieTTL is the signed lifetime of a generated cookie when
// cookie_ttl is 0 (a browser-session cookie): long enough never to expire.
const sessionCookieTTL = 100 * 365 * 24 * time.Hour

// cookieKeyLabel separates keys derived from a cookie secret from any other
// use of the same secret.
const cookieKeyLabel = "spillway affinity cookie key v1\x00"

// DeriveCookieKey returns the HMAC-SHA256 key of service's generated
// cookies derived from secret: HMAC-SHA256(secret, cookieKeyLabel ‖
// service). Every gfe derives the same key from the same config; services
// get different keys.
func DeriveCookieKey(secret, service string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(cookieKeyLabel))
	m.Write([]byte(service))
	return m.Sum(nil)
}

// Affinity is a service's session affinity in one table. Immutable after
// the table is built; safe for concurrent use.
type Affinity struct {
	picker *affinity.Picker
	typ    config.AffinityType
	// cookie is the request cookie affinity reads ("" if none).
	cookie string
	// header is the canonical name of the header affinity reads (header
	// type).
	header string
	// ttl is the lifetime of the cookies the gfe sets; 0 = session cookie.
	ttl time.Duration
	// keyring signs generated cookies (generated_cookie only).
	keyring *affinity.Keyring
}

// Type returns the affinity's type.
func (a *Affinity) Type() config.AffinityType { return a.typ }

// Cookie returns the name of the request cookie affinity reads, "" if none.
func (a *Affinity) Cookie() string { return a.cookie }

// Header returns the canonical name of the request header affinity reads
// (header type), "" if none.
func (a *Affinity) Header() string { return a.header }

// TTL returns the lifetime of the cookies the gfe sets; 0 means a session
// cookie.
func (a *Affinity) TTL() time.Duration { return a.ttl }

// Keyring returns the keyring of generated cookies (nil for other types).
func (a *Affinity) Keyring() *affinity.Keyring { return a.keyring }

// affinityConfig translates a service's session_affinity to lb/affinity's
// Config.
func affinityConfig(sa config.SessionAffinity) affinity.Config {
	c := affinity.DefaultConfig()
	c.Mode = affinity.Mode(sa.Type)
	switch sa.Type {
	case config.AffinityGeneratedCookie:
		c.CookieName = sa.CookieName
		c.CookieTTL = sa.CookieTTL
		if c.CookieTTL == 0 {
			c.CookieTTL = sessionCookieTTL
		}
	case config.AffinityHTTPCookie:
		c.HTTPCookie = sa.CookieName
	case config.AffinityHeader:
		c.HeaderName = sa.HeaderName
	}
	return c
}

// newAffinity returns the session affinity of service sc over backends
// (the names of its scope), with fallback for the requests affinity does
// not place and available deciding whether a pinned backend can take a
// request. It returns nil, nil for type none.
func newAffinity(sc *config.Service, backends []string, fallback affinity.Selector, available func(string) bool) (*Affinity, error) {
	sa := sc.SessionAffinity
	if sa.Type == config.AffinityNone || sa.Type == "" {
		return nil, nil
	}
	if len(backends) == 0 {
		return nil, errors.New("no backend in scope")
	}
	cfg := affinityConfig(sa)
	a := &Affinity{typ: sa.Type, cookie: cfg.RequestCookie(), ttl: sa.CookieTTL}
	if sa.Type == config.AffinityHeader {
		a.header = textproto.CanonicalMIMEHeaderKey(sa.HeaderName)
	}
	opts := affinity.Options{Available: available}
	if sa.Type == config.AffinityGeneratedCookie {
		keys := [][]byte{DeriveCookieKey(sa.CookieSecret, sc.Name)}
		if sa.PreviousCookieSecret != "" {
			keys = append(keys, DeriveCookieKey(sa.PreviousCookieSecret, sc.Name))
		}
		kr, err := affinity.NewKeyring(keys...)
		if err != nil {
			return nil, fmt.Errorf("cookie keyring: %w", err)
		}
		a.keyring = kr
		opts.Keyring = kr
	}
	p, err := affinity.New(cfg, backends, fallback, opts)
	if err != nil {
		return nil, err
	}
	a.picker = p
	return a, nil
}

// flowOfAffinity returns the flow a hashing policy hashes for req.
func flowOfAffinity(req affinity.Request) Flow {
	return Flow{
		Src: netip.AddrPortFrom(req.ClientIP, req.ClientPort),
		Dst: netip.AddrPortFrom(req.DestIP, req.DestPort),
	}
}

// NewSessionID returns a random value for an http_cookie the gfe issues to
// a client that has none: 128 bits from rnd, in hex.
func NewSessionID(rnd func() uint64) string {
	var b [16]byte
	for i, v := range [2]uint64{rnd(), rnd()} {
		for j := range 8 {
			b[8*i+j] = byte(v >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:])
}

// Cookie is an affinity cookie the proxy sends with the response.
type Cookie struct {
	// Value is the cookie's value ("" for none). For a generated cookie it
	// names ForBackend; if a retry moved the request elsewhere, CookieFor
	// signs a new value for the backend that answered.
	Value      string
	Expires    time.Time // generated cookies: the signed expiry
	ForBackend string
}

// CookieFor returns the cookie to set when the response comes from backend
// addr, for the cookie c decided at pick time, at now.
func (a *Affinity) CookieFor(c *Cookie, addr string, now time.Time) (value string, expires time.Time) {
	if a.typ != config.AffinityGeneratedCookie || c.ForBackend == addr {
		return c.Value, c.Expires
	}
	exp := now.Add(a.picker.Config().CookieTTL).Truncate(time.Second)
	return a.keyring.Encode(affinity.Cookie{Backend: affinity.BackendID(addr), Expires: exp}), exp
}

// PickAffinity chooses a backend for req by the service's session affinity
// at now, falling back to the policy. The returned pick holds a slot. When
// the client must be sent a cookie, ck.Value is set. It allocates only to
// issue a cookie. The service must have an Affinity. A drained service
// (Drained) fails with ErrDrained, pinned clients included.
func (s *Service) PickAffinity(req affinity.Request, now time.Time, rnd func() uint64) (pk Pick, ck Cookie, err error) {
	if s.drained {
		// A pinned client of a drained service gets no backend either.
		return Pick{}, ck, ErrDrained
	}
	a := s.aff
	issueHTTPCookie := false
	if a.typ == config.AffinityHTTPCookie && req.Cookie == "" {
		// The gfe issues the application cookie when the client has none,
		// and hashes the new value right away so that this request lands
		// where the client's next ones will.
		req.Cookie = NewSessionID(rnd)
		issueHTTPCookie = true
	}
	res, err := a.picker.Pick(req, now)
	if err != nil {
		var perr pickError
		if errors.As(err, &perr) {
			return Pick{}, ck, perr.err
		}
		return Pick{}, ck, ErrNoBackend
	}
	i, ok := s.byAddr[res.Backend]
	if !ok {
		// Unreachable: the picker's backends and the fallback's are the
		// scope. A fallback pick's slot would leak here, so fail loudly in
		// tests rather than guess.
		return Pick{}, ck, fmt.Errorf("gfe: affinity chose %q outside the service's scope", res.Backend)
	}
	m := &s.scope[i]
	if res.Pinned {
		if !m.B.TryAcquire() {
			// The pinned backend filled up since Available said it had
			// room: pick by policy this time, and leave the client's
			// cookie as it is.
			pk, err := s.PickAt(rnd(), flowOfAffinity(req), now)
			return pk, Cookie{}, err
		}
		pk = pickOf(m, ReasonAffinity)
	} else {
		pk = pickOf(m, m.reason) // the fallback's pick holds the slot
	}
	switch {
	case res.SetCookie:
		ck = Cookie{Value: res.Cookie, Expires: res.Expires, ForBackend: res.Backend}
	case issueHTTPCookie:
		ck = Cookie{Value: req.Cookie}
		if a.ttl > 0 {
			ck.Expires = now.Add(a.ttl).Truncate(time.Second)
		}
	}
	return pk, ck, nil
}

// pickError carries a policy pick's error through affinity.Picker, which
// wraps the fallback's errors, so that PickAffinity can tell ErrAllBusy
// from ErrNoBackend.
type pickError struct{ err error }

func (e pickError) Error() string { return e.err.Error() }

// affinityFallback returns the fallback Selector of s: a policy pick (which
// takes the backend's slot) at the clock's time.
func (s *Service) affinityFallback(rnd func() uint64) affinity.Selector {
	return affinity.SelectorFunc(func(req affinity.Request) (string, error) {
		pk, err := s.PickAt(rnd(), flowOfAffinity(req), s.now())
		if err != nil {
			return "", pickError{err}
		}
		return pk.Backend.Addr(), nil
	})
}

// affinityAvailable returns the Available func of s: a backend can take a
// pinned request if it is in the scope, not full and not ejected, and not
// demoted while the scope has an active member (finish builds the
// affinity over the active members then).
func (s *Service) affinityAvailable() func(string) bool {
	return func(addr string) bool {
		i, ok := s.byAddr[addr]
		if !ok {
			return false
		}
		m := &s.scope[i]
		if m.Demoted && s.scopeActive {
			return false
		}
		return !m.B.Full() && (m.Host == nil || !m.Host.Ejected(s.now()))
	}
}
