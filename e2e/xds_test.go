package e2e

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds"

	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/testbackend/echopb"
	"github.com/spillway-lb/spillway/internal/topology"
)

// xdsNet is the deployment's 127.70.0.0/16.
const xdsNet = 70

// xdsSpec is two regions of two zones with two gRPC instances each,
// declared at 50 calls/s per instance (200/s a region; the plan fills
// 95% of it, 190/s) but enforcing 5000/s, so that the xDS clients' own
// calls (which the plan does not see) are never refused; sites nyc and lon
// each 4 ms from their own region and 20 ms from the other. The control
// plane exports the plan over xDS at {ip}:7300, re-planning every 250 ms as
// the gfes do. Feedback is off: the plan follows demand and declared
// capacity only, so the test can predict it. The xDS clients report no
// load (--xds-load-report-interval 0): the tests that check that clients
// follow the plan measure with bursts of calls that must not move it;
// TestXDSClientDemandIsPlanned turns reporting on.
func xdsSpec() topology.Spec {
	ms := time.Millisecond
	s := topology.Spec{
		Net:          xdsNet,
		BackendAdmin: true, // gRPC-only instances answer no HTTP /healthz; wait on the process admin
		Sites: []topology.Site{
			{Name: "nyc", RTT: map[string]time.Duration{"us-east": 4 * ms, "eu-west": 20 * ms}},
			{Name: "lon", RTT: map[string]time.Duration{"us-east": 20 * ms, "eu-west": 4 * ms}},
		},
		CPArgs: []string{"--xds-listen", "{ip}:7300", "--xds-allowed-clients", xdsGrants, "--xds-plan-interval", "250ms", "--xds-load-report-interval", "0"},
		EditConfig: func(y string) string {
			y = strings.Replace(y, "health_check: {protocol: http, path: /healthz,", "health_check: {protocol: grpc,", 1)
			return strings.Replace(y, "    health_check:", "    feedback: {enabled: false}\n    health_check:", 1)
		},
	}
	for _, r := range []string{"us-east", "eu-west"} {
		s.Regions = append(s.Regions, topology.Region{Name: r, Zones: []string{"b", "c"}, Instances: 2, Rate: 50, MaxRPS: 5000, InstanceKeys: ",proto=grpc"})
	}
	return s
}

