package config

import (
	"cmp"
	"slices"
	"strings"

	"github.com/spillway-lb/spillway/lb/reqpath"
)

// GroupRef is an instance group together with the zone and region that hold
// it. Its pointers point into the Config and share its read-only rule.
type GroupRef struct {
	Region *Region
	Zone   *Zone
	Group  *Group
}

// index holds the lookup tables of a loaded Config. Immutable after
// buildIndex.
type index struct {
	services  map[string]*Service
	listeners map[string]*Listener
	groups    map[string]GroupRef
	// groupList is every group in file order.
	groupList []GroupRef
	// Route buckets, each sorted by descending path prefix length:
	exact    map[string][]*Route // by lower-case host
	wildcard map[string][]*Route // by the suffix after "*.": "example.com"
	anyHost  []*Route            // host "*"
	// apiKeys maps each consumer's API key to its project (the first
	// consumer of a key wins), for QuotaProject on the request path.
	apiKeys map[string]string
}

// buildIndex builds the lookup tables of c. For an invalid c (duplicate
// names) the first entry of a name wins; it never fails.
func buildIndex(c *Config) *index {
	x := &index{
		services: make(map[string]*Service, len(c.Services)),
		groups:   map[string]GroupRef{},
		exact:    map[string][]*Route{},
		wildcard: map[string][]*Route{},
	}
	for ri := range c.Regions {
		r := &c.Regions[ri]
		for zi := range r.Zones {
			z := &r.Zones[zi]
			for gi := range z.Groups {
				ref := GroupRef{Region: r, Zone: z, Group: &z.Groups[gi]}
				if _, dup := x.groups[ref.Group.Name]; !dup {
					x.groups[ref.Group.Name] = ref
				}
				x.groupList = append(x.groupList, ref)
			}
		}
	}
	for i := range c.Services {
		s := &c.Services[i]
		if _, dup := x.services[s.Name]; !dup {
			x.services[s.Name] = s
		}
	}
	x.listeners = make(map[string]*Listener, len(c.Listeners))
	for i := range c.Listeners {
		l := &c.Listeners[i]
		if _, dup := x.listeners[l.Name]; !dup {
			x.listeners[l.Name] = l
		}
	}
	x.apiKeys = make(map[string]string, len(c.Quota.Consumers))
	for _, k := range c.Quota.Consumers {
		if _, dup := x.apiKeys[k.APIKey]; !dup && k.APIKey != "" {
			x.apiKeys[k.APIKey] = k.Project
		}
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		h := strings.ToLower(r.Host)
		switch {
		case h == "*":
			x.anyHost = append(x.anyHost, r)
		case strings.HasPrefix(h, "*."):
			x.wildcard[h[2:]] = append(x.wildcard[h[2:]], r)
		default:
			x.exact[h] = append(x.exact[h], r)
		}
	}
	byPrefix := func(a, b *Route) int { return cmp.Compare(len(b.PathPrefix), len(a.PathPrefix)) }
	slices.SortStableFunc(x.anyHost, byPrefix)
	for _, rs := range x.wildcard {
		slices.SortStableFunc(rs, byPrefix)
	}
	for _, rs := range x.exact {
		slices.SortStableFunc(rs, byPrefix)
	}
	return x
}

// lookup returns c's index, building a throwaway one for a Config that was
// not made by Load, Parse or New.
func (c *Config) lookup() *index {
	if c.idx != nil {
		return c.idx
	}
	return buildIndex(c)
}

// Source returns the file name c was loaded from (the name given to Load or
// Parse), or "" for a Config from New.
func (c *Config) Source() string { return c.source }

// Service returns the service named name.
func (c *Config) Service(name string) (*Service, bool) {
	s, ok := c.lookup().services[name]
	return s, ok
}

// Listener returns the listener named name.
func (c *Config) Listener(name string) (*Listener, bool) {
	l, ok := c.lookup().listeners[name]
	return l, ok
}

// Group returns the instance group named name with its zone and region.
func (c *Config) Group(name string) (GroupRef, bool) {
	g, ok := c.lookup().groups[name]
	return g, ok
}

// Groups returns every instance group with its zone and region, in file
// order. The slice is the caller's; the pointers in it are read-only.
func (c *Config) Groups() []GroupRef {
	return slices.Clone(c.lookup().groupList)
}

// Backend returns the backend of s that uses the group named group.
func (s *Service) Backend(group string) (*Backend, bool) {
	for i := range s.Backends {
		if s.Backends[i].Group == group {
			return &s.Backends[i], true
		}
	}
	return nil, false
}

