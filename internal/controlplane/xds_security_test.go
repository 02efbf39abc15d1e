package controlplane

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/xdsexport"
	"github.com/spillway-lb/spillway/lb/routing"
)

// xdsTLS is a CA, the control plane's certificate (127.0.0.1) and a way
// to dial its xDS listener as a client of a given name.
type xdsTLS struct {
	t   *testing.T
	ca  *devpki.CA
	dir string
	srv mtls.Files
}

func newXDSTLS(t *testing.T) *xdsTLS {
	t.Helper()
	ca, err := devpki.NewCA("xds test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &xdsTLS{t: t, ca: ca, dir: t.TempDir()}
	p.srv = p.issue("127.0.0.1")
	return p
}

func (p *xdsTLS) issue(name string) mtls.Files {
	p.t.Helper()
	f, err := p.ca.IssueFiles(p.dir, name, devpki.Leaf{CommonName: name, Names: []string{name}})
	if err != nil {
		p.t.Fatal(err)
	}
	return mtls.Files(f)
}

// config sets c's TLS to the test CA and certificate, and the xDS grants.
func (p *xdsTLS) config(grants ...string) func(*Config) {
	return func(c *Config) {
		c.TLS = mtls.ServerConfig{Files: p.srv, AllowedClients: []string{"*.gfe.spillway.internal"}}
		c.XDS.AllowedClients = grants
	}
}

// dial returns a connection to x's xDS listener presenting a certificate
// of name.
func (p *xdsTLS) dial(x *xdsExporter, name string) *grpc.ClientConn {
	p.t.Helper()
	creds, err := mtls.ClientCredentials(mtls.ClientConfig{Files: p.issue(name)}, mtls.Options{})
	if err != nil {
		p.t.Fatal(err)
	}
	cc, err := grpc.NewClient(x.Addr(), grpc.WithTransportCredentials(creds))
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { cc.Close() })
	return cc
}

// serveXDS serves x's gRPC listener until the test ends.
func serveXDS(t *testing.T, x *xdsExporter) {
	t.Helper()
	errc := make(chan error, 1)
	go serveGRPC(x.grpcSrv, x.lis, errc)
	t.Cleanup(func() {
		x.grpcSrv.Stop()
		<-errc
	})
}

// lrsReport opens an LRS stream on cc as a node at region ("" for none)
// and, unless the server refuses it (returned), sends one report of
// issued calls over a second for each cluster.
func lrsReport(t *testing.T, cc *grpc.ClientConn, region string, issued map[string]uint64) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := lrsv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&lrsv3.LoadStatsRequest{Node: &core.Node{Id: "lrs-" + region, Locality: &core.Locality{Region: region}}}); err != nil {
		return err
	}
	if _, err := st.Recv(); err != nil {
		return err
	}
	var cs []*endpoint.ClusterStats
	for name, n := range issued {
		cs = append(cs, &endpoint.ClusterStats{
			ClusterName: name, LoadReportInterval: durationpb.New(time.Second),
			UpstreamLocalityStats: []*endpoint.UpstreamLocalityStats{{TotalIssuedRequests: n}},
		})
	}
	if err := st.Send(&lrsv3.LoadStatsRequest{ClusterStats: cs}); err != nil {
		t.Fatal(err)
	}
	return nil
}

// rowOf returns the priority-0 shares of web's groups in the snapshot x
// serves to gRPC clients at site.
func rowOf(t *testing.T, x *xdsExporter, site string) map[string]float64 {
	t.Helper()
	snap, ok := x.srv.Snapshot(xdsexport.KindGRPC, site)
	if !ok {
		t.Fatalf("no snapshot for %s", site)
	}
	out := map[string]float64{}
	for _, l := range snap.GetResources(resource.EndpointType)["web"].(*endpoint.ClusterLoadAssignment).Endpoints {
		if l.Priority == 0 {
			out[l.Locality.SubZone] = float64(l.GetLoadBalancingWeight().GetValue()) / xdsexport.WeightScale
		}
	}
	return out
}

