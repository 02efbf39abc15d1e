package xdsexport

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/internal/clock"
)

// drops counts LRSOptions.Dropped calls by reason. Safe for concurrent
// use.
type drops struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *drops) dropped(reason string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[string]int{}
	}
	d.n[reason] += n
}

func (d *drops) get() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for k, v := range d.n {
		out[k] = v
	}
	return out
}

// report sends one load report of issued calls over a second per cluster.
func report(t *testing.T, st lrsv3.LoadReportingService_StreamLoadStatsClient, issued map[string]uint64) {
	t.Helper()
	var cs []*endpoint.ClusterStats
	for name, n := range issued {
		cs = append(cs, clusterStats(name, time.Second, n))
	}
	if err := st.Send(&lrsv3.LoadStatsRequest{ClusterStats: cs}); err != nil {
		t.Fatal(err)
	}
}

// waitDemand polls lr's Demand until cond holds and returns it.
func waitDemand(t *testing.T, lr *LoadReports, what string, cond func(Demand) bool) Demand {
	t.Helper()
	var d Demand
	waitFor(t, what, func() bool {
		d = lr.Demand(lr.clk.Now())
		return cond(d)
	})
	return d
}

// TestLRSClaimOfAnotherSiteIsRefused replays the first xDS finding of the
// second security review on the load reporting service: one client
// claiming nyc at 10⁶ calls/s made that nyc's demand (clamped only at
// twice the service's capacity by the gfes). Over real gRPC and mutual
// TLS, a client granted lon (service web) that claims nyc is refused
// with PERMISSION_DENIED; naming no site it is placed at lon, where its
// 10⁶ calls/s of web and those of a second lon client (300/s) count for
// at most the bound, MaxSiteShare (1) × web's capacity (400), summed over
// both clients, the rest reported as excess; its calls to api, a service
// it may not see, are dropped and counted.
func TestLRSClaimOfAnotherSiteIsRefused(t *testing.T) {
	p := newTestPKI(t)
	access := mustAccess(t, "xds-lon.xds.example=lon/web")
	var d drops
	r := newRefusals()
	lr := newLoadReports(t, LRSConfig{Interval: time.Second}, LRSOptions{Access: access, Refused: r.refused, Dropped: d.dropped})
	lr.SetServices(map[string]float64{"web": 400, "api": 100})
	addr := serveMTLS(t, p, access, newTestServer(t, Options{Access: access}), lr)
	cc := dialAs(t, p, addr, "xds-lon.xds.example")

	if _, _, err := openLRS(t, cc, site("evil", "nyc")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("lon's certificate claiming nyc on LRS: %v; want PermissionDenied", err)
	}
	evil := lrsStream(t, cc, site("evil", ""))
	report(t, evil, map[string]uint64{"web": 1_000_000, "api": 7})
	honest := lrsStream(t, cc, site("lon-1", "lon"))
	report(t, honest, map[string]uint64{"web": 300})

	got := waitDemand(t, lr, "both lon clients' reports", func(d Demand) bool { return d.Excess["lon"]["web"] > 999_800 })
	want := Demand{
		BySite: map[string]map[string]float64{"lon": {"web": 400}},
		Excess: map[string]map[string]float64{"lon": {"web": 1_000_300 - 400}},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-6)); diff != "" {
		t.Errorf("demand (-want +got):\n%s", diff)
	}
	if n := d.get()[DroppedUnknownCluster]; n != 1 {
		t.Errorf("%d clusters dropped as unknown, want 1 (api, which lon's grant does not show)", n)
	}
	counts := map[string]int{}
	r.count(counts)
	if counts[RefusedSite] != 1 {
		t.Errorf("refusals %v, want 1 for the site", counts)
	}
}

