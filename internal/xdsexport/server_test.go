package xdsexport

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/internal/clock"
)

// mustAccess returns the Access of grants in their text form.
func mustAccess(t *testing.T, grants ...string) *Access {
	t.Helper()
	var gs []Grant
	for _, s := range grants {
		g, err := ParseGrant(s)
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	a, err := NewAccess(gs)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// site returns a node at region, of the gRPC kind.
func site(id, region string) *core.Node {
	return &core.Node{Id: id, Locality: &core.Locality{Region: region}}
}

// TestClaimOfAnotherSiteIsRefused replays the first xDS finding of the
// second security review: node.locality.region was self-asserted, so any
// allowed client got any site's plan row, and every service's endpoints,
// health and routes, by claiming the site. Over real gRPC and mutual TLS,
// a client whose certificate is granted lon (and only the service web):
//
//   - claiming nyc is refused with PERMISSION_DENIED, on an ADS stream, a
//     delta stream, and in a later request of a stream it opened as lon;
//   - naming no site is placed at lon, and sees web only, with lon's row
//     (all of web in eu-west's ew-b at weight 1,000,000);
//   - the unary Fetch is refused (UNIMPLEMENTED), since it would bypass
//     the placement;
//
// while nyc's own client gets nyc's row of every service. Each refusal is
// counted under its reason.
func TestClaimOfAnotherSiteIsRefused(t *testing.T) {
	p := newTestPKI(t)
	access := mustAccess(t, "xds-lon.xds.example=lon/web", "xds-nyc.xds.example=nyc")
	r := newRefusals()
	srv := newTestServer(t, Options{Access: access, Refused: r.refused})
	addr := serveMTLS(t, p, access, srv, nil)
	lon := dialAs(t, p, addr, "xds-lon.xds.example")

	if _, _, _, err := adsFirst(t, lon, site("evil", "nyc")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("lon's certificate claiming nyc: %v; want PermissionDenied", err)
	}

	resp, st, _, err := adsFirst(t, lon, site("lon-1", ""))
	if err != nil {
		t.Fatalf("lon's certificate naming no site: %v", err)
	}
	if d := cmp.Diff([]string{"web"}, clusterNames(t, resp)); d != "" {
		t.Errorf("clusters seen by lon's client (-want +got):\n%s", d)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{"web"}}); err != nil {
		t.Fatal(err)
	}
	eds, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var cla endpoint.ClusterLoadAssignment
	if err := eds.GetResources()[0].UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint32{}
	for _, l := range cla.GetEndpoints() {
		if l.GetPriority() == 0 {
			got[l.GetLocality().GetSubZone()] = l.GetLoadBalancingWeight().GetValue()
		}
	}
	if d := cmp.Diff(map[string]uint32{"ew-b": WeightScale}, got); d != "" {
		t.Errorf("web's priority-0 weights for lon's client (-want +got):\n%s", d)
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: site("lon-1", "nyc"), TypeUrl: resource.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a later request of lon's stream claiming nyc: %v; want PermissionDenied", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	delta, err := discovery.NewAggregatedDiscoveryServiceClient(lon).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := delta.Send(&discovery.DeltaDiscoveryRequest{Node: site("evil", "nyc"), TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if _, err := delta.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a delta stream of lon's certificate claiming nyc: %v; want PermissionDenied", err)
	}
	_, err = clusterservice.NewClusterDiscoveryServiceClient(lon).FetchClusters(ctx, &discovery.DiscoveryRequest{Node: site("evil", "nyc"), TypeUrl: resource.ClusterType})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("FetchClusters claiming nyc: %v; want Unimplemented", err)
	}

	nyc := dialAs(t, p, addr, "xds-nyc.xds.example")
	resp, _, _, err = adsFirst(t, nyc, site("nyc-1", "nyc"))
	if err != nil {
		t.Fatalf("nyc's own client: %v", err)
	}
	if d := cmp.Diff([]string{"drain", "rr", "web"}, clusterNames(t, resp)); d != "" {
		t.Errorf("clusters seen by nyc's client (-want +got):\n%s", d)
	}

	counts := map[string]int{}
	r.count(counts)
	if d := cmp.Diff(map[string]int{RefusedSite: 2, RefusedNodeChanged: 1, RefusedFetch: 1}, counts); d != "" {
		t.Errorf("refusals counted (-want +got):\n%s", d)
	}
}

