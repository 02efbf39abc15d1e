package xdsexport

import (
	"context"
	"math"
	"net"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

func clusterStats(name string, interval time.Duration, issued ...uint64) *endpoint.ClusterStats {
	cs := &endpoint.ClusterStats{ClusterName: name}
	if interval > 0 {
		cs.LoadReportInterval = durationpb.New(interval)
	}
	for i, n := range issued {
		cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, &endpoint.UpstreamLocalityStats{
			Locality: &core.Locality{Region: "r", SubZone: string(rune('a' + i))}, TotalIssuedRequests: n,
		})
	}
	return cs
}

func TestReportRates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stats []*endpoint.ClusterStats
		since time.Duration
		want  map[string]float64
	}{
		{"localities summed over the stated interval", []*endpoint.ClusterStats{clusterStats("web", time.Second, 30, 20)}, 5 * time.Second, map[string]float64{"web": 50}},
		{"half a second", []*endpoint.ClusterStats{clusterStats("web", 500*time.Millisecond, 25)}, 0, map[string]float64{"web": 50}},
		{"no stated interval: the time since the last report", []*endpoint.ClusterStats{clusterStats("web", 0, 40)}, 2 * time.Second, map[string]float64{"web": 20}},
		{"no interval at all", []*endpoint.ClusterStats{clusterStats("web", 0, 40)}, 0, map[string]float64{}},
		{"two clusters", []*endpoint.ClusterStats{clusterStats("web", time.Second, 10), clusterStats("api", time.Second, 7)}, 0, map[string]float64{"web": 10, "api": 7}},
		{"nothing issued", []*endpoint.ClusterStats{clusterStats("web", time.Second, 0)}, 0, map[string]float64{}},
		{"no cluster name", []*endpoint.ClusterStats{clusterStats("", time.Second, 9)}, 0, map[string]float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := reportRates(&lrsv3.LoadStatsRequest{ClusterStats: tc.stats}, tc.since)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if math.Abs(got[k]-v) > 1e-9 {
					t.Errorf("%s: got %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

// lrsClient opens an LRS stream to addr (plain text) as a node at site
// and returns it after the server's first response, which it checks.
func lrsClient(t *testing.T, addr, site string, interval time.Duration) lrsv3.LoadReportingService_StreamLoadStatsClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	st, resp, err := openLRS(t, cc, &core.Node{Id: "c-" + site, Locality: &core.Locality{Region: site}})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetSendAllClusters() || resp.GetLoadReportingInterval().AsDuration() != interval {
		t.Fatalf("first response %v; want send_all_clusters and interval %v", resp, interval)
	}
	return st
}

// lrsStream is openLRS that fails the test on error.
func lrsStream(t *testing.T, cc *grpc.ClientConn, node *core.Node) lrsv3.LoadReportingService_StreamLoadStatsClient {
	t.Helper()
	st, _, err := openLRS(t, cc, node)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// openLRS opens an LRS stream on cc as node, open until the test ends,
// and returns it with the server's first response, or the error that
// ended it.
func openLRS(t *testing.T, cc *grpc.ClientConn, node *core.Node) (lrsv3.LoadReportingService_StreamLoadStatsClient, *lrsv3.LoadStatsResponse, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := lrsv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := st.Send(&lrsv3.LoadStatsRequest{Node: node}); err != nil {
		return nil, nil, err
	}
	resp, err := st.Recv()
	return st, resp, err
}

func TestLoadReportsDemand(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	lr := newLoadReports(t, LRSConfig{Interval: time.Second}, LRSOptions{Access: OpenAccess(), Clock: clk})
	lr.SetServices(map[string]float64{"web": 1000})
	addr := serveLRS(t, lr)

	// want polls Demand until it matches: reports arrive asynchronously.
	want := func(what string, site string, w, unplaced float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := lr.Demand(clk.Now())
			d, u := got.BySite, got.Unplaced
			if math.Abs(d[site]["web"]-w) < 1e-9 && math.Abs(u-unplaced) < 1e-9 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: demand %v, unplaced %v; want %s web %v, unplaced %v", what, d, u, site, w, unplaced)
			}
			time.Sleep(time.Millisecond) // polling the server's goroutine, not a delay relied on
		}
	}
	report := func(st lrsv3.LoadReportingService_StreamLoadStatsClient, interval time.Duration, issued uint64) {
		t.Helper()
		if err := st.Send(&lrsv3.LoadStatsRequest{ClusterStats: []*endpoint.ClusterStats{clusterStats("web", interval, issued)}}); err != nil {
			t.Fatal(err)
		}
	}

	a := lrsClient(t, addr, "nyc", time.Second)
	want("connected, no report yet", "nyc", 0, 0)
	report(a, time.Second, 120)
	want("one client", "nyc", 120, 0)
	b := lrsClient(t, addr, "nyc", time.Second)
	report(b, 500*time.Millisecond, 40)
	want("two clients of a site", "nyc", 200, 0)
	c := lrsClient(t, addr, "", time.Second)
	report(c, time.Second, 9)
	want("a client without a site", "nyc", 200, 9)

	// b stops reporting: after 3 intervals it no longer counts.
	clk.Advance(2 * time.Second)
	report(a, time.Second, 100)
	report(c, time.Second, 9)
	want("a report replaces the last", "nyc", 180, 9)
	clk.Advance(1500 * time.Millisecond)
	want("a client silent for over 3 intervals", "nyc", 100, 9)

	// a's stream ends: its demand goes at once.
	if err := a.CloseSend(); err != nil {
		t.Fatal(err)
	}
	want("a client whose stream ended", "nyc", 0, 9)
}

func TestLoadReportsNeedsNode(t *testing.T) {
	addr := serveLRS(t, newLoadReports(t, LRSConfig{Interval: time.Second}, LRSOptions{Access: OpenAccess()}))
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := lrsv3.NewLoadReportingServiceClient(cc).StreamLoadStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&lrsv3.LoadStatsRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a first request without a node: %v; want InvalidArgument", err)
	}
}

// TestClustersNameTheLRSServer: with LoadReporting every cluster names
// this server as its LRS server (lrs_server: self, the only form gRPC
// accepts), and validates; without, none does.
func TestClustersNameTheLRSServer(t *testing.T) {
	in := Input{Snapshot: testSnapshot(t), Plans: map[string]*waterfall.Plan{"web": testPlan()}}
	for _, on := range []bool{false, true} {
		opts := testOpts
		opts.LoadReporting = on
		for _, kind := range []Kind{KindGRPC, KindEnvoy} {
			snap := build(t, in, opts, kind, "nyc")
			for n, r := range snap.GetResources(resource.ClusterType) {
				c := r.(*cluster.Cluster)
				if got := c.GetLrsServer().GetSelf() != nil; got != on {
					t.Errorf("LoadReporting %t, %s cluster %s: lrs_server self %t", on, kind, n, got)
				}
				if err := c.ValidateAll(); err != nil {
					t.Errorf("%s cluster %s: %v", kind, n, err)
				}
			}
		}
	}
}

// newLoadReports is NewLoadReports that fails the test on error.
func newLoadReports(t *testing.T, cfg LRSConfig, opts LRSOptions) *LoadReports {
	t.Helper()
	lr, err := NewLoadReports(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return lr
}

// serveLRS serves lr on a loopback port until the test ends and returns
// its address.
func serveLRS(t *testing.T, lr *LoadReports) string {
	t.Helper()
	srv := grpc.NewServer()
	lrsv3.RegisterLoadReportingServiceServer(srv, lr)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}
