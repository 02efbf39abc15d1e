package gfe

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/outlier"
	"github.com/spillway-lb/spillway/lb/routing"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// TestSiteStatus checks the global plan /status shows per site: the plan
// row summed per region, nearest region first, with its reason; the row a
// small demand would get for a site without demand; unplaced demand for a
// site that reaches no capacity.
func TestSiteStatus(t *testing.T) {
	// us-east (b 60 + c 60 req/s) and eu-west (100 req/s; 6 of 10
	// instances unhealthy: h = 0.4 keeps 80%).
	w := waterfall.World{
		Regions: []waterfall.Region{
			{Name: "us-east", Groups: []waterfall.Group{
				{Name: "us-east-b", Zone: "b", Instances: 2, Healthy: 2, Capacity: 60},
				{Name: "us-east-c", Zone: "c", Instances: 2, Healthy: 2, Capacity: 60},
			}},
			{Name: "eu-west", Groups: []waterfall.Group{{Name: "eu-west-b", Zone: "b", Instances: 10, Healthy: 4, Capacity: 100}}},
		},
		Sites: []waterfall.Site{
			{Name: "nyc", Demand: 150, RTT: map[string]float64{"us-east": 10, "eu-west": 80}},
			// RTTs as a slice by region, as routing.BuildWorld makes them.
			{Name: "lon", Demand: 50, RTTByRegion: []float64{80, 10}},
			{Name: "idle", Demand: 0, RTT: map[string]float64{"us-east": 10, "eu-west": 20}},
			{Name: "island", Demand: 7, RTT: map[string]float64{}},
		},
	}
	p, err := waterfall.Compute(w, waterfall.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		site int
		want status.SiteStatus
	}{
		// nyc fills us-east (120) and spills 30 to eu-west.
		{0, status.SiteStatus{Name: "nyc", DemandRPS: 150, RTTms: w.Sites[0].RTT, Flows: []status.FlowStatus{
			{Region: "us-east", LoadRPS: 120, Share: 0.8, Reason: "nearest"},
			{Region: "eu-west", LoadRPS: 30, Share: 0.2, Reason: "spill_capacity"},
		}}},
		// lon keeps 80% in eu-west; the 20% spilled for health finds
		// us-east full and returns (step 2).
		{1, status.SiteStatus{Name: "lon", DemandRPS: 50, RTTms: map[string]float64{"us-east": 80, "eu-west": 10}, Flows: []status.FlowStatus{
			{Region: "eu-west", LoadRPS: 50, Share: 1, Reason: "nearest"},
		}}},
		// idle: us-east is full, so a small demand would go to eu-west,
		// 80% of it; the rest of it finds no room and returns there.
		{2, status.SiteStatus{Name: "idle", RTTms: w.Sites[2].RTT, Flows: []status.FlowStatus{
			{Region: "eu-west", Share: 1, Reason: "spill_capacity"},
		}}},
		{3, status.SiteStatus{Name: "island", DemandRPS: 7, RTTms: w.Sites[3].RTT, UnplacedRPS: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.want.Name, func(t *testing.T) {
			got := siteStatus(w, w.Sites[tt.site], p)
			if d := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-9), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("siteStatus(%s) (-want +got):\n%s", tt.want.Name, d)
			}
		})
	}
	if got := siteStatus(w, w.Sites[0], nil); got.Flows != nil || got.DemandRPS != 150 {
		t.Errorf("siteStatus without a plan = %+v, want demand and no flows", got)
	}
}

// TestBackendStatus checks the backends /status lists per group: in
// address order, with their requests in flight, concurrency limit and
// whether outlier detection has ejected them at now, and whether they are
// demoted.
func TestBackendStatus(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	det, err := outlier.New(outlier.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mk := func(group, addr string, limit, inflight int64) routing.Member {
		b := backend.New(addr, limit)
		for range inflight {
			b.TryAcquire()
		}
		return routing.Member{B: b, Group: group, Host: det.Register(group, addr)}
	}
	scope := []routing.Member{
		mk("g1", "10.0.0.2:80", 0, 3),
		mk("g1", "10.0.0.1:80", 8, 1),
		mk("g1", "10.0.0.3:80", 0, 0),
		mk("g2", "10.0.1.1:80", 0, 2),
		{B: backend.New("10.0.1.2:80", 0), Group: "g2"},                // no outlier detection
		{B: backend.New("10.0.1.3:80", 0), Group: "g2", Demoted: true}, // overflow only
	}
	// Three connect failures eject 10.0.0.3 (a third of g1, under the 50% cap).
	for range 3 {
		scope[2].Host.Report(outlier.ConnectFailure, now)
	}
	want := map[string][]status.BackendStatus{
		"g1": {
			{Address: "10.0.0.1:80", InFlight: 1, MaxConcurrency: 8},
			{Address: "10.0.0.2:80", InFlight: 3},
			{Address: "10.0.0.3:80", Ejected: true},
		},
		"g2": {{Address: "10.0.1.1:80", InFlight: 2}, {Address: "10.0.1.2:80"}, {Address: "10.0.1.3:80", Demoted: true}},
	}
	if d := cmp.Diff(want, backendStatus(scope, now)); d != "" {
		t.Errorf("backendStatus (-want +got):\n%s", d)
	}
}