// TestShortStreamsLeaveNoSnapshots replays the second xDS finding of the
// second security review: every distinct site a client claimed became a
// cache key that every Update rebuilt forever (2,000 short streams left
// the control plane at 40–50% of a core after they had all closed). 2,000
// short ADS streams over mutual TLS, each claiming a site of its own (a
// grant that trusts any site, the worst case) and each served its
// snapshot, hold at most Limits.MaxKeys (50) snapshots at any time; once
// the grace period has passed (injected clock), one Update leaves none of
// theirs: the cache keeps no key, and Update sets only the 8 of the plan's
// sites (nyc, lon, tokyo and "", both kinds).
func TestShortStreamsLeaveNoSnapshots(t *testing.T) {
	p := newTestPKI(t)
	access := mustAccess(t, "roamer.xds.example=*")
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	srv := newTestServer(t, Options{Access: access, Clock: clk, Limits: Limits{MaxKeys: 50, KeyGrace: time.Minute}})
	addr := serveMTLS(t, p, access, srv, nil)
	cc := dialAs(t, p, addr, "roamer.xds.example")

	const streams, par = 2000, 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		first    error
		maxHeld  int
		next     = make(chan int)
		failFast = func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if first == nil {
				first = err
			}
		}
	)
	for range par {
		wg.Go(func() {
			for i := range next {
				resp, _, closeStream, err := adsFirst(t, cc, site(fmt.Sprint("c", i), fmt.Sprint("site-", i)))
				closeStream()
				if err != nil {
					failFast(fmt.Errorf("stream %d: %w", i, err))
					continue
				}
				if len(resp.GetResources()) != 3 {
					failFast(fmt.Errorf("stream %d: %d clusters, want 3", i, len(resp.GetResources())))
				}
				views, _ := srv.Held()
				mu.Lock()
				maxHeld = max(maxHeld, len(views))
				mu.Unlock()
			}
		})
	}
	for i := range streams {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
	if maxHeld > 50 {
		t.Errorf("up to %d snapshots held for streams, want ≤ 50 (Limits.MaxKeys)", maxHeld)
	}
	waitFor(t, "every stream closed", func() bool { return srv.Gate().Open() == 0 })

	clk.Advance(time.Minute + time.Second)
	keys, err := srv.Update(context.Background(), Input{Snapshot: testSnapshot(t), Plans: nil})
	if err != nil {
		t.Fatal(err)
	}
	views, cached := srv.Held()
	if len(views) != 0 || len(cached) != 0 {
		t.Errorf("after the grace period: %d snapshots for streams and %d cache keys (%v); want none", len(views), len(cached), cached[:min(5, len(cached))])
	}
	if len(keys) != 2 {
		t.Errorf("Update set %d keys (%v), want 2: the plan has no site left, only \"\" of both kinds", len(keys), keys[:min(5, len(keys))])
	}
}

// TestStreamLimits: streams are refused with RESOURCE_EXHAUSTED past
// Limits.MaxStreamsPerClient for one certificate identity and past
// MaxStreams in all, LRS streams counted with the discovery streams; a
// closed stream frees its place.
func TestStreamLimits(t *testing.T) {
	p := newTestPKI(t)
	access := mustAccess(t, "a.xds.example=nyc", "b.xds.example=lon")
	r := newRefusals()
	lim := Limits{MaxStreams: 5, MaxStreamsPerClient: 3}
	srv := newTestServer(t, Options{Access: access, Limits: lim, Refused: r.refused})
	lrs := newLoadReports(t, LRSConfig{Interval: time.Second}, LRSOptions{Access: access, Gate: srv.Gate(), Refused: r.refused})
	addr := serveMTLS(t, p, access, srv, lrs)
	a, b := dialAs(t, p, addr, "a.xds.example"), dialAs(t, p, addr, "b.xds.example")

	var closeA []func()
	for i := range 2 {
		_, _, c, err := adsFirst(t, a, site(fmt.Sprint("a", i), "nyc"))
		if err != nil {
			t.Fatalf("a's stream %d: %v", i, err)
		}
		closeA = append(closeA, c)
	}
	lrsStream(t, a, site("a-lrs", "nyc"))
	if _, _, _, err := adsFirst(t, a, site("a4", "nyc")); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a's 4th stream (2 ADS, 1 LRS open): %v; want ResourceExhausted", err)
	}
	for i := range 2 {
		if _, _, _, err := adsFirst(t, b, site(fmt.Sprint("b", i), "lon")); err != nil {
			t.Fatalf("b's stream %d: %v", i, err)
		}
	}
	if _, _, _, err := adsFirst(t, b, site("b3", "lon")); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the 6th stream in all: %v; want ResourceExhausted", err)
	}
	closeA[0]()
	waitFor(t, "a's first stream closed", func() bool { return srv.Gate().Open() == 4 })
	if _, _, _, err := adsFirst(t, b, site("b3", "lon")); err != nil {
		t.Fatalf("after a stream closed: %v", err)
	}
	counts := map[string]int{}
	r.count(counts)
	if d := cmp.Diff(map[string]int{RefusedClientStreams: 1, RefusedStreams: 1}, counts); d != "" {
		t.Errorf("refusals counted (-want +got):\n%s", d)
	}
}

// waitFor polls cond until it holds, failing the test after testTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond) // polling the server's goroutines, not a delay relied on
	}
}
