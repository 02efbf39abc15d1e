package controlplane

import (
	"context"
	"math"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/xdsexport"
	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/health"
)

// TestXDSExportPlansFromGossip: the export serves nothing before the State
// is Ready, then each site's row of the plan the gfes' table build makes
// from the gfes' gossip: nyc (5 ms from r1, 50 from r2) with 150 req/s
// against r1's 95 (one instance of 100 req/s at target_utilization 0.95)
// gets r1 95/150 and r2 the rest; lon, idle and nearest to r2, all r2.
func TestXDSExportPlansFromGossip(t *testing.T) {
	x, h, g, lc, hs := newTestExporter(t)
	g.set("gfe-nyc", &gossip.NodeState{Kind: gossip.KindGFE, Site: "nyc", Demand: map[string]float64{"web": 150}, RTT: map[string]float64{"r1": 5, "r2": 50}})
	g.set("gfe-lon", &gossip.NodeState{Kind: gossip.KindGFE, Site: "lon", RTT: map[string]float64{"r1": 50, "r2": 5}})
	ctx := context.Background()

	h.Store(newState(lc, hs, false, epoch))
	x.step(ctx, epoch)
	if _, ok := x.srv.Snapshot(xdsexport.KindGRPC, "nyc"); ok {
		t.Fatal("a snapshot was served before the State was Ready")
	}

	h.Store(newState(lc, hs, true, epoch))
	// A new peer's demand counts from its second build (routing.Bounds),
	// as on every gfe.
	for i := range 2 {
		x.step(ctx, epoch.Add(time.Duration(i)*time.Second))
	}
	want := map[string]map[string]float64{
		"nyc": {"east": 95.0 / 150, "west": 55.0 / 150},
		"lon": {"west": 1},
	}
	for site, shares := range want {
		snap, ok := x.srv.Snapshot(xdsexport.KindGRPC, site)
		if !ok {
			t.Fatalf("no snapshot for %s", site)
		}
		cla := snap.GetResources(resource.EndpointType)["web"].(*endpoint.ClusterLoadAssignment)
		for _, l := range cla.Endpoints {
			got := float64(l.GetLoadBalancingWeight().GetValue()) / xdsexport.WeightScale
			if l.Priority != 0 {
				got = 0 // failover only
			}
			if math.Abs(got-shares[l.Locality.SubZone]) > 1e-5 {
				t.Errorf("%s: %s weight %.6f (priority %d), want %.6f", site, l.Locality.SubZone, got, l.Priority, shares[l.Locality.SubZone])
			}
		}
	}
}

// TestXDSClientDemandIsPlanned: the xDS clients' demand another replica
// gossips (SiteDemand) adds to the site's gfes' demand in the plan: nyc's
// gfe sends 100 req/s and its xDS clients 50, so nyc is planned at 150,
// the plan of TestXDSExportPlansFromGossip.
func TestXDSClientDemandIsPlanned(t *testing.T) {
	x, h, g, lc, hs := newTestExporter(t)
	g.set("gfe-nyc", &gossip.NodeState{Kind: gossip.KindGFE, Site: "nyc", Demand: map[string]float64{"web": 100}, RTT: map[string]float64{"r1": 5, "r2": 50}})
	g.set("cp-2", &gossip.NodeState{Kind: gossip.KindControlPlane, SiteDemand: map[string]map[string]float64{"nyc": {"web": 50}}})
	ctx := context.Background()
	h.Store(newState(lc, hs, true, epoch))
	for i := range 2 {
		x.step(ctx, epoch.Add(time.Duration(i)*time.Second))
	}
	snap, ok := x.srv.Snapshot(xdsexport.KindGRPC, "nyc")
	if !ok {
		t.Fatal("no snapshot for nyc")
	}
	cla := snap.GetResources(resource.EndpointType)["web"].(*endpoint.ClusterLoadAssignment)
	for _, l := range cla.Endpoints {
		want := map[string]float64{"east": 95.0 / 150, "west": 55.0 / 150}[l.Locality.SubZone]
		if got := float64(l.GetLoadBalancingWeight().GetValue()) / xdsexport.WeightScale; math.Abs(got-want) > 1e-5 {
			t.Errorf("nyc: %s weight %.6f, want %.6f (the gfe's 100 and the xDS clients' 50)", l.Locality.SubZone, got, want)
		}
	}
}