// TestXDSClientCannotMoveAnotherSite replays the first xDS finding of the
// second security review end to end in the control plane: one xDS client
// claiming nyc at 10⁶ calls/s made that nyc's demand (clamped only at
// twice web's capacity) and moved half of nyc's gfe traffic to a region
// 45 ms farther. nyc's gfe sends 90 req/s, which east (95 planned) takes
// whole. Over mutual TLS, a client whose certificate is granted lon:
//
//   - claiming nyc on LRS is refused (PERMISSION_DENIED), and counted;
//   - naming no site it is at lon, where its 10⁶ calls/s count for web's
//     declared capacity (200, --xds-max-site-demand 1), the rest counted
//     as excess: this replica gossips lon 200 and nothing for nyc;
//
// and after five plan intervals nyc's row is still all east (lon's own
// row spills: the bounded demand is planned, at lon).
func TestXDSClientCannotMoveAnotherSite(t *testing.T) {
	p := newXDSTLS(t)
	clk := clock.NewFake(epoch)
	g := newFakeGossip("cp-1")
	x, h, lc, hs := newExporterWith(t, g, clk, p.config("xds-lon.xds.spillway.internal=lon"))
	serveXDS(t, x)
	g.set("gfe-nyc", &gossip.NodeState{Kind: gossip.KindGFE, Site: "nyc", Demand: map[string]float64{"web": 90}, RTT: map[string]float64{"r1": 5, "r2": 50}})
	g.set("gfe-lon", &gossip.NodeState{Kind: gossip.KindGFE, Site: "lon", RTT: map[string]float64{"r1": 50, "r2": 5}})
	h.Store(newState(lc, hs, true, epoch))
	ctx := context.Background()
	x.step(ctx, clk.Now())
	capacity := routing.DeclaredCapacity(lc.Config, &lc.Config.Services[0])
	if capacity != 200 {
		t.Fatalf("web's declared capacity %v, want 200 (two instances of 100 req/s)", capacity)
	}

	cc := p.dial(x, "xds-lon.xds.spillway.internal")
	if err := lrsReport(t, cc, "nyc", map[string]uint64{"web": 1_000_000}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("lon's certificate claiming nyc: %v; want PermissionDenied", err)
	}
	if err := lrsReport(t, cc, "", map[string]uint64{"web": 1_000_000}); err != nil {
		t.Fatalf("lon's certificate naming no site: %v", err)
	}
	waitUntil(t, "the report counted", func() bool { return x.lrs.Demand(clk.Now()).Excess["lon"]["web"] > 0 })
	// Five plan intervals, within the report's freshness (3 × 1s): the
	// xDS peer's demand rises by at most web's capacity a second
	// (routing.DefaultBounds), to its bound by the third.
	for range 5 {
		clk.Advance(500 * time.Millisecond)
		x.step(ctx, clk.Now())
	}

	if d := cmp.Diff(map[string]float64{"east": 1}, rowOf(t, x, "nyc"), cmpopts.EquateApprox(0, 1e-5)); d != "" {
		t.Errorf("nyc's row (-want +got):\n%s", d)
	}
	if lon := rowOf(t, x, "lon"); lon["east"] < 0.1 {
		t.Errorf("lon's row %v: want a spill to east (lon's bounded xDS demand planned)", lon)
	}
	st, _, _ := g.lastPublished()
	if d := cmp.Diff(map[string]map[string]float64{"lon": {"web": 200}}, st.SiteDemand); d != "" {
		t.Errorf("gossiped xDS demand (-want +got):\n%s", d)
	}
	if got := metricValue(t, x.m.xdsRefused.WithLabelValues(xdsexport.RefusedSite)); got != 1 {
		t.Errorf("refusals for the site: %v, want 1", got)
	}
	if got := metricValue(t, x.m.xdsExcess); math.Abs(got-(1_000_000-200)) > 1e-6 {
		t.Errorf("excess demand %v, want %v", got, 1_000_000-200)
	}
}

// codecGossip is a fakeGossip whose Publish goes through a real gossip
// node first, so that a state the gossip codec cannot carry fails as it
// would in production.
type codecGossip struct {
	*fakeGossip
	real *gossip.Node
}

func newCodecGossip(t *testing.T) *codecGossip {
	t.Helper()
	cfg := gossip.DefaultConfig()
	cfg.Name, cfg.BindPort = "cp-1", 0
	n, err := gossip.New(cfg, gossip.Options{}) // never Run: Publish only encodes and stores
	if err != nil {
		t.Fatal(err)
	}
	return &codecGossip{fakeGossip: newFakeGossip("cp-1"), real: n}
}

func (g *codecGossip) Publish(s gossip.NodeState) (uint64, error) {
	if _, err := g.real.Publish(s); err != nil {
		return 0, err
	}
	return g.fakeGossip.Publish(s)
}

// hugeDemand is demand at sites sites for names services each, with
// 64-byte names: about 70 bytes a pair in the gossip state's JSON.
func hugeDemand(sites, names int) map[string]map[string]float64 {
	d := map[string]map[string]float64{}
	for s := range sites {
		m := map[string]float64{}
		for i := range names {
			m[fmt.Sprintf("%064d", i)] = 1
		}
		d[fmt.Sprint("site-", s)] = m
	}
	return d
}

