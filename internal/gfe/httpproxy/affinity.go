package httpproxy

import (
	"net/http"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/lb/routing"
)

// Session affinity on the request path: reading the cookie or header a
// service's affinity keys on (affinityRequest, in proxy.go) and writing the
// cookie it asks for. The choice itself is routing.Service.PickAffinity.

// cookieValue returns the value of the first cookie called name in the
// Cookie headers of h, without its optional double quotes, or "" if there
// is none. Unlike http.Request.Cookie it does not allocate.
func cookieValue(h http.Header, name string) string {
	for _, line := range h["Cookie"] {
		for line != "" {
			var part string
			part, line, _ = strings.Cut(line, ";")
			part = strings.TrimSpace(part)
			k, v, ok := strings.Cut(part, "=")
			if !ok || k != name {
				continue
			}
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v
		}
	}
	return ""
}

// stripCookie removes every cookie called name from the Cookie headers of
// h, keeping the other cookies in their order; a header left empty is
// dropped. It allocates only when h has such a cookie.
func stripCookie(h http.Header, name string) {
	lines := h["Cookie"]
	if !hasCookie(lines, name) {
		return
	}
	var out []string
	for _, line := range lines {
		var b strings.Builder
		for rest := line; rest != ""; {
			var part string
			part, rest, _ = strings.Cut(rest, ";")
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			if k, _, _ := strings.Cut(part, "="); k == name {
				continue
			}
			if b.Len() > 0 {
				b.WriteString("; ")
			}
			b.WriteString(part)
		}
		if b.Len() > 0 {
			out = append(out, b.String())
		}
	}
	if len(out) == 0 {
		delete(h, "Cookie")
		return
	}
	h["Cookie"] = out
}

// hasCookie reports whether a cookie called name (with any value, empty
// included) is in the Cookie header lines.
func hasCookie(lines []string, name string) bool {
	for _, line := range lines {
		for line != "" {
			var part string
			part, line, _ = strings.Cut(line, ";")
			if k, _, _ := strings.Cut(strings.TrimSpace(part), "="); k == name {
				return true
			}
		}
	}
	return false
}

// setCookie returns the Set-Cookie header value for value, expiring at
// expires (zero: a session cookie) under a's cookie name; secure adds the
// Secure attribute (TLS listeners).
func setCookie(a *routing.Affinity, value string, expires time.Time, secure bool) string {
	c := http.Cookie{Name: a.Cookie(), Value: value, Path: "/", HttpOnly: true, Secure: secure}
	if ttl := a.TTL(); ttl > 0 {
		c.Expires = expires
		c.MaxAge = int(ttl / time.Second)
	}
	return c.String()
}
