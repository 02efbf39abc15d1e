package lab

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/testkit"
	"github.com/spillway-lb/spillway/internal/topology"
)

// bins are the binaries built once for the package's tests.
var bins map[string]string

func TestMain(m *testing.M) {
	if dir := os.Getenv(ownerEnv); dir != "" {
		os.Exit(ownerHelper(dir))
	}
	// A missing tool (ip; the guide's nft, openssl, curl, systemd-sysusers,
	// setpriv) is installed, never a reason to skip.
	if err := testkit.EnsureTools(map[string]string{"ip": "iproute2", "nft": "nftables", "openssl": "openssl", "curl": "curl", "systemd-sysusers": "systemd", "setpriv": "util-linux"}); err != nil {
		fmt.Fprintln(os.Stderr, "lab tests:", err)
		os.Exit(1)
	}
	testkit.RunWithBinaries(m, &bins, topology.Binaries...)
}

// testPrefix names the tests' namespaces apart from a lab a user runs
// ("spl-"), which the tests must not tear down.
const testPrefix = "splt-"

// requireLab fails the test (never skips: CI runs as root with iproute2)
// when the lab cannot run here.
func requireLab(t *testing.T) {
	t.Helper()
	if err := RequireIP(); err != nil {
		t.Fatalf("%v", err)
	}
}

// startLab brings the lab up and tears it down when the test ends, failed
// or not, checking that nothing is left; on failure it prints the logs.
func startLab(t *testing.T) *Lab {
	t.Helper()
	requireLab(t)
	cfg := Config{Prefix: testPrefix, StateDir: t.TempDir(), Bins: bins}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	l, err := Up(ctx, cfg)
	if err != nil {
		Clean(context.Background(), cfg)
		t.Fatalf("Up: %v", err)
	}
	t.Logf("lab up in %v", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			for _, g := range l.Cluster.GFEs {
				t.Logf("--- %s log (tail):\n%s", g.Name, tail(g.Proc.Output(), 2500))
			}
			for _, p := range l.Cluster.CPs {
				t.Logf("--- %s log (tail):\n%s", p.Name, tail(p.Output(), 2500))
			}
		}
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("Down: %v", err)
		}
		if left, _ := Namespaces(testPrefix); len(left) > 0 {
			t.Errorf("namespaces left after Down: %v", left)
		}
	})
	return l
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// nearest is each site's own region (8 ms away).
var nearest = map[string]string{"nyc": "us-east", "lon": "eu-west", "tokyo": "asia-east"}

// TestLab runs the deployment on eleven namespace hosts and checks, on the
// one lab, in order: each site's traffic goes to its nearest region; a
// backend host whose link goes down is routed around within the
// health-check window with 0 failed requests after it; a gfe partitioned
// from gossip is dropped by the others within 5 s, serves on, and rejoins;
// the three gfes restarted one at a time under load, as docs/DEPLOY.md's
// rolling upgrade says, fail 0 requests, and so do the two control planes
// restarted one at a time; a control-plane host that dies leaves the other replica keeping every gfe current with 0
// failed requests; hosts without the gossip key or with a certificate of
// another CA cannot join (SECURITY.md, threat model).
func TestLab(t *testing.T) {
	l := startLab(t)
	t.Run("NearestRegion", func(t *testing.T) { testNearestRegion(t, l) })
	t.Run("BackendHostLinkDown", func(t *testing.T) { testBackendHostDown(t, l) })
	t.Run("GFEPartitionedFromGossip", func(t *testing.T) { testGFEPartition(t, l) })
	t.Run("RollingRestartOfGFEs", func(t *testing.T) { testRollingRestart(t, l) })
	t.Run("RollingRestartOfControlPlanes", func(t *testing.T) { testRollingRestartCPs(t, l) })
	t.Run("ControlPlaneHostDies", func(t *testing.T) { testControlPlaneDies(t, l) })
	t.Run("IntrudersCannotJoin", func(t *testing.T) { testIntruders(t, l) })
}