// Route returns the route for a request to host and path, or false if none
// matches. host is the request's Host (or :authority, or TLS SNI) and may
// carry a port, which is ignored, as is case and a trailing dot.
//
// A route matches when its host pattern matches host and path starts with its
// path_prefix, by lb/reqpath's rule (ASCII case-insensitive, segment
// parameters left out); path is the request's decoded canonical path
// (reqpath.Path.Decoded). Among matching routes, Route picks by host first, then by path:
//
//  1. an exact host beats a wildcard, a longer wildcard suffix beats a shorter
//     one ("*.api.example.com" before "*.example.com"), and "*" comes last;
//  2. among routes of the same host pattern, the longest path_prefix wins.
//
// So a host with any matching route of its own never falls through to a
// wildcard, but a host whose own routes miss the path does. Route does not
// allocate unless host has upper-case letters.
func (c *Config) Route(host, path string) (*Route, bool) {
	x := c.lookup()
	h := requestHost(host)
	if h != "" {
		if r := matchPrefix(x.exact[h], path); r != nil {
			return r, true
		}
		for i := 0; i < len(h); i++ {
			if h[i] == '.' {
				if r := matchPrefix(x.wildcard[h[i+1:]], path); r != nil {
					return r, true
				}
			}
		}
	}
	if r := matchPrefix(x.anyHost, path); r != nil {
		return r, true
	}
	return nil, false
}

// matchPrefix returns the first route in rs (longest prefix first) whose
// prefix path has.
func matchPrefix(rs []*Route, path string) *Route {
	for _, r := range rs {
		if reqpath.HasPrefix(path, r.PathPrefix) {
			return r
		}
	}
	return nil
}

// requestHost strips the port, IPv6 brackets and a trailing dot from a request
// host and lower-cases it.
func requestHost(h string) string {
	if strings.HasPrefix(h, "[") {
		if end := strings.IndexByte(h, ']'); end > 0 {
			h = h[1:end]
		}
	} else if i := strings.IndexByte(h, ':'); i >= 0 && strings.IndexByte(h[i+1:], ':') < 0 {
		h = h[:i] // one colon: host:port (more than one: a bare IPv6 address)
	}
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if 'A' <= h[i] && h[i] <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

// Capacity returns the serving capacity of a backend whose group has
// instances instances, healthy of which pass health checks, under the
// service's balancing mode (docs/design.md §2):
//
//   - a per-instance limit L: healthy × L,
//   - a group limit G: G × healthy / instances,
//   - UTILIZATION: healthy × max_utilization × utilization_rate_per_instance,
//
// each multiplied by CapacityScaler. The unit is the mode's unit of demand
// (BalancingMode): requests/s for RATE and UTILIZATION, concurrent
// connections or in-flight requests for CONNECTION. healthy is clamped to
// [0, instances]; instances ≤ 0 gives 0.
func (b *Backend) Capacity(mode BalancingMode, healthy, instances int) float64 {
	if instances <= 0 {
		return 0
	}
	h := float64(min(max(healthy, 0), instances))
	frac := h / float64(instances) // exactly 1 when all are healthy
	var c float64
	switch mode {
	case ModeRate:
		if b.MaxRatePerInstance > 0 {
			c = h * b.MaxRatePerInstance
		} else {
			c = b.MaxRate * frac
		}
	case ModeConnection:
		if b.MaxConnectionsPerInstance > 0 {
			c = h * float64(b.MaxConnectionsPerInstance)
		} else {
			c = float64(b.MaxConnections) * frac
		}
	case ModeUtilization:
		c = h * b.MaxUtilization * b.UtilizationRatePerInstance
	}
	return c * b.CapacityScaler
}

// GroupCapacity returns the capacity that service may put on the instance
// group named group when healthy of the group's active (not Demoted)
// instances are healthy (see Backend.Capacity): demoted instances count
// for nothing, neither in healthy nor in the group's size, so a group of 3
// healthy instances of which 1 is demoted has the capacity of 2 (callers
// count with snapshot.Snapshot.HealthyActiveCount). A group without
// instances has capacity 0. It returns false if the service does not
// exist or does not use the group.
func (c *Config) GroupCapacity(service, group string, healthy int) (float64, bool) {
	s, ok := c.Service(service)
	if !ok {
		return 0, false
	}
	b, ok := s.Backend(group)
	if !ok {
		return 0, false
	}
	g, ok := c.Group(group)
	if !ok {
		return 0, false
	}
	return b.Capacity(s.BalancingMode, healthy, g.Group.ActiveInstances()), true
}
