// Package e2e holds the end-to-end tests: real control plane, gfe and test
// backend processes on loopback, talking real gRPC, memberlist and HTTP.
// Each test owns a 127.N.0.0/16 of its own (topology.Spec.Net).
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/edge"
	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/topology"
)

// bins are the binaries built once for every test in the package.
var bins map[string]string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spillway-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	bins, err = proc.Build(ctx, dir, false, "gfe", "controlplane", "testbackend")
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startCluster starts spec and stops it when the test ends; on failure it
// prints the processes' logs.
func startCluster(t *testing.T, spec topology.Spec) *topology.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := topology.Start(ctx, spec, topology.Options{Dir: t.TempDir(), Bins: bins})
	if err != nil {
		t.Fatalf("topology.Start: %v", err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			dumpLogs(t, c)
		}
	})
	return c
}

func dumpLogs(t *testing.T, c *topology.Cluster) {
	t.Helper()
	for i, p := range c.CPs {
		if p != nil {
			t.Logf("--- control plane %d log (tail):\n%s", i+1, tail(p.Output(), 3000))
		}
	}
	for _, g := range c.GFEs {
		t.Logf("--- %s log (tail):\n%s", g.Name, tail(g.Proc.Output(), 3000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// load drives rate req/s at every gfe named in rates (by site) for d, from
// client addresses in each site's /24, and returns each site's result.
func load(t *testing.T, c *topology.Cluster, rates map[string]float64, d time.Duration) map[string]*loadgen.Result {
	t.Helper()
	return loadWarm(t, c, rates, 0, d)
}

// phase drives rates for settle+measure without a break, records only the
// measure part, and takes every gfe's /status half way through it.
func phase(t *testing.T, c *topology.Cluster, rates map[string]float64, settle, measure time.Duration) (map[string]*loadgen.Result, map[string]*edge.Status) {
	t.Helper()
	status := map[string]*edge.Status{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(settle + measure/2) // a sampling point inside the measured window, not a wait for a condition
		for _, g := range c.GFEs {
			if st, err := topology.Status(context.Background(), g); err == nil {
				status[g.Site] = st
			}
		}
	}()
	res := loadWarm(t, c, rates, settle, settle+measure)
	<-done
	return res, status
}

func loadWarm(t *testing.T, c *topology.Cluster, rates map[string]float64, warmup, d time.Duration) map[string]*loadgen.Result {
	t.Helper()
	res, err := c.Drive(context.Background(), rates, warmup, d)
	if err != nil {
		t.Error(err)
	}
	return res
}

// threeSites is the e2e topology: regions us-east, eu-west, asia-east of two
// zones with four 40 req/s instances each (320 req/s per region), and sites
// nyc, lon, tokyo each near one region.
func threeSites(net int) topology.Spec {
	ms := time.Millisecond
	s := topology.Spec{
		Net:   net,
		Queue: 64,
		Sites: []topology.Site{
			{Name: "nyc", RTT: map[string]time.Duration{"us-east": 4 * ms, "eu-west": 20 * ms, "asia-east": 40 * ms}},
			{Name: "lon", RTT: map[string]time.Duration{"us-east": 20 * ms, "eu-west": 4 * ms, "asia-east": 35 * ms}},
			{Name: "tokyo", RTT: map[string]time.Duration{"us-east": 40 * ms, "eu-west": 35 * ms, "asia-east": 4 * ms}},
		},
	}
	for _, r := range []string{"us-east", "eu-west", "asia-east"} {
		s.Regions = append(s.Regions, topology.Region{Name: r, Zones: []string{"b", "c"}, Instances: 4, Rate: 40})
	}
	return s
}
