package xdsexport

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/spillway-lb/spillway/internal/mtls"
)

// Grant is one entry of the export's allow list (the control plane's
// --xds-allowed-clients): the clients whose certificate has an identity
// that Identity matches are at one of Sites and may see Services. Its text
// form (ParseGrant, String) is
//
//	IDENTITY=SITE[+SITE...][/SERVICE[+SERVICE...]]
//	IDENTITY=*[/SERVICE[+SERVICE...]]
//
// for example "xds-nyc.xds.example=nyc", "*.lon.xds.example=lon/web+api",
// "spiffe://example/ns/web/sa/client=nyc+lon".
type Grant struct {
	// Identity is a certificate identity pattern in mtls.Allowed's syntax:
	// a DNS or URI SAN or CN, "*.suffix" for one label, or "*".
	Identity string
	// Sites are the sites these clients may be at. A client's
	// node.locality.region must be one of them; a client that names none
	// is at the only site when there is one, and gets the aggregate
	// weights (site "") otherwise. Empty with AnySite.
	Sites []string
	// AnySite trusts the site each client claims (text form "=*"): any
	// site name, bounded only by Limits.
	AnySite bool
	// Services are the services these clients may see (clusters,
	// endpoints, listeners, routes) and report load for, sorted. Empty:
	// every service.
	Services []string
}