// TestBogusClusterNamesAreDropped replays the third xDS finding of the
// second security review: LRS cluster names were unbounded and summed
// into the gossiped demand (16 streams × 20,000 names took the control
// plane to 1.05 GB and made gossip publishing fail). 16 streams over
// mutual TLS, each at a site of its own (a grant that trusts any site, the
// worst case), each report 20,000 names of 64 bytes that name no service,
// and web: all 320,000 are dropped and counted, and the demand holds web
// at each of the 16 sites, nothing else.
func TestBogusClusterNamesAreDropped(t *testing.T) {
	p := newTestPKI(t)
	access := mustAccess(t, "roamer.xds.example=*")
	var d drops
	// On a fake clock: the reports stay fresh however long they take.
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	lr := newLoadReports(t, LRSConfig{Interval: time.Second}, LRSOptions{Access: access, Dropped: d.dropped, Clock: clk})
	lr.SetServices(map[string]float64{"web": 400})
	addr := serveMTLS(t, p, access, newTestServer(t, Options{Access: access}), lr)
	cc := dialAs(t, p, addr, "roamer.xds.example")

	const streams, names = 16, 20_000
	issued := map[string]uint64{"web": 10}
	for i := range names {
		issued[fmt.Sprintf("%064d", i)] = 1
	}
	for i := range streams {
		report(t, lrsStream(t, cc, site(fmt.Sprint("r", i), fmt.Sprint("site-", i))), issued)
	}
	got := waitDemand(t, lr, "16 streams' reports", func(d Demand) bool { return len(d.BySite) == streams })
	if n := d.get()[DroppedUnknownCluster]; n != streams*names {
		t.Errorf("%d names dropped as unknown, want %d", n, streams*names)
	}
	for s, svcs := range got.BySite {
		if len(svcs) != 1 || math.Abs(svcs["web"]-10) > 1e-9 {
			t.Errorf("%s: demand %v, want web 10 only", s, svcs)
		}
	}
	lr.mu.Lock()
	entries := lr.entries
	lr.mu.Unlock()
	if entries != streams {
		t.Errorf("%d clusters held, want %d (web at each stream)", entries, streams)
	}
}

// TestLRSCaps: a report keeps at most MaxClustersPerStream known clusters,
// and all streams together at most MaxEntries; the rest is dropped and
// counted under its cap.
func TestLRSCaps(t *testing.T) {
	p := newTestPKI(t)
	access := mustAccess(t, "a.xds.example=nyc+lon")
	var d drops
	lr := newLoadReports(t, LRSConfig{Interval: time.Second, MaxClustersPerStream: 3, MaxEntries: 5}, LRSOptions{Access: access, Dropped: d.dropped})
	known := map[string]float64{}
	issued := map[string]uint64{}
	for i := range 10 {
		known[fmt.Sprint("svc-", i)] = 1e6
		issued[fmt.Sprint("svc-", i)] = 1
	}
	lr.SetServices(known)
	addr := serveMTLS(t, p, access, newTestServer(t, Options{Access: access}), lr)
	cc := dialAs(t, p, addr, "a.xds.example")

	report(t, lrsStream(t, cc, site("a", "nyc")), issued)
	waitDemand(t, lr, "the first report", func(d Demand) bool { return len(d.BySite["nyc"]) > 0 })
	report(t, lrsStream(t, cc, site("b", "lon")), issued)
	got := waitDemand(t, lr, "the second report", func(d Demand) bool { return len(d.BySite["lon"]) > 0 })
	if n, m := len(got.BySite["nyc"]), len(got.BySite["lon"]); n != 3 || m != 2 {
		t.Errorf("%d services of nyc's stream and %d of lon's kept, want 3 (MaxClustersPerStream) and 2 (the rest of MaxEntries)", n, m)
	}
	if drops := d.get(); !cmp.Equal(drops, map[string]int{DroppedStreamCap: 7, DroppedTotalCap: 8}) {
		t.Errorf("dropped %v, want 7 past the stream cap and 8 past the total", drops)
	}
	if cfgErr := (LRSConfig{Interval: time.Second, MaxSiteShare: math.Inf(1)}).Validate(); cfgErr == nil || !strings.Contains(cfgErr.Error(), "max_site_demand") {
		t.Errorf("an infinite MaxSiteShare: %v, want refused", cfgErr)
	}
}
