package e2e

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/topology"
)

// xdsSiteNet is TestXDSClientCannotClaimAnotherSite's 127.96.0.0/16.
const xdsSiteNet = 96

// xdsGrants are the e2e deployments' xDS grants: each site's client
// certificate (xdsEcho's) is granted its own site.
const xdsGrants = "xds-nyc.xds.spillway.internal=nyc,xds-lon.xds.spillway.internal=lon"

// xdsConn dials the control plane's xDS listener over mutual TLS with a
// certificate of its own, xds-<name>.xds.spillway.internal.
func xdsConn(t *testing.T, c *topology.Cluster, name string) *grpc.ClientConn {
	t.Helper()
	base := "xds-" + name
	f, err := c.CA.IssueFiles(c.PKIDir, base+"-raw", devpki.Leaf{CommonName: base, Names: []string{base + ".xds.spillway.internal"}, ValidFor: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := mtls.ClientCredentials(mtls.ClientConfig{Files: mtls.Files(f)}, mtls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(c.Spec.ControlPlaneIP(0)+":7300", grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// lrsLiar opens an LRS stream on cc as a node at region ("" for none).
// Unless the control plane refuses it (the error returned), it reports
// rate calls/s of web every second until the test ends.
func lrsLiar(t *testing.T, cc *grpc.ClientConn, region string, rate uint64) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := lrsv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
	if err == nil {
		err = st.Send(&lrsv3.LoadStatsRequest{Node: &core.Node{Id: "liar-" + region, Locality: &core.Locality{Region: region}}})
	}
	if err == nil {
		_, err = st.Recv()
	}
	if err != nil {
		cancel()
		return err
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			err := st.Send(&lrsv3.LoadStatsRequest{ClusterStats: []*endpoint.ClusterStats{{
				ClusterName: "web", LoadReportInterval: durationpb.New(time.Second),
				UpstreamLocalityStats: []*endpoint.UpstreamLocalityStats{{TotalIssuedRequests: rate}},
			}}})
			if err != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return nil
}

// TestXDSClientCannotClaimAnotherSite replays the first xDS finding of the
// second security review on the real binaries: "one client claiming nyc
// at 10⁶ calls/s moved half of nyc's real gfe traffic to a 40 ms-farther
// region". The control plane grants each xDS certificate its own site
// (--xds-allowed-clients xds-nyc…=nyc,xds-lon…=lon). nyc's gfe carries
// 100 calls/s of gRPC, all in us-east (waited for). lon's certificate:
//
//   - claiming nyc is refused with PERMISSION_DENIED, on ADS and on LRS,
//     and counted (spillway_controlplane_xds_refused_total{reason=site});
//   - naming no site is placed at lon, and its 10⁶ calls/s count there
//     for web's declared capacity, 400 (--xds-max-site-demand 1): the
//     control plane shows lon at 400 ±1 and the rest as excess.
//
// Once lon's own gfe plans that demand in full (lon's row spills 0.375 to
// us-east, ≥ 0.36), nyc's gfe's row is still all us-east (≥ 0.99), and the
// control plane shows no xDS demand at nyc.
func TestXDSClientCannotClaimAnotherSite(t *testing.T) {
	spec := xdsSpec()
	spec.Net = xdsSiteNet
	spec.CPArgs = []string{"--xds-listen", "{ip}:7300", "--xds-allowed-clients", xdsGrants, "--xds-plan-interval", "250ms"}
	c := startCluster(t, spec)
	ctx := context.Background()
	metrics := c.Spec.ControlPlaneAdmin(0) + "/metrics"
	if c.GFEs[0].Site != "nyc" || c.GFEs[1].Site != "lon" {
		t.Fatalf("gfes at %s and %s, want nyc and lon", c.GFEs[0].Site, c.GFEs[1].Site)
	}
	load := startGRPCLoad(t, strings.TrimPrefix(c.GFEs[0].URL, "http://"), 100)
	// At startup a gfe may gossip its RTT to one region before the other,
	// and damping slows the return to the nearer one (rule 8): wait until
	// nyc's row is all us-east before the attack.
	err := topology.WaitFor(ctx, 20*time.Second, func() (bool, error) {
		nyc, err := gfeRow(ctx, c, "nyc")
		return err == nil && nyc["us-east"] >= 0.99, fmt.Errorf("nyc's row %v (error %v)", nyc, err)
	})
	if err != nil {
		t.Fatalf("before the attack: %v", err)
	}

	liar := xdsConn(t, c, "lon")
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ads, err := discovery.NewAggregatedDiscoveryServiceClient(liar).StreamAggregatedResources(actx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ads.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "liar", Locality: &core.Locality{Region: "nyc"}}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if _, err := ads.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ADS with lon's certificate claiming nyc: %v; want PermissionDenied", err)
	}
	if err := lrsLiar(t, liar, "nyc", 1_000_000); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("LRS with lon's certificate claiming nyc: %v; want PermissionDenied", err)
	}
	if got := metricValue(t, metrics, "spillway_controlplane_xds_refused_total", "reason=site"); got != 2 {
		t.Errorf("refusals for the site: %v, want 2", got)
	}
	if err := lrsLiar(t, liar, "", 1_000_000); err != nil {
		t.Fatalf("LRS with lon's certificate naming no site: %v", err)
	}

	start := time.Now()
	// At its bound lon's 400 and nyc's 100 are 500 calls/s against 380
	// planned (95% of 400): every region at 500/380 (250), nyc's 100 first
	// in us-east (4 ms), lon's 400 in eu-west (250) and us-east (150), a
	// row of 0.625/0.375.
	err = topology.WaitFor(ctx, 40*time.Second, func() (bool, error) {
		lon, err := gfeRow(ctx, c, "lon")
		return err == nil && lon["us-east"] >= 0.36, fmt.Errorf("lon's row %v (error %v)", lon, err)
	})
	if err != nil {
		t.Fatalf("lon's gfe did not plan the xDS demand placed at lon: %v", err)
	}
	t.Logf("lon's row spilled to us-east %v after the lying client started", time.Since(start).Round(time.Millisecond))
	nyc, err := gfeRow(ctx, c, "nyc")
	if err != nil {
		t.Fatal(err)
	}
	lon, _ := gfeRow(ctx, c, "lon")
	t.Logf("rows: nyc %v, lon %v", nyc, lon)
	if nyc["us-east"] < 0.99 {
		t.Errorf("nyc's row %v: the lying client moved nyc's traffic", nyc)
	}
	m := scrape(t, metrics)
	if d := m.value("spillway_controlplane_xds_client_demand", "site=nyc"); d != 0 {
		t.Errorf("control plane shows %v calls/s of xDS demand at nyc, want none", d)
	}
	if d := m.value("spillway_controlplane_xds_client_demand", "site=lon", "service=web"); math.Abs(d-400) > 1 {
		t.Errorf("control plane shows %v calls/s of xDS demand at lon, want 400 (web's declared capacity)", d)
	}
	if d := m.value("spillway_controlplane_xds_client_demand_excess"); math.Abs(d-(1_000_000-400)) > 1 {
		t.Errorf("excess xDS demand %v, want %v", d, 1_000_000-400)
	}
	load.Stop()
	if n := load.failed.Load(); n > 0 {
		t.Errorf("%d calls through the nyc gfe failed", n)
	}
}