// xdsEcho returns an Echo client on target xds:///web whose xDS client
// (google.golang.org/grpc/xds, unmodified) has its own bootstrap: the
// control plane's xDS listener over mutual TLS with a certificate of its
// own, and node.locality.region = site.
func xdsEcho(t *testing.T, c *topology.Cluster, site string) echopb.EchoClient {
	t.Helper()
	name := "xds-" + site
	f, err := c.CA.IssueFiles(c.PKIDir, name, devpki.Leaf{CommonName: name, Names: []string{name + ".xds.spillway.internal"}, ValidFor: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := fmt.Sprintf(`{
	  "xds_servers": [{
	    "server_uri": %q,
	    "channel_creds": [{"type": "tls", "config": {"ca_certificate_file": %q, "certificate_file": %q, "private_key_file": %q}}],
	    "server_features": ["xds_v3"]
	  }],
	  "node": {"id": %q, "locality": {"region": %q}}
	}`, c.Spec.ControlPlaneIP(0)+":7300", f.CA, f.Cert, f.Key, name, site)
	rb, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///web", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return echopb.NewEchoClient(cc)
}

// regionSplit makes n Echo calls, par at a time, and returns the fraction
// that each region answered.
func regionSplit(ctx context.Context, client echopb.EchoClient, n, par int) (map[string]float64, error) {
	var (
		mu    sync.Mutex
		count = map[string]int{}
		first error
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	for range par {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				r, err := client.Unary(ctx, &echopb.EchoRequest{Message: "x"})
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if err == nil {
					count[r.Region]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	out := map[string]float64{}
	for r, k := range count {
		out[r] = float64(k) / float64(n)
	}
	return out, nil
}

// grpcLoad sends Echo calls through a gfe at a rate that may change, open
// loop: the calls due by the elapsed time are started every 5 ms whatever
// the ones before became.
type grpcLoad struct {
	rate   atomic.Uint64 // math.Float64bits of calls/s
	failed atomic.Int64
	stop   context.CancelFunc
	done   chan struct{}
}

func startGRPCLoad(t *testing.T, gfeAddr string, rate float64) *grpcLoad {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+gfeAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	// Connect first, so that the first calls do not queue for the
	// connection and reach the gfe as one burst (a burst is a rise of
	// demand the plan follows at once).
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	cc.Connect()
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(cctx, s) {
			t.Fatalf("gRPC connection to the gfe at %s not ready: %v", gfeAddr, s)
		}
	}
	l := startEchoLoad(t, echopb.NewEchoClient(cc), rate)
	go func() {
		<-l.done
		cc.Close()
	}()
	return l
}

// startEchoLoad sends Echo calls with client at rate (which may change),
// open loop, until Stop.
func startEchoLoad(t *testing.T, client echopb.EchoClient, rate float64) *grpcLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &grpcLoad{stop: cancel, done: make(chan struct{})}
	l.set(rate)
	go func() {
		defer close(l.done)
		var wg sync.WaitGroup
		defer wg.Wait()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		last, due := time.Now(), 0.0
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				due += now.Sub(last).Seconds() * math.Float64frombits(l.rate.Load())
				last = now
				for ; due >= 1; due-- {
					wg.Go(func() {
						cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
						defer ccancel()
						if _, err := client.Unary(cctx, &echopb.EchoRequest{Message: "load"}); err != nil && ctx.Err() == nil {
							l.failed.Add(1)
						}
					})
				}
			}
		}
	}()
	t.Cleanup(l.Stop)
	return l
}

func (l *grpcLoad) set(rate float64) { l.rate.Store(math.Float64bits(rate)) }

// Stop ends the load and waits for its calls. Idempotent.
func (l *grpcLoad) Stop() {
	l.stop()
	<-l.done
}

// gfeRow returns the share of each region in site's gfe's plan row.
func gfeRow(ctx context.Context, c *topology.Cluster, site string) (map[string]float64, error) {
	for _, g := range c.GFEs {
		if g.Site != site {
			continue
		}
		st, err := topology.Status(ctx, g)
		if err != nil {
			return nil, err
		}
		if len(st.Services) == 0 {
			return nil, fmt.Errorf("%s has no service", g.Name)
		}
		out := map[string]float64{}
		for _, s := range st.Services[0].Plan {
			out[s.Region] += s.Share
		}
		return out, nil
	}
	return nil, fmt.Errorf("no gfe at %s", site)
}

// TestXDSClientsFollowTheirSitesPlan starts the real deployment with the
// control plane's xDS export on and two unmodified grpc-go xDS clients, at
// nyc and lon, that call the gRPC backends directly (not through a gfe).
// Nearest first, each client's calls stay in its own region; when gRPC
// load through the nyc gfe (285 calls/s against us-east's 190) fills
// us-east, the nyc client's calls spill to eu-west within a few seconds of
// the gfe's own plan; and at that steady state each client follows its own
// site's plan row, as the site's gfe shows it, within ±3% over 4,000 calls.
func TestXDSClientsFollowTheirSitesPlan(t *testing.T) {
	c := startCluster(t, xdsSpec())
	ctx := context.Background()
	clients := map[string]echopb.EchoClient{"nyc": xdsEcho(t, c, "nyc"), "lon": xdsEcho(t, c, "lon")}
	nearest := map[string]string{"nyc": "us-east", "lon": "eu-west"}
	nycGFE := strings.TrimPrefix(c.GFEs[0].URL, "http://")
	if c.GFEs[0].Site != "nyc" {
		t.Fatalf("first gfe at %s, want nyc", c.GFEs[0].Site)
	}

	if !t.Run("nearest first", func(t *testing.T) {
		// No load yet: every site's row is its idle row, all nearest. At
		// startup a gfe may gossip its RTT to one region before the
		// other, and damping slows the return to the nearer region (rule
		// 8) on the control plane as on every gfe: wait (≤ 20 s) until
		// 200 calls of each client are nearest, then measure.
		start := time.Now()
		err := topology.WaitFor(ctx, 20*time.Second, func() (bool, error) {
			for site, client := range clients {
				got, err := regionSplit(ctx, client, 200, 8)
				if err != nil || got[nearest[site]] < 0.99 {
					return false, fmt.Errorf("%s: %v (error %v)", site, got, err)
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("the xDS clients' calls are not all nearest: %v", err)
		}
		t.Logf("both clients nearest %v after the test started", time.Since(start))
		for site, client := range clients {
			got, err := regionSplit(ctx, client, 1000, 8)
			if err != nil {
				t.Fatalf("%s: %v", site, err)
			}
			t.Logf("%s: %v of 1000 calls", site, got)
			if got[nearest[site]] < 0.99 {
				t.Errorf("%s: %.3f of calls in %s, want ≥ 0.99 (%v)", site, got[nearest[site]], nearest[site], got)
			}
		}
	}) {
		return
	}

	load := startGRPCLoad(t, nycGFE, 0) // connected, idle
	if !t.Run("spill follows the gfes within seconds", func(t *testing.T) {
		load.set(285)
		start := time.Now()
		var gfeAt, xdsAt time.Duration
		deadline := start.Add(40 * time.Second)
		for gfeAt == 0 || xdsAt == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("after %v: gfe spilled at %v, xds client at %v (0: not yet)", time.Since(start), gfeAt, xdsAt)
			}
			row, err := gfeRow(ctx, c, "nyc")
			if err != nil {
				t.Fatal(err)
			}
			if gfeAt == 0 && row["eu-west"] >= 0.25 {
				gfeAt = time.Since(start)
			}
			got, err := regionSplit(ctx, clients["nyc"], 300, 8)
			if err != nil {
				t.Fatal(err)
			}
			if xdsAt == 0 && got["eu-west"] >= 0.25 {
				xdsAt = time.Since(start)
			}
		}
		t.Logf("nyc gfe's plan spilled ≥ 25%% to eu-west %v after the load rose; the nyc xDS client's calls %v after", gfeAt, xdsAt)
		if lag := xdsAt - gfeAt; lag > 3*time.Second {
			t.Errorf("the xDS client spilled %v after the gfe, want ≤ 3s", lag)
		}
	}) {
		return
	}

	if !t.Run("each client follows its own site's plan", func(t *testing.T) {
		followsPlan(t, c, clients)
		// The row followed is a real spill: 190 of nyc's 285 calls/s in
		// us-east, the rest in eu-west; lon, idle, all in eu-west.
		if row, _ := gfeRow(ctx, c, "nyc"); math.Abs(row["eu-west"]-1.0/3) > 0.05 {
			t.Errorf("nyc plan sends %.3f to eu-west, want 1/3 ± 0.05", row["eu-west"])
		}
	}) {
		return
	}

	lonLoad := startGRPCLoad(t, strings.TrimPrefix(c.GFEs[1].URL, "http://"), 250)
	load.set(100)
	t.Run("the other site's spill", func(t *testing.T) {
		// lon's 250 calls/s fill eu-west (190); its other 60 go to
		// us-east, where nyc's 100 leave room: lon's row is 0.76/0.24 and
		// nyc's all us-east.
		err := topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
			row, err := gfeRow(ctx, c, "lon")
			return err == nil && math.Abs(row["us-east"]-0.24) < 0.05, err
		})
		if err != nil {
			t.Fatalf("lon's plan did not spill 0.24 to us-east: %v", err)
		}
		followsPlan(t, c, clients)
	})
	lonLoad.Stop()
	load.Stop()
	for site, l := range map[string]*grpcLoad{"nyc": load, "lon": lonLoad} {
		if n := l.failed.Load(); n > 0 {
			t.Errorf("%d calls through the %s gfe failed", n, site)
		}
	}
}

