package xdsexport

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseGrant(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    Grant
		wantErr string
	}{
		{in: "xds-nyc.xds.example=nyc", want: Grant{Identity: "xds-nyc.xds.example", Sites: []string{"nyc"}}},
		{in: "*.xds.example=nyc+lon+nyc", want: Grant{Identity: "*.xds.example", Sites: []string{"lon", "nyc"}}},
		{in: "spiffe://example/ns/a=lon/web+api", want: Grant{Identity: "spiffe://example/ns/a", Sites: []string{"lon"}, Services: []string{"api", "web"}}},
		{in: "CN=a=*", want: Grant{Identity: "CN=a", AnySite: true}},
		{in: "*=*/web", want: Grant{Identity: "*", AnySite: true, Services: []string{"web"}}},
		{in: "*.xds.example", wantErr: `names no site: write IDENTITY=SITE`},
		{in: "=nyc", wantErr: "empty identity"},
		{in: "a=", wantErr: `sites: "" is not a name`},
		{in: "a=nyc/", wantErr: `services: "" is not a name`},
		{in: "a=nyc+", wantErr: `sites: "" is not a name`},
		{in: "a=n,y", wantErr: `"n,y" is not a name`},
		{in: "a=nyc/w/x", wantErr: `"w/x" is not a name`},
		{in: "a=*+nyc", wantErr: `"*" is not a name`},
	} {
		t.Run(tt.in, func(t *testing.T) {
			g, err := ParseGrant(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseGrant(%q) = %+v, %v; want an error with %q", tt.in, g, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, g, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("ParseGrant(%q) (-want +got):\n%s", tt.in, d)
			}
		})
	}
}

// TestAccessPlace: a client is placed from its certificate, never from its
// claim alone: the claim only picks among the sites its grants list.
func TestAccessPlace(t *testing.T) {
	var grants []Grant
	for _, s := range []string{"xds-nyc.xds.example=nyc", "*.lon.xds.example=lon/web", "multi.xds.example=nyc+lon", "wild.xds.example=*/api", "wild.xds.example=nyc"} {
		g, err := ParseGrant(s)
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	a, err := NewAccess(grants)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		ids     []string
		claim   string
		want    Placement
		wantErr error
	}{
		{"its own site", []string{"xds-nyc.xds.example"}, "nyc", Placement{Site: "nyc"}, nil},
		{"no claim: its only site", []string{"xds-nyc.xds.example"}, "", Placement{Site: "nyc"}, nil},
		{"another site", []string{"xds-nyc.xds.example"}, "lon", Placement{}, ErrSiteNotAllowed},
		{"services of its grant", []string{"e1.lon.xds.example"}, "lon", Placement{Site: "lon", Services: []string{"web"}}, nil},
		{"a wildcard's site is still its own", []string{"e1.lon.xds.example"}, "nyc", Placement{}, ErrSiteNotAllowed},
		{"one of its sites", []string{"multi.xds.example"}, "lon", Placement{Site: "lon"}, nil},
		{"no claim among several sites: the aggregate", []string{"multi.xds.example"}, "", Placement{}, nil},
		{"any site, with its grant's services", []string{"wild.xds.example"}, "tokyo", Placement{Site: "tokyo", Services: []string{"api"}}, nil},
		{"any site and a listed one: the union", []string{"wild.xds.example"}, "nyc", Placement{Site: "nyc"}, nil},
		{"any site, malformed", []string{"wild.xds.example"}, "a/b", Placement{}, ErrBadSite},
		{"no grant", []string{"other.example"}, "nyc", Placement{}, ErrNotAllowed},
		{"no certificate", nil, "nyc", Placement{}, ErrNotAllowed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := a.Place(tt.ids, tt.claim)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Place(%q, %q) = %+v, %v; want error %v", tt.ids, tt.claim, got, err, tt.wantErr)
			}
			if d := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("Place(%q, %q) (-want +got):\n%s", tt.ids, tt.claim, d)
			}
		})
	}
	open, err := OpenAccess().Place(nil, "anywhere")
	if err != nil || open.Site != "anywhere" || len(open.Services) != 0 {
		t.Errorf("OpenAccess().Place = %+v, %v; want the claimed site and every service", open, err)
	}
}
