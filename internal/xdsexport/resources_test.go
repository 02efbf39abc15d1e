package xdsexport

import (
	"fmt"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/lb/waterfall"
)

var testOpts = Options{EnvoyListen: "0.0.0.0:10000"}

// validator is what every generated Envoy message implements
// (protoc-gen-validate).
type validator interface{ ValidateAll() error }

// names returns the names of snap's resources of type typ, sorted.
func names(snap *cachev3.Snapshot, typ resource.Type) []string {
	var out []string
	for n := range snap.GetResources(typ) {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func TestBuildResources(t *testing.T) {
	in := Input{Snapshot: testSnapshot(t, "127.0.0.1:9002"), Plans: map[string]*waterfall.Plan{"web": testPlan()}}
	for _, tt := range []struct {
		kind                    Kind
		listeners, routeConfigs []string
	}{
		{KindGRPC, []string{"drain", "rr", "web"}, []string{"drain", "rr", "web"}},
		{KindEnvoy, []string{"spillway"}, []string{"spillway"}},
	} {
		t.Run(string(tt.kind), func(t *testing.T) {
			snap := build(t, in, testOpts, tt.kind, "nyc")
			services := []string{"drain", "rr", "web"}
			for _, c := range []struct {
				typ  resource.Type
				want []string
			}{
				{resource.ListenerType, tt.listeners}, {resource.RouteType, tt.routeConfigs},
				{resource.ClusterType, services}, {resource.EndpointType, services},
			} {
				if d := cmp.Diff(c.want, names(snap, c.typ)); d != "" {
					t.Errorf("%s names (-want +got):\n%s", c.typ, d)
				}
				for n, r := range snap.GetResources(c.typ) {
					if err := r.(validator).ValidateAll(); err != nil {
						t.Errorf("%s %s does not validate: %v", c.typ, n, err)
					}
				}
			}
			cla := snap.GetResources(resource.EndpointType)["web"].(*endpoint.ClusterLoadAssignment)
			var weights []uint32
			var health []core.HealthStatus
			for _, l := range cla.Endpoints {
				weights = append(weights, l.GetLoadBalancingWeight().GetValue())
				for _, e := range l.LbEndpoints {
					health = append(health, e.HealthStatus)
				}
			}
			if d := cmp.Diff([]uint32{444444, 222222, 333333}, weights); d != "" {
				t.Errorf("web's locality weights at nyc (-want +got):\n%s", d)
			}
			wantHealth := []core.HealthStatus{core.HealthStatus_HEALTHY, core.HealthStatus_UNHEALTHY, core.HealthStatus_HEALTHY, core.HealthStatus_HEALTHY, core.HealthStatus_HEALTHY}
			if d := cmp.Diff(wantHealth, health); d != "" {
				t.Errorf("web's endpoint health (-want +got):\n%s", d)
			}
			if l := cla.Endpoints[0].Locality; l.Region != "us-east" || l.Zone != "us-east-b" || l.SubZone != "ue-b" {
				t.Errorf("first locality = %v, want us-east/us-east-b/ue-b", l)
			}
		})
	}
}

func TestBuildGRPCListenerIsAnAPIListener(t *testing.T) {
	snap := build(t, Input{Snapshot: testSnapshot(t)}, testOpts, KindGRPC, "nyc")
	l := snap.GetResources(resource.ListenerType)["web"].(*listener.Listener)
	if l.ApiListener == nil || len(l.FilterChains) != 0 || l.Address != nil {
		t.Errorf("gRPC listener web = %v, want an api_listener only", l)
	}
}

// TestEnvoyRoutes checks that the Envoy route configuration keeps
// config.Config.Route's precedence: a host's own routes first (longest
// prefix first), then those of the wildcards that cover it, then "*".
func TestEnvoyRoutes(t *testing.T) {
	snap := build(t, Input{Snapshot: testSnapshot(t)}, testOpts, KindEnvoy, "nyc")
	rc := snap.GetResources(resource.RouteType)["spillway"].(*route.RouteConfiguration)
	got := map[string][]string{}
	var order []string
	for _, vh := range rc.VirtualHosts {
		order = append(order, vh.Domains[0])
		for _, r := range vh.Routes {
			got[vh.Domains[0]] = append(got[vh.Domains[0]], r.GetMatch().GetPrefix()+" "+r.GetRoute().GetCluster())
			if cs := r.GetMatch().GetCaseSensitive(); cs == nil || cs.GetValue() {
				t.Errorf("%s route %s: case_sensitive %v, want false (the gfe matches prefixes case-insensitively)", vh.Domains[0], r.GetMatch().GetPrefix(), cs)
			}
		}
	}
	want := map[string][]string{
		"api.example.com": {"/v1/ rr", "/ drain", "/ web"},
		"*.example.com":   {"/ drain", "/ web"},
		"*":               {"/ web"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Envoy routes (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"api.example.com", "*.example.com", "*"}, order); d != "" {
		t.Errorf("virtual host order (-want +got):\n%s", d)
	}
}

// TestBuildViewSeesOnlyItsServices: a View of some services gets their
// clusters, endpoints and listeners only; an Envoy route to another
// service keeps its place but answers 404 itself, naming no cluster.
func TestBuildViewSeesOnlyItsServices(t *testing.T) {
	in := Input{Snapshot: testSnapshot(t), Plans: map[string]*waterfall.Plan{"web": testPlan()}}
	grpcSnap, err := BuildView(in, testOpts, View{Kind: KindGRPC, Site: "nyc", Services: []string{"web"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []resource.Type{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType} {
		if d := cmp.Diff([]string{"web"}, names(grpcSnap, typ)); d != "" {
			t.Errorf("gRPC %s names (-want +got):\n%s", typ, d)
		}
	}
	envoySnap, err := BuildView(in, testOpts, View{Kind: KindEnvoy, Site: "nyc", Services: []string{"web"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"web"}, names(envoySnap, resource.ClusterType)); d != "" {
		t.Errorf("Envoy clusters (-want +got):\n%s", d)
	}
	rc := envoySnap.GetResources(resource.RouteType)["spillway"].(*route.RouteConfiguration)
	if err := rc.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, vh := range rc.VirtualHosts {
		for _, r := range vh.Routes {
			to := r.GetRoute().GetCluster()
			if dr := r.GetDirectResponse(); dr != nil {
				to = fmt.Sprint(dr.GetStatus())
			}
			got[vh.Domains[0]] = append(got[vh.Domains[0]], r.GetMatch().GetPrefix()+" "+to)
		}
	}
	want := map[string][]string{
		"api.example.com": {"/v1/ 404", "/ 404", "/ web"},
		"*.example.com":   {"/ 404", "/ web"},
		"*":               {"/ web"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Envoy routes of a View of web (-want +got):\n%s", d)
	}
}

// TestVersions checks that versions hash content: the same input gives
// the same versions, and a plan change moves only the endpoints' version.
func TestVersions(t *testing.T) {
	s := testSnapshot(t)
	a := build(t, Input{Snapshot: s, Plans: map[string]*waterfall.Plan{"web": testPlan()}}, testOpts, KindGRPC, "nyc")
	b := build(t, Input{Snapshot: s, Plans: map[string]*waterfall.Plan{"web": testPlan()}}, testOpts, KindGRPC, "nyc")
	other := build(t, Input{Snapshot: s, Plans: map[string]*waterfall.Plan{"web": testPlan()}}, testOpts, KindGRPC, "lon")
	for _, typ := range []resource.Type{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType} {
		if a.GetVersion(typ) != b.GetVersion(typ) {
			t.Errorf("%s: versions %s and %s of equal input differ", typ, a.GetVersion(typ), b.GetVersion(typ))
		}
		changed := a.GetVersion(typ) != other.GetVersion(typ)
		if want := typ == resource.EndpointType; changed != want {
			t.Errorf("%s: version changed between nyc's and lon's rows: %v, want %v", typ, changed, want)
		}
	}
}

func TestViewKey(t *testing.T) {
	for _, tt := range []struct {
		view View
		want string
	}{
		{View{Kind: KindGRPC, Site: "nyc"}, "grpc/nyc"},
		{View{Kind: KindEnvoy, Site: "lon"}, "envoy/lon"},
		{View{Kind: KindGRPC}, "grpc/"},
		{View{Kind: KindGRPC, Site: "nyc", Services: []string{"api", "web"}}, "grpc+api,web/nyc"},
		// A site that looks like a scope is still a site of every service.
		{View{Kind: KindGRPC, Site: "nyc+web"}, "grpc/nyc+web"},
	} {
		if got := tt.view.Key(); got != tt.want {
			t.Errorf("%+v.Key() = %q, want %q", tt.view, got, tt.want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, hp := range []string{"", "10000", "0.0.0.0:0", "0.0.0.0:70000", "host:port"} {
		if err := (Options{EnvoyListen: hp}).Validate(); err == nil {
			t.Errorf("EnvoyListen %q accepted", hp)
		}
	}
	for _, hp := range []string{"0.0.0.0:10000", ":8080", "[::]:443"} {
		if err := (Options{EnvoyListen: hp}).Validate(); err != nil {
			t.Errorf("EnvoyListen %q: %v", hp, err)
		}
	}
}

// build is Build that fails the test on error.
func build(t *testing.T, in Input, opts Options, kind Kind, site string) *cachev3.Snapshot {
	t.Helper()
	snap, err := Build(in, opts, kind, site)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// BenchmarkBuild is one site's snapshot of the test config (three
// services, five instances): what the control plane spends per site and
// client kind every plan interval.
func BenchmarkBuild(b *testing.B) {
	in := Input{Snapshot: testSnapshot(b), Plans: map[string]*waterfall.Plan{"web": testPlan()}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(in, testOpts, KindGRPC, "nyc"); err != nil {
			b.Fatal(err)
		}
	}
}