// TestOversizedSiteDemandKeepsTheOtherParts: a SiteDemand the gossip
// codec refuses (16 sites × 20,000 services, over its 16 MiB limit) fails
// to publish, and is not kept: the state goes out without it, and the next
// lease renewal and health publish succeed. (The demand a control plane
// gossips is bounded long before this; see
// TestBogusLRSNamesKeepGossipPublishing.)
func TestOversizedSiteDemandKeepsTheOtherParts(t *testing.T) {
	g := newCodecGossip(t)
	p := newStatePublisher(g)
	if err := p.SetLeases(map[string]uint64{"east": 1}); err != nil {
		t.Fatal(err)
	}
	if err := p.SetSiteDemand(hugeDemand(16, 20_000)); err == nil {
		t.Fatal("a 22 MB site demand was published")
	}
	if err := p.SetLeases(map[string]uint64{"east": 1}); err != nil {
		t.Fatalf("lease renewal after the oversized demand: %v", err)
	}
	if _, err := p.Publish(gossip.NodeState{Kind: gossip.KindControlPlane, Groups: []gossip.GroupState{{Group: "east", Region: "r1", Instances: 1, Healthy: 1}}}); err != nil {
		t.Fatalf("health publish after the oversized demand: %v", err)
	}
	st, _, _ := g.lastPublished()
	if len(st.SiteDemand) != 0 || st.Leases["east"] != 1 || len(st.Groups) != 1 {
		t.Errorf("published %d sites of demand, leases %v, %d groups; want no demand, the lease and the group", len(st.SiteDemand), st.Leases, len(st.Groups))
	}
}

// TestBogusLRSNamesKeepGossipPublishing replays the third xDS finding of
// the second security review in the control plane: LRS cluster names
// were unbounded and summed into the gossiped site demand, so 16 streams
// × 20,000 names made the replica's gossip state too large to publish
// ("inflates to more than 16777216 bytes"), and with it its health
// verdicts and lease renewals. Over mutual TLS, 16 LRS streams of a
// client trusted with any site, each at a site of its own, report 20,000
// bogus names of 64 bytes and 10 calls/s of web. All 320,000 names are
// dropped and counted; the replica gossips web at the 4 of those sites
// that have a gfe (the other 12 withheld), and its lease renewal and
// health publish succeed, through a real gossip codec.
func TestBogusLRSNamesKeepGossipPublishing(t *testing.T) {
	p := newXDSTLS(t)
	clk := clock.NewFake(epoch)
	g := newCodecGossip(t)
	x, h, lc, hs := newExporterWith(t, g, clk, p.config("roamer.xds.spillway.internal=*"))
	serveXDS(t, x)
	for i := range 4 {
		g.set(fmt.Sprint("gfe-", i), &gossip.NodeState{Kind: gossip.KindGFE, Site: fmt.Sprint("site-", i), RTT: map[string]float64{"r1": 5, "r2": 50}})
	}
	h.Store(newState(lc, hs, true, epoch))
	ctx := context.Background()
	x.step(ctx, clk.Now())

	const streams, names = 16, 20_000
	issued := map[string]uint64{"web": 10}
	for i := range names {
		issued[fmt.Sprintf("%064d", i)] = 1
	}
	cc := p.dial(x, "roamer.xds.spillway.internal")
	for i := range streams {
		if err := lrsReport(t, cc, fmt.Sprint("site-", i), issued); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "every stream's report", func() bool { return len(x.lrs.Demand(clk.Now()).BySite) == streams })
	x.step(ctx, clk.Now())
	if got := metricValue(t, x.m.xdsLRSDropped.WithLabelValues(xdsexport.DroppedUnknownCluster)); got != streams*names {
		t.Errorf("%v names dropped as unknown clusters, want %d", got, streams*names)
	}

	st, _, _ := g.lastPublished()
	want := map[string]map[string]float64{"site-0": {"web": 10}, "site-1": {"web": 10}, "site-2": {"web": 10}, "site-3": {"web": 10}}
	if d := cmp.Diff(want, st.SiteDemand); d != "" {
		t.Errorf("gossiped xDS demand (-want +got):\n%s", d)
	}
	if got := metricValue(t, x.m.xdsWithheld.WithLabelValues(withheldNoGFE)); got != 12 {
		t.Errorf("withheld %v pairs of sites without a gfe, want 12", got)
	}
	if err := x.pub.SetLeases(map[string]uint64{"east": 3}); err != nil {
		t.Errorf("lease renewal: %v", err)
	}
	if _, err := x.pub.Publish(gossip.NodeState{Kind: gossip.KindControlPlane}); err != nil {
		t.Errorf("health publish: %v", err)
	}
}

// TestGossipedDemandBounds: only sites with a gfe are gossiped, at most
// max pairs, the largest first.
func TestGossipedDemandBounds(t *testing.T) {
	d := map[string]map[string]float64{"nyc": {"a": 5, "b": 1}, "lon": {"a": 3}, "nowhere": {"a": 100, "b": 100}}
	got, withheld := gossipedDemand(d, map[string]bool{"nyc": true, "lon": true}, 2)
	if diff := cmp.Diff(map[string]map[string]float64{"nyc": {"a": 5}, "lon": {"a": 3}}, got); diff != "" {
		t.Errorf("gossiped (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{withheldNoGFE: 2, withheldCap: 1}, withheld); diff != "" {
		t.Errorf("withheld (-want +got):\n%s", diff)
	}
}
