package xdsexport

import (
	"net"
	"strconv"
	"testing"
)

// FuzzKey: every cache key of a known kind round-trips through parseKey,
// and parseKey never accepts a key of another kind.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"", "nyc", "a/b", "envoy/"} {
		f.Add(true, s)
		f.Add(false, s)
	}
	f.Fuzz(func(t *testing.T, envoy bool, site string) {
		kind := KindGRPC
		if envoy {
			kind = KindEnvoy
		}
		k, s, ok := parseKey(Key(kind, site))
		if !ok || k != kind || s != site {
			t.Fatalf("parseKey(Key(%q, %q)) = %q, %q, %v", kind, site, k, s, ok)
		}
		if k, _, ok := parseKey(site); ok && k != KindGRPC && k != KindEnvoy {
			t.Fatalf("parseKey(%q) accepted kind %q", site, k)
		}
	})
}

// FuzzSplitHostPort: the Envoy listen address parser never panics, and
// what it accepts is a host and a port in 1..65535 that net.JoinHostPort
// puts back together as the input (with an empty host read as 0.0.0.0).
func FuzzSplitHostPort(f *testing.F) {
	for _, s := range []string{"0.0.0.0:10000", ":8080", "[::]:443", "host:0", "x", "a:b:c", "[::1]:65536"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, hp string) {
		host, port, err := splitHostPort(hp)
		if err != nil {
			return
		}
		if port < 1 || port > 65535 || host == "" {
			t.Fatalf("splitHostPort(%q) = %q, %d", hp, host, port)
		}
		h, p, err := net.SplitHostPort(hp)
		if err != nil || strconv.Itoa(int(port)) != trimZeros(p) || (h != host && !(h == "" && host == "0.0.0.0")) {
			t.Fatalf("splitHostPort(%q) = %q, %d; net.SplitHostPort = %q, %q, %v", hp, host, port, h, p, err)
		}
	})
}

// trimZeros drops leading zeros ("0080" is port 80 to ParseUint).
func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}