// TestStatePublisherKeepsParts: the health manager's groups, the xDS
// export's site demand and the lease claims are parts of one gossip state;
// publishing one keeps the others, an unchanged demand publishes nothing,
// and every SetLeases publishes (a renewal).
func TestStatePublisherKeepsParts(t *testing.T) {
	g := newFakeGossip("cp-1")
	p := newStatePublisher(g)
	groups := []gossip.GroupState{{Group: "east", Region: "r1", Instances: 1, Healthy: 1}}
	if _, err := p.Publish(gossip.NodeState{Kind: gossip.KindControlPlane, Groups: groups}); err != nil {
		t.Fatal(err)
	}
	d := map[string]map[string]float64{"nyc": {"web": 50}}
	if err := p.SetSiteDemand(d); err != nil {
		t.Fatal(err)
	}
	st, n, _ := g.lastPublished()
	if n != 2 || len(st.Groups) != 1 || st.SiteDemand["nyc"]["web"] != 50 {
		t.Fatalf("after SetSiteDemand: %d publishes, %+v; want 2 with the groups and the demand", n, st)
	}
	if err := p.SetSiteDemand(map[string]map[string]float64{"nyc": {"web": 50}}); err != nil {
		t.Fatal(err)
	}
	if _, n, _ := g.lastPublished(); n != 2 {
		t.Fatalf("an unchanged demand published again (%d publishes)", n)
	}
	if err := p.SetLeases(map[string]uint64{"east": 2}); err != nil {
		t.Fatal(err)
	}
	if err := p.SetLeases(map[string]uint64{"east": 2}); err != nil { // a renewal
		t.Fatal(err)
	}
	st, n, _ = g.lastPublished()
	if n != 4 || len(st.Groups) != 1 || st.SiteDemand["nyc"]["web"] != 50 || st.Leases["east"] != 2 {
		t.Fatalf("after SetLeases twice: %d publishes, %+v; want 4 (a renewal publishes) with groups, demand and leases", n, st)
	}
	if _, err := p.Publish(gossip.NodeState{Kind: gossip.KindControlPlane}); err != nil {
		t.Fatal(err)
	}
	st, n, _ = g.lastPublished()
	if n != 5 || len(st.Groups) != 0 || st.SiteDemand["nyc"]["web"] != 50 || st.Leases["east"] != 2 {
		t.Fatalf("after the health manager's publish: %d publishes, %+v; want its groups (none) with the demand and leases kept", n, st)
	}
}

// newTestExporter returns an xDS exporter of replica cp-1 without damping
// (each step is the planner's output), on a fake gossip, with its hub and
// a config of two groups, east (r1) and west (r2), of one healthy
// instance each (r1 is 5 ms from nyc; see topo).
func newTestExporter(t *testing.T) (*xdsExporter, *hub, *fakeGossip, *LoadedConfig, []InstanceHealth) {
	t.Helper()
	g := newFakeGossip("cp-1")
	x, h, lc, hs := newExporterWith(t, g, nil, func(c *Config) { c.TLS.InsecurePlaintext = true })
	return x, h, g, lc, hs
}

// newExporterWith is newTestExporter on gossip g and clock clk (nil: the
// real clock), with the Config edited by edit (which sets its transport
// security).
func newExporterWith(t *testing.T, g gossiper, clk clock.Clock, edit func(*Config)) (*xdsExporter, *hub, *LoadedConfig, []InstanceHealth) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeName = "cp-1"
	cfg.XDS.Listen = "127.0.0.1:0"
	cfg.XDS.Damping = 1
	edit(&cfg)
	h := newHub()
	x, err := newXDSExporter(cfg, h, newStatePublisher(g), Options{Logger: testLogger(t), Clock: clk}, newMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.lis.Close() })
	lc := loaded(t, topo{groups: []topoGroup{{"east", []string{"127.0.0.1:9001"}}, {"west", []string{"127.0.0.1:9002"}}}}.yaml(), "h1")
	hs := []InstanceHealth{
		{Group: "east", Address: "127.0.0.1:9001", Status: health.StatusHealthy},
		{Group: "west", Address: "127.0.0.1:9002", Status: health.StatusHealthy},
	}
	return x, h, lc, hs
}