// testNearestRegion drives 40 req/s from each client host for 6 s, the
// last 4 s measured, and wants ≥ 99% of each site's answers from its own region
// (capacity 320 req/s per region, so nothing spills) and 0 failures.
func testNearestRegion(t *testing.T, l *Lab) {
	rates := map[string]float64{"nyc": 40, "lon": 40, "tokyo": 40}
	res, err := l.Cluster.Drive(context.Background(), rates, 2*time.Second, 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for site, region := range nearest {
		r := res[site]
		if r == nil {
			t.Fatalf("no result for %s", site)
		}
		share := float64(r.ByRegion[region]) / float64(max(r.OK, 1))
		t.Logf("%-5s sent %d, ok %d, failed %d, by region %v: %.1f%% to %s", site, r.Sent, r.OK, r.Failed, r.ByRegion, 100*share, region)
		if r.Sent < 140 {
			t.Errorf("%s sent %d requests in 4 s at 40/s, want >= 140", site, r.Sent)
		}
		if r.Failed != 0 {
			t.Errorf("%s: %d of %d requests failed (%v %v), want 0", site, r.Failed, r.Sent, r.Status, r.Errors)
		}
		if share < 0.99 {
			t.Errorf("%s: %.3f of answers from %s, want >= 0.99 (%v)", site, share, region, r.ByRegion)
		}
	}
}

// healthWindow bounds how long the gfes take to route around a backend host
// that vanished: the control planes' health checks (every 500 ms, timeout
// 250 ms, 2 failures) plus a plan interval (250 ms) and gossip, with slack
// for a busy machine.
const healthWindow = 4 * time.Second

// testBackendHostDown takes backend-us-east's link down under load and
// wants every gfe to see the region unhealthy within healthWindow and 0
// failed requests throughout: the requests in flight to us-east and those
// sent there before the gfes knew are retried in another region after
// per_try_timeout (PerTryTimeout); after the window none is served by
// us-east, and nyc's traffic goes to eu-west. It brings the link back and
// waits until all is healthy again.
func testBackendHostDown(t *testing.T, l *Lab) {
	ctx := context.Background()
	c := l.Cluster
	if b, err := os.ReadFile(c.ConfigPath); err != nil || !strings.Contains(string(b), "per_try_timeout: "+PerTryTimeout.String()) {
		t.Fatalf("the lab's config has no per_try_timeout %v (%v):\n%s", PerTryTimeout, err, b)
	}
	admins := gfeMetrics(c)
	timeoutsBefore := metricSum(l, "spillway_gfe_per_try_timeouts_total", admins...)
	retriesBefore := metricSum(l, "spillway_gfe_retries_total", admins...)
	load := c.StartLoad(map[string]float64{"nyc": 40, "lon": 20, "tokyo": 20})
	defer load.Stop() // a second Stop returns the first one's results
	// Load flows before the failure: nyc's gfe has made decisions.
	waitDecisions(t, c, "nyc", 40)

	down := time.Now()
	if err := l.SetLink(ctx, "backend-us-east", false); err != nil {
		t.Fatal(err)
	}
	linkUp := false
	defer func() {
		if !linkUp {
			l.SetLink(ctx, "backend-us-east", true)
		}
	}()
	if err := waitRegionHealthy(ctx, c, "us-east", false, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	converge := time.Since(down)
	// Measure healthWindow's worth of load after the window.
	if err := topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
		return time.Since(down) >= 2*healthWindow, nil
	}); err != nil {
		t.Fatal(err)
	}
	res, err := load.Stop()
	if err != nil {
		t.Fatal(err)
	}
	var sentAll, failedAll, sentIn, failedIn int64
	for _, site := range []string{"nyc", "lon", "tokyo"} {
		r := res[site]
		from := down.Sub(r.Start)
		before := r.Window(from, from+healthWindow)
		after := r.Window(from+healthWindow, r.Records[len(r.Records)-1].At+1)
		sentIn, failedIn = sentIn+before.Sent, failedIn+before.Failed
		sentAll, failedAll = sentAll+after.Sent, failedAll+after.Failed
		t.Logf("%-5s during the window: sent %d, failed %d (%v); after: sent %d, failed %d, by region %v",
			site, before.Sent, before.Failed, before.Errors, after.Sent, after.Failed, after.ByRegion)
		if before.Failed != 0 {
			t.Errorf("%s: %d of %d requests failed during the window, want 0: retried elsewhere (%v %v)", site, before.Failed, before.Sent, before.Status, before.Errors)
		}
		if after.Failed != 0 {
			t.Errorf("%s: %d of %d requests failed after the window, want 0 (%v %v)", site, after.Failed, after.Sent, after.Status, after.Errors)
		}
		if n := after.Routed["us-east"]; n != 0 {
			t.Errorf("%s: %d requests reached us-east after the window, want 0", site, n)
		}
		if site == "nyc" && after.ByRegion["eu-west"] < after.OK*9/10 {
			t.Errorf("nyc: %d of %d answers from eu-west after the window, want >= 90%% (%v)", after.ByRegion["eu-west"], after.OK, after.ByRegion)
		}
		if after.Sent == 0 {
			t.Errorf("%s sent nothing after the window", site)
		}
	}
	timeouts := metricSum(l, "spillway_gfe_per_try_timeouts_total", admins...) - timeoutsBefore
	retries := metricSum(l, "spillway_gfe_retries_total", admins...) - retriesBefore
	t.Logf("backend host us-east link down: every gfe routed around it %v after; during the %v window %d sent, %d failed; after it %d sent, %d failed; %g attempts abandoned at per_try_timeout %v, %g retries",
		converge.Round(time.Millisecond), healthWindow, sentIn, failedIn, sentAll, failedAll, timeouts, PerTryTimeout, retries)
	if timeouts < 1 {
		t.Errorf("no attempt was abandoned at per_try_timeout: the link went down with none in flight to us-east, so the test proved nothing of retries")
	}
	if converge > healthWindow {
		t.Errorf("gfes saw us-east unhealthy %v after its link went down, want <= %v", converge, healthWindow)
	}

	if err := l.SetLink(ctx, "backend-us-east", true); err != nil {
		t.Fatal(err)
	}
	linkUp = true
	if err := waitRegionHealthy(ctx, c, "us-east", true, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// waitDecisions waits until site's gfe has made n routing decisions: the
// load flows through it.
func waitDecisions(t *testing.T, c *topology.Cluster, site string, n int64) {
	t.Helper()
	ctx := context.Background()
	if err := topology.WaitFor(ctx, 10*time.Second, func() (bool, error) {
		st, err := c.Status(ctx, c.GFE(site))
		if err != nil {
			return false, err
		}
		return decisions(st) >= n, fmt.Errorf("%s made %d decisions", site, decisions(st))
	}); err != nil {
		t.Fatal(err)
	}
}

// decisions sums a gfe's routing decisions over its services.
func decisions(st *status.Status) int64 {
	var n int64
	for _, s := range st.Services {
		for _, d := range s.Decisions {
			n += d
		}
	}
	return n
}

// waitRegionHealthy waits until every gfe sees every group of region with
// all instances healthy (healthy) or none (!healthy).
func waitRegionHealthy(ctx context.Context, c *topology.Cluster, region string, healthy bool, timeout time.Duration) error {
	return topology.WaitFor(ctx, timeout, func() (bool, error) {
		for _, g := range c.GFEs {
			st, err := c.Status(ctx, g)
			if err != nil {
				return false, err
			}
			for _, s := range st.Services {
				for _, gr := range s.Groups {
					if gr.Region != region {
						continue
					}
					if healthy && gr.Healthy != gr.Instances || !healthy && gr.Healthy != 0 {
						return false, fmt.Errorf("%s sees %s with %d of %d healthy", g.Name, gr.Name, gr.Healthy, gr.Instances)
					}
				}
			}
		}
		return true, nil
	})
}

// testGFEPartition cuts gfe-nyc off from the control planes and
// the other gfes (not from its clients and backends) under load. The other
// gfes must drop it and its demand within 5 s; it must keep serving its
// last world with 0 failed requests; when the cut heals it must rejoin
// (every gfe sees every member again) and serve the others' config.
func testGFEPartition(t *testing.T, l *Lab) {
	ctx := context.Background()
	c := l.Cluster
	load := c.StartLoad(map[string]float64{"nyc": 40, "lon": 20, "tokyo": 20})
	defer load.Stop() // a second Stop returns the first one's results
	nyc := c.GFE("nyc")
	others := []*topology.GFE{c.GFE("lon"), c.GFE("tokyo")}
	demandOf := func(st *status.Status, site string) float64 {
		var d float64
		for _, s := range st.Services {
			for _, ss := range s.Sites {
				if ss.Name == site {
					d += ss.DemandRPS
				}
			}
		}
		return d
	}
	// The others see nyc's demand before the cut.
	if err := topology.WaitFor(ctx, 15*time.Second, func() (bool, error) {
		for _, g := range others {
			st, err := c.Status(ctx, g)
			if err != nil {
				return false, err
			}
			if d := demandOf(st, "nyc"); d < 20 {
				return false, fmt.Errorf("%s sees nyc's demand %.1f req/s", g.Name, d)
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	var peers []netip.Prefix
	for k := range c.Spec.ControlPlanes {
		peers = append(peers, netip.PrefixFrom(netip.MustParseAddr(c.Spec.ControlPlaneIP(k)), 32))
	}
	for _, g := range others {
		peers = append(peers, netip.PrefixFrom(netip.MustParseAddr(g.SourceIP), 32))
	}
	cut := time.Now()
	if err := l.Partition(ctx, "gfe-nyc", true, peers...); err != nil {
		t.Fatal(err)
	}
	healed := false
	defer func() {
		if !healed {
			l.Partition(ctx, "gfe-nyc", false, peers...)
		}
	}()
	err := topology.WaitFor(ctx, 20*time.Second, func() (bool, error) {
		for _, g := range others {
			st, err := c.Status(ctx, g)
			if err != nil {
				return false, err
			}
			if slices.Contains(st.Members, nyc.Name) || demandOf(st, "nyc") > 0 {
				return false, fmt.Errorf("%s still has %s (members %v, nyc demand %.1f)", g.Name, nyc.Name, st.Members, demandOf(st, "nyc"))
			}
		}
		return true, nil
	})
	dropped := time.Since(cut)
	if err != nil {
		t.Fatalf("after the cut: %v", err)
	}
	// Serve partitioned for a while: 3 s after the cut at least.
	if err := topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
		return time.Since(cut) >= 3*time.Second, nil
	}); err != nil {
		t.Fatal(err)
	}
	nycSt, err := c.Status(ctx, nyc)
	if err != nil {
		t.Fatal(err)
	}
	if !nycSt.Ready || nycSt.ConfigVersion == "" {
		t.Errorf("partitioned %s: ready=%t config %q, want its last world", nyc.Name, nycSt.Ready, nycSt.ConfigVersion)
	}

	heal := time.Now()
	if err := l.Partition(ctx, "gfe-nyc", false, peers...); err != nil {
		t.Fatal(err)
	}
	healed = true
	err = topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
		var version string
		for _, g := range c.GFEs {
			st, err := c.Status(ctx, g)
			if err != nil {
				return false, err
			}
			if len(st.Members) != len(c.GFEs)+c.Spec.ControlPlanes {
				return false, fmt.Errorf("%s sees members %v", g.Name, st.Members)
			}
			if version != "" && st.ConfigVersion != version {
				return false, fmt.Errorf("%s serves config %s, another %s", g.Name, st.ConfigVersion, version)
			}
			version = st.ConfigVersion
		}
		return true, nil
	})
	rejoined := time.Since(heal)
	if err != nil {
		t.Fatalf("after healing: %v", err)
	}
	res, err := load.Stop()
	if err != nil {
		t.Fatal(err)
	}
	r := res["nyc"]
	t.Logf("gfe-nyc partitioned from gossip: the others dropped it and its demand %v after the cut; it served %d requests, %d failed, by region %v; it rejoined %v after the heal",
		dropped.Round(time.Millisecond), r.Sent, r.Failed, r.ByRegion, rejoined.Round(time.Millisecond))
	if dropped > 5*time.Second {
		t.Errorf("the other gfes dropped nyc's demand %v after the cut, want <= 5s", dropped)
	}
	for site, r := range res {
		if r.Failed != 0 {
			t.Errorf("%s: %d of %d requests failed, want 0 (%v %v)", site, r.Failed, r.Sent, r.Status, r.Errors)
		}
	}
}

// dnsTTL is how long a DNS change takes to reach the lab's clients: Go's
// resolver re-reads /etc/hosts within 5 s (Lab.SetDNS).
const dnsTTL = 6 * time.Second

// testRollingRestart restarts the three gfes one at a time under load from
// clients that reach them by the lab's DNS name (Name: their own site's gfe
// first, the others after), the way docs/DEPLOY.md's rolling upgrade says:
// take the gfe out of the name and wait the TTL; restart it (SIGTERM drains
// it: new connections refused, requests in flight finished, idle
// keep-alive connections closed, and clients reopen them to the addresses
// the name now gives); once it is ready, put it back. It wants 0 failed
// requests at every site, and each restarted gfe answering a request.
// (Clients come back to a gfe put back as they open new connections: those
// of the next gfe restarted, for instance.)
func testRollingRestart(t *testing.T, l *Lab) {
	ctx := context.Background()
	c := l.Cluster
	rates := map[string]float64{"nyc": 40, "lon": 20, "tokyo": 20}
	load := c.StartLoadTo(rates, func(string) string { return "http://" + Name + ":8080/" })
	defer load.Stop() // a second Stop returns the first one's results
	defer func() {
		for _, s := range c.Spec.Sites {
			l.SetDNS(s.Name, l.DNS(s.Name)...)
		}
	}()
	for site := range rates {
		waitDecisions(t, c, site, 20)
	}
	begin := time.Now()
	for _, s := range c.Spec.Sites {
		gf := c.GFE(s.Name)
		for _, cs := range c.Spec.Sites {
			if err := l.SetDNS(cs.Name, slices.DeleteFunc(l.DNS(cs.Name), func(a string) bool { return a == gf.SourceIP })...); err != nil {
				t.Fatal(err)
			}
		}
		out := time.Now()
		if err := topology.WaitFor(ctx, 2*dnsTTL, func() (bool, error) { return time.Since(out) >= dnsTTL, nil }); err != nil {
			t.Fatal(err)
		}
		drained, ready, err := l.RestartGFE(ctx, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, cs := range c.Spec.Sites {
			if err := l.SetDNS(cs.Name, l.DNS(cs.Name)...); err != nil {
				t.Fatal(err)
			}
		}
		// It serves: a request through it is answered.
		resp, err := l.Client.Get(gf.URL + "/")
		if err != nil {
			t.Fatalf("GET through the restarted %s: %v", gf.Name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET through the restarted %s: %d, want 200", gf.Name, resp.StatusCode)
		}
		t.Logf("%s: out of the name for %v, drained and exited in %v, ready %v after its start; a GET through it: %d from %s",
			gf.Name, dnsTTL, drained.Round(time.Millisecond), ready.Round(time.Millisecond), resp.StatusCode, resp.Header.Get("X-Spillway-Region"))
	}
	res, err := load.Stop()
	if err != nil {
		t.Fatal(err)
	}
	var sent, failed int64
	for _, s := range c.Spec.Sites {
		r := res[s.Name]
		sent, failed = sent+r.Sent, failed+r.Failed
		t.Logf("%-5s sent %d, failed %d, by region %v", s.Name, r.Sent, r.Failed, r.ByRegion)
		if r.Failed != 0 {
			t.Errorf("%s: %d of %d requests failed during the rolling restart, want 0 (%v %v)", s.Name, r.Failed, r.Sent, r.Status, r.Errors)
		}
	}
	t.Logf("rolling restart of %d gfes under load in %v: %d requests sent, %d failed", len(c.GFEs), time.Since(begin).Round(time.Millisecond), sent, failed)
	if min := int64(len(c.GFEs)) * int64(dnsTTL/time.Second) * 80 / 2; sent < min {
		t.Errorf("%d requests sent, want >= %d", sent, min)
	}
}

// testRollingRestartCPs restarts the control planes one at a time under
// load, as docs/DEPLOY.md's rolling upgrade does (restart, wait for
// /readyz, then the next): the gfes keep routing by their last snapshot
// and reconnect to the other replica. It wants 0 failed requests, each
// replica ready again, the two owning every group's health checks between
// them after each restart, and every gfe on the control planes' config.
func testRollingRestartCPs(t *testing.T, l *Lab) {
	ctx := context.Background()
	c := l.Cluster
	load := c.StartLoad(map[string]float64{"nyc": 30, "lon": 30, "tokyo": 30})
	defer load.Stop() // a second Stop returns the first one's results
	waitDecisions(t, c, "tokyo", 30)
	groups := groupsOf(&c.Spec)
	begin := time.Now()
	for k := range c.CPs {
		start := time.Now()
		if err := c.CPs[k].Stop(30 * time.Second); err != nil {
			t.Fatalf("cp-%d on SIGTERM: %v", k+1, err)
		}
		stopped := time.Since(start)
		if err := c.StartControlPlane(k); err != nil {
			t.Fatal(err)
		}
		if err := l.writePids(); err != nil {
			t.Fatal(err)
		}
		admin := "http://" + c.Spec.ControlPlaneIP(k) + ":7100"
		err := topology.WaitFor(ctx, 60*time.Second, func() (bool, error) {
			resp, err := l.Client.Get(admin + "/readyz")
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, fmt.Errorf("cp-%d /readyz: %d", k+1, resp.StatusCode)
			}
			owned := 0
			for j := range c.CPs {
				p, err := cpStatus(ctx, l, "http://"+c.Spec.ControlPlaneIP(j)+":7100/status")
				if err != nil {
					return false, err
				}
				if len(p.ControlPlanes) != len(c.CPs) {
					return false, fmt.Errorf("cp-%d sees control planes %v", j+1, p.ControlPlanes)
				}
				owned += len(p.OwnedGroups)
			}
			return owned == groups, fmt.Errorf("the control planes own %d of %d groups", owned, groups)
		})
		if err != nil {
			t.Fatalf("after restarting cp-%d: %v", k+1, err)
		}
		t.Logf("cp-%d: stopped in %v, ready and owning its share of the health checks %v after its start", k+1, stopped.Round(time.Millisecond), (time.Since(start) - stopped).Round(time.Millisecond))
	}
	// Every gfe is current: it serves the control planes' snapshot.
	var cpVersion string
	if err := topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
		var p struct {
			SnapshotVersion string `json:"snapshot_version"`
		}
		resp, err := l.Client.Get("http://" + c.Spec.ControlPlaneIP(0) + ":7100/status")
		if err != nil {
			return false, err
		}
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil {
			return false, err
		}
		cpVersion = p.SnapshotVersion
		for _, g := range c.GFEs {
			st, err := c.Status(ctx, g)
			if err != nil {
				return false, err
			}
			if st.ConfigVersion != cpVersion {
				return false, fmt.Errorf("%s serves config %q, the control planes %q", g.Name, st.ConfigVersion, cpVersion)
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	restarted := time.Since(begin)
	// Keep the load on for 5 s after the first stop.
	sent, failed := stopLoadWantNoFailures(t, load, begin.Add(5*time.Second))
	t.Logf("rolling restart of %d control planes under load in %v: %d requests sent, %d failed; every gfe serves config %s",
		len(c.CPs), restarted.Round(time.Millisecond), sent, failed, cpVersion)
}

// testControlPlaneDies kills cp-1 and takes its host's link down under
// load. cp-2 must take over every group's health checks, and a config edit
// made afterwards (max_rate_per_instance 40 → 41) must reach every gfe
// through cp-2 alone, with 0 failed requests throughout (5 s of load after
// the death).
func testControlPlaneDies(t *testing.T, l *Lab) {
	ctx := context.Background()
	c := l.Cluster
	load := c.StartLoad(map[string]float64{"nyc": 30, "lon": 30, "tokyo": 30})
	defer load.Stop() // a second Stop returns the first one's results
	waitDecisions(t, c, "tokyo", 30)
	cp2 := "http://" + c.Spec.ControlPlaneIP(1) + ":7100/status"
	before, err := cpStatus(ctx, l, cp2)
	if err != nil {
		t.Fatal(err)
	}

	died := time.Now()
	c.CPs[0].Kill()
	if err := l.SetLink(ctx, "cp-1", false); err != nil {
		t.Fatal(err)
	}
	groups := groupsOf(&c.Spec)
	var after *cpPage
	err = topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
		after, err = cpStatus(ctx, l, cp2)
		if err != nil {
			return false, err
		}
		return len(after.ControlPlanes) == 1 && len(after.OwnedGroups) == groups,
			fmt.Errorf("cp-2 sees control planes %v and owns %d of %d groups", after.ControlPlanes, len(after.OwnedGroups), groups)
	})
	if err != nil {
		t.Fatalf("after cp-1 died: %v", err)
	}
	reassigned := time.Since(died)

	b, err := os.ReadFile(c.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.ReplaceAll(string(b), "max_rate_per_instance: 40}", "max_rate_per_instance: 41}")
	if edited == string(b) {
		t.Fatal("the config has no max_rate_per_instance: 40 to edit")
	}
	edit := time.Now()
	if err := os.WriteFile(c.ConfigPath, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	// Every group of 4 instances then declares 4 × 41 req/s.
	err = topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
		for _, g := range c.GFEs {
			st, err := c.Status(ctx, g)
			if err != nil {
				return false, err
			}
			for _, s := range st.Services {
				for _, gr := range s.Groups {
					if gr.DeclaredRPS != 4*41 {
						return false, fmt.Errorf("%s: group %s declares %g req/s, want 164", g.Name, gr.Name, gr.DeclaredRPS)
					}
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("after cp-1 died, the config change did not reach every gfe: %v", err)
	}
	current := time.Since(edit)
	// Keep the load on for 5 s after the death.
	sent, failed := stopLoadWantNoFailures(t, load, died.Add(5*time.Second))
	t.Logf("control-plane host cp-1 died: cp-2 owned %d of %d groups before, all %d %v after; the config change reached all %d gfes %v after it was written; %d requests sent, %d failed",
		len(before.OwnedGroups), groups, groups, reassigned.Round(time.Millisecond), len(c.GFEs), current.Round(time.Millisecond), sent, failed)
	if sent < 3*30*4 {
		t.Errorf("%d requests sent in 5 s at 90/s, want >= 360", sent)
	}
}

// stopLoadWantNoFailures keeps load on until until, stops it, fails the
// test for every site with a failed request, and returns the requests sent
// and failed over all sites.
func stopLoadWantNoFailures(t *testing.T, load *topology.Load, until time.Time) (sent, failed int64) {
	t.Helper()
	if err := topology.WaitFor(context.Background(), time.Until(until)+30*time.Second, func() (bool, error) {
		return !time.Now().Before(until), nil
	}); err != nil {
		t.Fatal(err)
	}
	res, err := load.Stop()
	if err != nil {
		t.Fatal(err)
	}
	for site, r := range res {
		sent, failed = sent+r.Sent, failed+r.Failed
		if r.Failed != 0 {
			t.Errorf("%s: %d of %d requests failed, want 0 (%v %v)", site, r.Failed, r.Sent, r.Status, r.Errors)
		}
	}
	return sent, failed
}

// groupsOf returns the number of instance groups of spec (one per zone):
// the health-check groups the control planes share.
func groupsOf(spec *topology.Spec) int {
	n := 0
	for _, r := range spec.Regions {
		n += len(r.Zones)
	}
	return n
}

// cpPage is what the tests read of a control plane's /status.
type cpPage struct {
	ControlPlanes []string `json:"control_planes"`
	OwnedGroups   []string `json:"owned_groups"`
}

// cpStatus fetches and decodes a control plane's /status at url.
func cpStatus(ctx context.Context, l *Lab, url string) (*cpPage, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := l.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var p cpPage
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return nil, fmt.Errorf("decode %s: %w", url, err)
	}
	return &p, nil
}

// testIntruders starts three look-alikes of gfe-nyc-1 on an "intruder" host
// plugged into the switch: one gossiping without a key (--gossip-insecure),
// one with a key of its own, one whose certificate comes from another CA.
// The first two must never appear among any gfe's gossip members and see
// only themselves; the third is refused at the TLS handshake (counted by
// the control plane) and never gets a config.
func testIntruders(t *testing.T, l *Lab) {
	ctx := context.Background()
	c := l.Cluster
	addr := func(last int) netip.Addr { return netip.MustParseAddr(c.Spec.GFEIP(0, last)) }
	if _, err := l.AddHost(ctx, "intruder", addr(50), addr(51), addr(52)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wrongKey := filepath.Join(dir, "wrong.keyring")
	k := make([]byte, 32)
	rand.Read(k)
	if err := os.WriteFile(wrongKey, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other, err := devpki.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherFiles, err := other.IssueFiles(dir, "gfe-intruder-tls", devpki.Leaf{CommonName: "gfe-intruder-tls", Names: []string{"gfe-intruder-tls" + topology.GFEIdentitySuffix}, ValidFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	refusedBefore := tlsRefused(t, l)

	base := c.GFE("nyc").Args()
	type intruder struct {
		name string
		last int
		set  map[string]string // flag → new value; "" removes the flag
		add  []string
		p    *proc.Proc
	}
	intruders := []*intruder{
		{name: "gfe-intruder-nokey", last: 50, set: map[string]string{"--gossip-key-file": ""}, add: []string{"--gossip-insecure"}},
		{name: "gfe-intruder-wrongkey", last: 51, set: map[string]string{"--gossip-key-file": wrongKey}},
		{name: "gfe-intruder-tls", last: 52, set: map[string]string{"--tls-ca": otherFiles.CA, "--tls-cert": otherFiles.Cert, "--tls-key": otherFiles.Key}},
	}
	for _, in := range intruders {
		ipS := addr(in.last).String()
		set := map[string]string{
			"--node": in.name, "--listen": ipS + ":8080", "--admin": ipS + ":9090",
			"--source-ip": ipS, "--gossip-addr": ipS + ":7946",
		}
		for f, v := range in.set {
			set[f] = v
		}
		args := append(editFlags(base, set), in.add...)
		p, err := l.Start("intruder", in.name, bins["gfe"], args...)
		if err != nil {
			t.Fatal(err)
		}
		in.p = p
		t.Cleanup(func() { p.Stop(5 * time.Second) })
	}
	nokey, wrongkey, badTLS := intruders[0], intruders[1], intruders[2]

	// The gossip intruders have tried to join at least twice.
	for _, in := range []*intruder{nokey, wrongkey} {
		err := topology.WaitFor(ctx, 20*time.Second, func() (bool, error) {
			select {
			case <-in.p.Done():
				return false, fmt.Errorf("%s exited: %v\n%s", in.name, in.p.Err(), tail(in.p.Output(), 1500))
			default:
			}
			return strings.Count(in.p.Output(), `"join failed"`) >= 2, fmt.Errorf("%s has not failed to join twice yet", in.name)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The TLS intruder has been refused by a control plane.
	var refused float64
	err = topology.WaitFor(ctx, 20*time.Second, func() (bool, error) {
		refused = tlsRefused(t, l) - refusedBefore
		return refused >= 1, fmt.Errorf("control planes refused %g handshakes", refused)
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, g := range c.GFEs {
		st, err := c.Status(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range []*intruder{nokey, wrongkey} {
			if slices.Contains(st.Members, in.name) {
				t.Errorf("%s lists %s among its gossip members %v", g.Name, in.name, st.Members)
			}
		}
	}
	for _, in := range []*intruder{nokey, wrongkey} {
		st, err := c.Status(ctx, &topology.GFE{Name: in.name, Admin: "http://" + addr(in.last).String() + ":9090"})
		if err != nil {
			t.Fatalf("%s /status: %v", in.name, err)
		}
		if len(st.Members) > 1 {
			t.Errorf("%s sees gossip members %v, want only itself", in.name, st.Members)
		}
		t.Logf("%s: join failed %d times, sees members %v", in.name, strings.Count(in.p.Output(), `"join failed"`), st.Members)
	}
	st, err := c.Status(ctx, &topology.GFE{Name: badTLS.name, Admin: "http://" + addr(badTLS.last).String() + ":9090"})
	if err != nil {
		t.Fatalf("%s /status: %v", badTLS.name, err)
	}
	if st.Ready || st.ConfigVersion != "" {
		t.Errorf("%s, with a certificate of another CA, is ready=%t with config %q; want no config", badTLS.name, st.Ready, st.ConfigVersion)
	}
	t.Logf("%s: control planes refused %g handshakes; it has no config (ready=%t)", badTLS.name, refused, st.Ready)
}

// editFlags returns args with the value of every flag in set replaced
// ("--flag value" pairs), or the pair removed when the new value is "".
func editFlags(args []string, set map[string]string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		v, ok := set[args[i]]
		if !ok || i+1 >= len(args) {
			out = append(out, args[i])
			continue
		}
		if v != "" {
			out = append(out, args[i], v)
		}
		i++
	}
	return out
}

// tlsRefused sums spillway_controlplane_grpc_tls_refused_total over the
// control planes that answer.
func tlsRefused(t *testing.T, l *Lab) float64 {
	t.Helper()
	var urls []string
	for k := range l.Cluster.CPs {
		urls = append(urls, fmt.Sprintf("http://%s:7100/metrics", l.Cluster.Spec.ControlPlaneIP(k)))
	}
	return metricSum(l, "spillway_controlplane_grpc_tls_refused_total", urls...)
}

// gfeMetrics returns the /metrics URL of every gfe of c.
func gfeMetrics(c *topology.Cluster) []string {
	var urls []string
	for _, g := range c.GFEs {
		urls = append(urls, g.Admin+"/metrics")
	}
	return urls
}

// metricSum sums every sample of metric name, whatever its labels, over
// the /metrics pages at urls that answer (a dead process counts nothing).
func metricSum(l *Lab, name string, urls ...string) float64 {
	var sum float64
	for _, url := range urls {
		resp, err := l.Client.Get(url)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for line := range strings.SplitSeq(string(b), "\n") {
			rest, ok := strings.CutPrefix(line, name)
			if !ok || rest == "" || rest[0] != ' ' && rest[0] != '{' {
				continue
			}
			if i := strings.LastIndexByte(rest, ' '); i >= 0 {
				v, _ := strconv.ParseFloat(rest[i+1:], 64)
				sum += v
			}
		}
	}
	return sum
}

// TestCleanAfterCrash leaves what a crashed lab leaves — namespaces with
// the prefix, a process running in one, a pid file — and wants Clean to
// remove all of it, twice in a row.
func TestCleanAfterCrash(t *testing.T) {
	requireLab(t)
	ctx := context.Background()
	cfg := Config{Prefix: "splc-", StateDir: t.TempDir()}
	for round := 1; round <= 2; round++ {
		for _, ns := range []string{"splc-switch", "splc-gfe-nyc"} {
			if err := ip(ctx, "netns", "add", ns); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("ip", "netns", "exec", "splc-gfe-nyc", "sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		// The process is in the namespace before Clean looks.
		if err := topology.WaitFor(ctx, 10*time.Second, func() (bool, error) {
			pids, err := nsPids(ctx, "splc-gfe-nyc")
			return len(pids) == 1, err
		}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pidFile(cfg.StateDir), []byte(fmt.Sprintf("%d /nonexistent\n", cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := Clean(ctx, cfg); err != nil {
			t.Fatalf("round %d: Clean: %v", round, err)
		}
		if left, _ := Namespaces("splc-"); len(left) != 0 {
			t.Errorf("round %d: namespaces left: %v", round, left)
		}
		select {
		case err := <-waited:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("round %d: the process in the namespace ended with %v, want killed", round, err)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("round %d: the process in the namespace survived Clean", round)
		}
		if _, err := os.Stat(pidFile(cfg.StateDir)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("round %d: pid file left: %v", round, err)
		}
	}
}

// TestHostOf pins which lab host each topology process runs on.
func TestHostOf(t *testing.T) {
	for _, tt := range []struct{ process, want string }{
		{"gfe-nyc-1", "gfe-nyc"},
		{"gfe-tokyo-2", "gfe-tokyo"},
		{"loadgen-lon", "client-lon"},
		{"cp-2", "cp-2"},
		{"backend-asia-east", "backend-asia-east"},
	} {
		if got := hostOf(tt.process); got != tt.want {
			t.Errorf("hostOf(%q) = %q, want %q", tt.process, got, tt.want)
		}
	}
}