// siteRE is the syntax of the site and service names a Grant lists and
// that a client trusted with AnySite may claim: letters, digits, '.', '_'
// and '-', starting and ending with a letter or digit, at most 128 bytes.
// The configuration's service names (config's nameRE) are a subset.
var siteRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,126}[A-Za-z0-9])?$`)

// ParseGrant parses the text form of a Grant (see Grant). The identity is
// what comes before the last '='; every site and service must match the
// syntax of site names (letters, digits, '.', '_', '-').
func ParseGrant(s string) (Grant, error) {
	i := strings.LastIndex(s, "=")
	if i < 0 {
		return Grant{}, fmt.Errorf("%q names no site: write IDENTITY=SITE[+SITE...][/SERVICE[+SERVICE...]] "+
			"(the sites its clients are at), or IDENTITY=* to trust the site each client claims", s)
	}
	g := Grant{Identity: s[:i]}
	if g.Identity == "" {
		return Grant{}, fmt.Errorf("%q: empty identity before '='", s)
	}
	sites, services, scoped := strings.Cut(s[i+1:], "/")
	if sites == "*" {
		g.AnySite = true
	} else {
		names, err := nameList(sites)
		if err != nil {
			return Grant{}, fmt.Errorf("%q: sites: %w", s, err)
		}
		g.Sites = names
	}
	if scoped {
		names, err := nameList(services)
		if err != nil {
			return Grant{}, fmt.Errorf("%q: services: %w", s, err)
		}
		g.Services = names
	}
	return g, nil
}

// nameList parses "a+b+c" into sorted, distinct names.
func nameList(s string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(s, "+") {
		if !siteRE.MatchString(n) {
			return nil, fmt.Errorf("%q is not a name (letters, digits, '.', '_', '-'; '+' between names)", n)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// String returns g's text form, which ParseGrant reads back.
func (g Grant) String() string {
	sites := "*"
	if !g.AnySite {
		sites = strings.Join(g.Sites, "+")
	}
	if len(g.Services) == 0 {
		return g.Identity + "=" + sites
	}
	return g.Identity + "=" + sites + "/" + strings.Join(g.Services, "+")
}

// The errors of Access.Place, which the export's gRPC handlers turn into
// statuses (PermissionDenied, InvalidArgument).
var (
	// ErrNotAllowed: no grant matches the client's certificate.
	ErrNotAllowed = errors.New("xdsexport: client not allowed")
	// ErrSiteNotAllowed: the client's node claims a site its grants do
	// not give it.
	ErrSiteNotAllowed = errors.New("xdsexport: site not allowed for this client")
	// ErrBadSite: a site name a client trusted with any site claimed is
	// not a site name.
	ErrBadSite = errors.New("xdsexport: invalid site name")
)

// Access decides where each xDS client is and what it may see: from its
// certificate's identities and the grants, never from what its node
// claims alone. Immutable; safe for concurrent use.
type Access struct {
	grants []Grant
	open   bool
}

// NewAccess returns the Access of grants (at least one). A grant's
// Identity is checked by the TLS listener's allow list (Identities).
func NewAccess(grants []Grant) (*Access, error) {
	if len(grants) == 0 {
		return nil, errors.New("xdsexport: no grant: list the clients' identities and their sites")
	}
	return &Access{grants: slices.Clone(grants)}, nil
}

// OpenAccess is the Access of a listener without client certificates
// (plain text): every client is at the site it claims and sees every
// service.
func OpenAccess() *Access { return &Access{open: true} }

// Identities returns the identity patterns of the grants, in order: the
// TLS listener's allow list.
func (a *Access) Identities() []string {
	out := make([]string, len(a.grants))
	for i, g := range a.grants {
		out[i] = g.Identity
	}
	return out
}

// Trusting returns the grants that trust the site each client claims
// (AnySite), for a warning at startup.
func (a *Access) Trusting() []Grant {
	var out []Grant
	for _, g := range a.grants {
		if g.AnySite {
			out = append(out, g)
		}
	}
	return out
}

// Placement is where a client is and what it may see.
type Placement struct {
	// Site is the client's site; "" for a client that named none (it gets
	// the aggregate weights, and its load counts as unplaced).
	Site string
	// Services are the services the client may see, sorted; empty: every
	// service.
	Services []string
}

// Allows reports whether p may see service.
func (p Placement) Allows(service string) bool {
	if len(p.Services) == 0 {
		return true
	}
	_, ok := slices.BinarySearch(p.Services, service)
	return ok
}

// Place returns the placement of a client whose certificate has identities
// ids (nil without a certificate) and whose node claims site claimed
// (node.locality.region, "" when none):
//
//   - claimed is one of the sites the grants matching ids list, or
//     a grant matching ids trusts any site and claimed is a site name:
//     the client is at claimed and sees the union of the services of
//     those grants;
//   - claimed is "": the client is at the one site its grants list when
//     they list exactly one and none trusts any site, and at "" (the
//     aggregate) otherwise;
//   - otherwise ErrSiteNotAllowed (ErrBadSite for a malformed claim,
//     ErrNotAllowed when no grant matches ids).
func (a *Access) Place(ids []string, claimed string) (Placement, error) {
	if a.open {
		if claimed != "" && !siteRE.MatchString(claimed) {
			return Placement{}, fmt.Errorf("%w: %q", ErrBadSite, claimed)
		}
		return Placement{Site: claimed}, nil
	}
	var matching []Grant
	for _, g := range a.grants {
		if mtls.Allowed([]string{g.Identity}, ids) {
			matching = append(matching, g)
		}
	}
	if len(matching) == 0 {
		return Placement{}, fmt.Errorf("%w: identities %q match no grant", ErrNotAllowed, uniq(ids))
	}
	site := claimed
	if claimed == "" {
		if s, ok := onlySite(matching); ok {
			site = s
		}
	}
	var services []string
	all, placed := false, false
	var listed []string
	for _, g := range matching {
		if site != "" && !g.AnySite && !slices.Contains(g.Sites, site) {
			listed = append(listed, g.Sites...)
			continue
		}
		if g.AnySite && site != "" && !siteRE.MatchString(site) {
			return Placement{}, fmt.Errorf("%w: %q", ErrBadSite, site)
		}
		placed = true
		all = all || len(g.Services) == 0
		services = append(services, g.Services...)
	}
	if !placed {
		slices.Sort(listed)
		return Placement{}, fmt.Errorf("%w: node.locality.region %q, but identities %q are granted %s",
			ErrSiteNotAllowed, claimed, uniq(ids), strings.Join(slices.Compact(listed), ", "))
	}
	if all {
		services = nil
	}
	slices.Sort(services)
	return Placement{Site: site, Services: slices.Compact(services)}, nil
}

// onlySite returns the one site gs list, if they list exactly one and
// none trusts any site.
func onlySite(gs []Grant) (string, bool) {
	var sites []string
	for _, g := range gs {
		if g.AnySite {
			return "", false
		}
		sites = append(sites, g.Sites...)
	}
	slices.Sort(sites)
	sites = slices.Compact(sites)
	if len(sites) != 1 {
		return "", false
	}
	return sites[0], true
}

// uniq returns ids sorted, without repeats (a certificate's DNS SAN is
// often its CN too).
func uniq(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}
