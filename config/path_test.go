package config

import (
	"strings"
	"testing"
)

// pathConfig has a catch-all route to web, a route for /api/ to api, and
// a charge on /api/ of service web.
const pathConfig = `
regions: [{name: r1, zones: [{name: z1, groups: [{name: g1, instances: [{address: "127.0.0.1:9001"}]}]}]}]
services:
  - {name: web, backends: [{group: g1, max_rate_per_instance: 10}]}
  - {name: api, backends: [{group: g1, max_rate_per_instance: 10}]}
routes:
  - {service: web}
  - {path_prefix: /api/, service: api}
quota:
  metrics: [{name: calls, default_limit: 60}]
  charges: [{service: web, path_prefix: /api/, metric: calls}]
  consumers: [{api_key: acme-key-0001, project: acme}]
`

// TestPathPrefixMatching: routes and quota charges match a request's
// decoded canonical path by one rule (lb/reqpath.HasPrefix): the case and
// the segment parameters a backend may ignore cannot move a request to
// another route, or out of a charge.
func TestPathPrefixMatching(t *testing.T) {
	c, err := Parse([]byte(pathConfig), "path.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path    string
		route   string
		charged bool
	}{
		{"/api/x", "api", true},
		{"/API/x", "api", true},
		{"/Api/X", "api", true},
		{"/api;v=1/x", "api", true},
		{"/apix", "web", false},
		{"/other", "web", false},
	} {
		r, ok := c.Route("example.com", tt.path)
		if !ok || r.Service != tt.route {
			t.Errorf("Route(%q) = %v, %v; want service %s", tt.path, r, ok, tt.route)
		}
		if got := c.Quota.Charges[0].Matches("web", "GET", tt.path); got != tt.charged {
			t.Errorf("charge on /api/ matches %q: %v, want %v", tt.path, got, tt.charged)
		}
	}
}

// TestUnmatchablePrefixes: a path prefix no canonical path can match is a
// config error, and two prefixes that differ only in case are one route.
func TestUnmatchablePrefixes(t *testing.T) {
	for _, tt := range []struct {
		name, edit, want string
	}{
		{"backslash", `{path_prefix: '/api\x', service: api}`, `routes[1].path_prefix: can match no request path: it holds a backslash, which the gfe refuses in request paths, got "/api\\x"`},
		{"double slash", `{path_prefix: //api/, service: api}`, `routes[1].path_prefix: can match no request path: it holds "//", which the gfe merges into "/" in request paths, got "//api/"`},
		{"parameters", `{path_prefix: "/api;v=1/", service: api}`, `routes[1].path_prefix: can match no request path: it holds ";", which starts segment parameters, left out of matching, got "/api;v=1/"`},
		{"case", `{path_prefix: /api/, service: api}, {path_prefix: /API/, service: web}`, `routes[2]: duplicate route for host "*" and path_prefix "/API/" (first at routes[1])`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			y := strings.Replace(pathConfig, "  - {path_prefix: /api/, service: api}\n", "  - "+strings.ReplaceAll(tt.edit, "}, {", "}\n  - {")+"\n", 1)
			_, err := Parse([]byte(y), "path.yaml")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse: %v\nwant an error with %s", err, tt.want)
			}
		})
	}
	y := strings.Replace(pathConfig, "path_prefix: /api/, metric", "path_prefix: '//api/', metric", 1)
	if _, err := Parse([]byte(y), "path.yaml"); err == nil || !strings.Contains(err.Error(), `quota.charges[0].path_prefix: can match no request path: it holds "//"`) {
		t.Errorf("a charge on //api/: %v, want refused", err)
	}
}
