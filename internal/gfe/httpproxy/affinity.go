package httpproxy

import (
	"net/http"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/routing"
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