// followsPlan waits for the plan rows of both sites to settle (no share
// moved by 0.01 or more over at least half a second), then makes 4,000
// calls with each site's client and checks that each region's share of
// them is within 0.03 of the client's site's plan row, as that site's gfe
// shows it (the mean of its rows before and after the calls).
func followsPlan(t *testing.T, c *topology.Cluster, clients map[string]echopb.EchoClient) {
	t.Helper()
	ctx := context.Background()
	var prev map[string]map[string]float64
	var prevAt time.Time
	err := topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
		if prev != nil && time.Since(prevAt) < 500*time.Millisecond {
			return false, nil
		}
		rows := map[string]map[string]float64{}
		ok := prev != nil
		for site := range clients {
			row, err := gfeRow(ctx, c, site)
			if err != nil {
				return false, err
			}
			rows[site] = row
			for _, r := range []string{"us-east", "eu-west"} {
				ok = ok && math.Abs(row[r]-prev[site][r]) < 0.01
			}
		}
		prev, prevAt = rows, time.Now()
		return ok, nil
	})
	if err != nil {
		t.Fatalf("the plans did not settle: %v", err)
	}
	for _, s := range []string{"nyc", "lon"} {
		before, err := gfeRow(ctx, c, s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := regionSplit(ctx, clients[s], 4000, 16)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		after, err := gfeRow(ctx, c, s)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []string{"us-east", "eu-west"} {
			want := (before[r] + after[r]) / 2
			t.Logf("%s → %s: %.4f of 4000 calls, gfe plan %.4f (%.4f before, %.4f after)", s, r, got[r], want, before[r], after[r])
			if math.Abs(got[r]-want) > 0.03 {
				t.Errorf("%s → %s: %.4f of 4000 xDS calls, the site's plan %.4f: off by more than 0.03", s, r, got[r], want)
			}
		}
	}
}

