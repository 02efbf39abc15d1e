package config

import (
	"fmt"
	"slices"
	"strings"
)

// The checks of routes and listeners, which refer to services by name.

// badPathRune reports characters not allowed in a path or path prefix.
func badPathRune(r rune) bool {
	return r <= ' ' || r == 0x7f || r == '?' || r == '#'
}

// unmatchablePrefix says why a path prefix can match no canonical request
// path (lb/reqpath: slashes are merged, backslashes refused, and segment
// parameters left out of matching), or "" when it can.
func unmatchablePrefix(p string) string {
	switch {
	case strings.Contains(p, `\`):
		return "it holds a backslash, which the gfe refuses in request paths"
	case strings.Contains(p, "//"):
		return `it holds "//", which the gfe merges into "/" in request paths`
	case strings.Contains(p, ";"):
		return `it holds ";", which starts segment parameters, left out of matching`
	}
	return ""
}

// routes checks every route.
func (v *validator) routes() {
	if len(v.c.Routes) == 0 {
		v.p.add("routes", "at least one route is required")
	}
	seen := map[[2]string]string{}
	for i, r := range v.c.Routes {
		rp := fmt.Sprintf("routes[%d]", i)
		hostOK := true
		if err := checkRouteHost(r.Host); err != nil {
			v.p.add(rp+".host", err.Error())
			hostOK = false
		}
		prefixOK := strings.HasPrefix(r.PathPrefix, "/") && !strings.ContainsFunc(r.PathPrefix, badPathRune)
		if !prefixOK {
			v.p.add(rp+".path_prefix", fmt.Sprintf("must start with \"/\" and contain no spaces, control characters, '?' or '#', got %q", r.PathPrefix))
		} else if why := unmatchablePrefix(r.PathPrefix); why != "" {
			v.p.add(rp+".path_prefix", fmt.Sprintf("can match no request path: %s, got %q", why, r.PathPrefix))
			prefixOK = false
		}
		switch _, known := v.serviceNames[r.Service]; {
		case r.Service == "":
			v.p.add(rp+".service", "required")
		case !known:
			v.p.add(rp+".service", fmt.Sprintf("unknown service %q", r.Service))
		}
		if r.Timeout <= 0 {
			v.p.add(rp+".timeout", fmt.Sprintf("must be > 0, got %v", r.Timeout))
		}
		v.atLeast(rp+".timeout", r.Timeout, minRouteTimeout, "every request would time out against its backend")
		v.atMost(rp+".timeout", r.Timeout, maxLongTimeout)
		if r.Retries < 0 || r.Retries > maxRetries {
			v.p.add(rp+".retries", fmt.Sprintf("must be in 0..%d (0 = never retry), got %d", maxRetries, r.Retries))
		}
		if r.PerTryTimeout < 0 || r.Timeout > 0 && r.PerTryTimeout > r.Timeout {
			v.p.add(rp+".per_try_timeout", fmt.Sprintf("must be in 0..timeout (%v; 0 = off), got %v", r.Timeout, r.PerTryTimeout))
		} else {
			v.atLeast(rp+".per_try_timeout", r.PerTryTimeout, minRouteTimeout, "0 = off; every attempt would time out against its backend")
		}
		if hostOK && prefixOK {
			// Prefixes match case-insensitively: "/API/" and "/api/" are
			// one route.
			key := [2]string{strings.ToLower(r.Host), strings.ToLower(r.PathPrefix)}
			if first, dup := seen[key]; dup {
				v.p.add(rp, fmt.Sprintf("duplicate route for host %q and path_prefix %q (first at %s)", r.Host, r.PathPrefix, first))
			} else {
				seen[key] = rp
			}
		}
	}
}

// checkRouteHost checks a route host pattern: "*", "*.domain", a DNS name or
// an IP address, without a port.
func checkRouteHost(h string) error {
	switch {
	case h == "":
		return fmt.Errorf("required (use \"*\" for any host)")
	case h == "*":
		return nil
	case strings.HasPrefix(h, "*."):
		if !isDNSName(h[2:]) || strings.HasSuffix(h, ".") {
			return fmt.Errorf("invalid wildcard host %q: want \"*.\" followed by a DNS name", h)
		}
		return nil
	case strings.Contains(h, "*"):
		return fmt.Errorf("invalid host %q: a wildcard is only allowed as a leading \"*.\" or as \"*\"", h)
	case isIP(h):
		return nil
	case strings.HasSuffix(h, "."):
		return fmt.Errorf("invalid host %q: drop the trailing dot", h)
	case !isDNSName(h):
		return fmt.Errorf("invalid host %q: want a DNS name or IP address, without a port", h)
	}
	return nil
}

// maxRetries is the most retries a route may ask for: beyond a few, retries
// multiply the load on a failing fleet more than they help.
const maxRetries = 5

// listeners checks every listener. It runs after services, whose names and
// modes tcp listeners refer to.
func (v *validator) listeners() {
	names := map[string]string{}
	ports := map[int]string{}
	for i := range v.c.Listeners {
		lp := fmt.Sprintf("listeners[%d]", i)
		l := &v.c.Listeners[i]
		v.name(lp+".name", "listener", l.Name, names)
		switch first, dup := ports[l.Port]; {
		case l.Port < 1 || l.Port > 65535:
			v.p.add(lp+".port", fmt.Sprintf("required, in 1..65535; got %d", l.Port))
		case dup:
			v.p.add(lp+".port", fmt.Sprintf("duplicate port %d (first at %s)", l.Port, first))
		default:
			ports[l.Port] = lp
		}
		switch {
		case l.Protocol == "":
			v.p.add(lp+".protocol", "required: one of http, https, tcp")
		case !slices.Contains(ListenerProtocols(), l.Protocol):
			v.p.add(lp+".protocol", oneOf(ListenerProtocols(), l.Protocol))
		case l.Protocol == ListenerTCP:
			v.tcpListener(lp, l)
		default:
			v.httpListener(lp, l)
		}
	}
}

// tcpListener checks the fields of a tcp listener.
func (v *validator) tcpListener(lp string, l *Listener) {
	switch _, known := v.serviceNames[l.Service]; {
	case l.Service == "":
		v.p.add(lp+".service", "required for protocol tcp")
	case !known:
		v.p.add(lp+".service", fmt.Sprintf("unknown service %q", l.Service))
	default:
		if s := v.serviceByName(l.Service); s != nil && s.BalancingMode != ModeConnection {
			v.p.add(lp+".service", fmt.Sprintf("service %q has balancing_mode %s; a tcp listener needs a CONNECTION service", l.Service, s.BalancingMode))
		}
		if s := v.serviceByName(l.Service); s != nil && s.Policy == PolicyPrequal {
			v.p.add(lp+".service", fmt.Sprintf("service %q has policy prequal, whose probes are HTTP requests; a tcp listener's service cannot use it", l.Service))
		}
	}
	if len(l.Certificates) > 0 {
		v.p.add(lp+".certificates", "only valid with protocol https; protocol is tcp")
	}
	if l.IdleTimeout <= 0 {
		v.p.add(lp+".idle_timeout", fmt.Sprintf("must be > 0, got %v", l.IdleTimeout))
	}
	v.atMost(lp+".idle_timeout", l.IdleTimeout, maxLongTimeout)
	if l.FirstByteTimeout <= 0 {
		v.p.add(lp+".first_byte_timeout", fmt.Sprintf("must be > 0, got %v", l.FirstByteTimeout))
	}
	v.atMost(lp+".first_byte_timeout", l.FirstByteTimeout, maxShortTimeout)
	if l.MaxConnections < 1 || l.MaxConnections > maxListenerConnections {
		v.p.add(lp+".max_connections", fmt.Sprintf("must be in 1..%d, got %d", maxListenerConnections, l.MaxConnections))
	}
	v.maxConnectionsPerClient(lp, l)
	httpOnly := func(key string, set bool) {
		if set {
			v.p.add(lp+"."+key, "only valid with protocol http or https; protocol is tcp")
		}
	}
	httpOnly("read_header_timeout", l.ReadHeaderTimeout != 0)
	httpOnly("max_header_bytes", l.MaxHeaderBytes != 0)
	httpOnly("max_request_body_bytes", l.MaxRequestBodyBytes != 0)
	httpOnly("request_body_timeout", l.RequestBodyTimeout != 0)
	httpOnly("max_connection_age", l.MaxConnectionAge != 0)
	httpOnly("fast_path", l.FastPath)
}

// httpListener checks the fields of an http or https listener.
func (v *validator) httpListener(lp string, l *Listener) {
	if l.Service != "" {
		v.p.add(lp+".service", fmt.Sprintf("only valid with protocol tcp; protocol %s uses routes", l.Protocol))
	}
	switch {
	case l.Protocol == ListenerHTTPS && len(l.Certificates) == 0:
		v.p.add(lp+".certificates", "at least one certificate is required for protocol https")
	case l.Protocol != ListenerHTTPS && len(l.Certificates) > 0:
		v.p.add(lp+".certificates", fmt.Sprintf("only valid with protocol https; protocol is %s", l.Protocol))
	}
	if l.Protocol == ListenerHTTPS {
		for ci, c := range l.Certificates {
			cp := fmt.Sprintf("%s.certificates[%d]", lp, ci)
			if c.CertFile == "" {
				v.p.add(cp+".cert_file", "required")
			}
			if c.KeyFile == "" {
				v.p.add(cp+".key_file", "required")
			}
		}
	}
	if l.ReadHeaderTimeout <= 0 {
		v.p.add(lp+".read_header_timeout", fmt.Sprintf("must be > 0, got %v", l.ReadHeaderTimeout))
	}
	v.atMost(lp+".read_header_timeout", l.ReadHeaderTimeout, maxShortTimeout)
	if l.IdleTimeout <= 0 {
		v.p.add(lp+".idle_timeout", fmt.Sprintf("must be > 0, got %v", l.IdleTimeout))
	}
	v.atMost(lp+".idle_timeout", l.IdleTimeout, maxLongTimeout)
	if l.MaxHeaderBytes < minMaxHeaderBytes || l.MaxHeaderBytes > maxMaxHeaderBytes {
		v.p.add(lp+".max_header_bytes", fmt.Sprintf("must be in %d..%d, got %d", minMaxHeaderBytes, maxMaxHeaderBytes, l.MaxHeaderBytes))
	}
	if l.MaxRequestBodyBytes < 0 || l.MaxRequestBodyBytes > maxRequestBody {
		v.p.add(lp+".max_request_body_bytes", fmt.Sprintf("must be in 0..%d (0 = unlimited), got %d", int64(maxRequestBody), l.MaxRequestBodyBytes))
	}
	if l.RequestBodyTimeout < 0 || l.RequestBodyTimeout > maxLongTimeout {
		v.p.add(lp+".request_body_timeout", fmt.Sprintf("must be in 0..%v (0 = no limit), got %v", maxLongTimeout, l.RequestBodyTimeout))
	}
	if l.MaxConnectionAge < 0 || l.MaxConnectionAge > maxLongTimeout {
		v.p.add(lp+".max_connection_age", fmt.Sprintf("must be in 0..%v (0 = never), got %v", maxLongTimeout, l.MaxConnectionAge))
	}
	tcpOnly := func(key string, set bool) {
		if set {
			v.p.add(lp+"."+key, fmt.Sprintf("only valid with protocol tcp; protocol is %s", l.Protocol))
		}
	}
	tcpOnly("first_byte_timeout", l.FirstByteTimeout != 0)
	tcpOnly("max_connections", l.MaxConnections != 0)
	v.maxConnectionsPerClient(lp, l)
}

// maxConnectionsPerClient checks a listener's max_connections_per_client,
// which every protocol has.
func (v *validator) maxConnectionsPerClient(lp string, l *Listener) {
	if l.MaxConnectionsPerClient < 1 || l.MaxConnectionsPerClient > maxListenerConnections {
		v.p.add(lp+".max_connections_per_client", fmt.Sprintf("must be in 1..%d, got %d", maxListenerConnections, l.MaxConnectionsPerClient))
	}
}

// serviceByName returns the first service named name, or nil.
func (v *validator) serviceByName(name string) *Service {
	for i := range v.c.Services {
		if v.c.Services[i].Name == name {
			return &v.c.Services[i]
		}
	}
	return nil
}
