package xdsexport

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseGrant: the grant parser never panics; what it accepts names an
// identity and sites or any site, round-trips through String, and gives
// keys that no other View shares.
func FuzzParseGrant(f *testing.F) {
	for _, s := range []string{"a=nyc", "*.x=nyc+lon/web", "spiffe://d/p=*", "=nyc", "a", "a=", "a=nyc/", "a=b=c", "a=n y", "CN=x=nyc"} {
		f.Add(s, "lon")
	}
	f.Fuzz(func(t *testing.T, s, site string) {
		g, err := ParseGrant(s)
		if err != nil {
			return
		}
		if g.Identity == "" || (len(g.Sites) == 0) != g.AnySite {
			t.Fatalf("ParseGrant(%q) = %+v", s, g)
		}
		back, err := ParseGrant(g.String())
		if err != nil || back.String() != g.String() {
			t.Fatalf("ParseGrant(%q).String() = %q, which parses as %+v, %v", s, g.String(), back, err)
		}
		// Keys of Views of every service start "grpc/": a scoped one never does.
		scoped := View{Kind: KindGRPC, Site: site, Services: g.Services}
		if len(g.Services) > 0 && strings.HasPrefix(scoped.Key(), Key(KindGRPC, "")) {
			t.Fatalf("view %+v has key %q, the form of a view of every service", scoped, scoped.Key())
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