// xdsLRSNet is TestXDSClientDemandIsPlanned's 127.78.0.0/16.
const xdsLRSNet = 78

// TestXDSClientDemandIsPlanned: with load reporting on (the default), an
// xDS client's calls are its site's demand. An unmodified grpc-go xDS
// client at nyc sends 250 calls/s straight to the backends, none through a
// gfe. The control plane receives its load reports (LRS) and shows 250
// ±10% for nyc (spillway_controlplane_xds_client_demand), gossips it, and
// the nyc gfe's own plan spills (250 − 190)/250 = 0.24 ±0.05 of nyc to
// eu-west — a spill the client's calls then follow. When the client
// stops, nyc's row goes back to us-east.
func TestXDSClientDemandIsPlanned(t *testing.T) {
	spec := xdsSpec()
	spec.Net = xdsLRSNet
	spec.CPArgs = []string{"--xds-listen", "{ip}:7300", "--xds-allowed-clients", xdsGrants, "--xds-plan-interval", "250ms"}
	c := startCluster(t, spec)
	ctx := context.Background()
	client := xdsEcho(t, c, "nyc")
	metrics := c.Spec.ControlPlaneAdmin(0) + "/metrics"

	load := startEchoLoad(t, client, 250)
	start := time.Now()
	err := topology.WaitFor(ctx, 40*time.Second, func() (bool, error) {
		row, err := gfeRow(ctx, c, "nyc")
		return err == nil && math.Abs(row["eu-west"]-0.24) < 0.05, fmt.Errorf("nyc row %v (error %v)", row, err)
	})
	if err != nil {
		t.Fatalf("the nyc gfe's plan did not count the xDS client's 250 calls/s: %v", err)
	}
	t.Logf("nyc's plan spilled 0.24 to eu-west %v after the xDS client started", time.Since(start).Round(time.Millisecond))
	if d := metricValue(t, metrics, "spillway_controlplane_xds_client_demand", "site=nyc"); d < 225 || d > 275 {
		t.Errorf("control plane reports nyc's xDS demand %.1f calls/s, want 250 ±10%%", d)
	}
	got, err := regionSplit(ctx, client, 1000, 8) // on top of the load: the row moves a little; the client still spills
	if err != nil {
		t.Fatal(err)
	}
	if got["eu-west"] < 0.1 {
		t.Errorf("the xDS client's own calls: %v; want some in eu-west, as nyc's plan", got)
	}

	load.Stop()
	if n := load.failed.Load(); n > 0 {
		t.Errorf("%d of the xDS client's calls failed", n)
	}
	err = topology.WaitFor(ctx, 40*time.Second, func() (bool, error) {
		row, err := gfeRow(ctx, c, "nyc")
		return err == nil && row["us-east"] > 0.99, fmt.Errorf("nyc row %v (error %v)", row, err)
	})
	if err != nil {
		t.Fatalf("after the xDS client stopped, nyc's plan did not return to us-east: %v", err)
	}
}
