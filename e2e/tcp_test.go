package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/testbackend"
	"github.com/spillway-lb/spillway/internal/topology"
)

// The TCP proxy deployment (net 50): one gfe at nyc, 5 ms from us-east and
// 40 ms from eu-west. Next to the topology's HTTP service "web" (which the
// gfe's HTTP RTT probes hit, its groups coming first in every zone), a
// CONNECTION-mode service "db" over tcp echo instances of a backend process
// of the test's own, served by the gfe's tcp listener "db":
//
//	us-east-b-db  us-east-b-t1, -t2   25 connections each (max_concurrency 25)
//	us-east-c-db  us-east-c-t1, -t2   25 connections each (max_concurrency 25)
//	eu-west-b-db  eu-west-b-t1, -t2   100 connections each
//
// us-east holds 100 connections and eu-west 200, so nyc's 200 connections
// fill us-east and spill the other half to eu-west.
const (
	tcpNet      = 50
	tcpPort     = 15432
	tcpConns    = 200
	tcpAdmin    = "127.50.200.1:9999"
	tcpGFESrc   = "127.50.1.0/24" // the gfe's source addresses (site 1)
	tcpShareTol = 0.03            // see TestTCPProxyEndToEnd
)

// tcpInstance is one tcp echo instance of the test's backend process.
type tcpInstance struct {
	name, addr, region, zone string
	maxConns                 int // declared max_connections_per_instance, also its max_concurrency in us-east
}

func tcpInstances() []tcpInstance {
	var out []tcpInstance
	for _, z := range []struct {
		region, zone, host string
		port, perInst      int
	}{
		{"us-east", "us-east-b", "127.50.101.1", 9101, 25},
		{"us-east", "us-east-c", "127.50.101.1", 9111, 25},
		{"eu-west", "eu-west-b", "127.50.102.1", 9101, 100},
	} {
		for i := 1; i <= 2; i++ {
			out = append(out, tcpInstance{
				name: fmt.Sprintf("%s-t%d", z.zone, i), addr: fmt.Sprintf("%s:%d", z.host, z.port+i-1),
				region: z.region, zone: z.zone, maxConns: z.perInst,
			})
		}
	}
	return out
}

// tcpEditConfig adds the db groups after each zone's web group, the db
// service and the tcp listener to the topology's config.
func tcpEditConfig(insts []tcpInstance) func(string) string {
	webGroup := regexp.MustCompile(`(?m)^          - name: (\S+)-web\n            instances:\n(?:              - address: \S+\n)+`)
	return func(y string) string {
		y = webGroup.ReplaceAllStringFunc(y, func(m string) string {
			zone := webGroup.FindStringSubmatch(m)[1]
			var b strings.Builder
			b.WriteString(m)
			fmt.Fprintf(&b, "          - name: %s-db\n            instances:\n", zone)
			for _, in := range insts {
				if in.zone != zone {
					continue
				}
				mc := 0
				if in.region == "us-east" {
					mc = in.maxConns
				}
				fmt.Fprintf(&b, "              - {address: %s, max_concurrency: %d}\n", in.addr, mc)
			}
			return b.String()
		})
		var svc strings.Builder
		// Planned at the full declared capacity: the instances'
		// max_concurrency holds us-east to it exactly.
		svc.WriteString("  - name: db\n    policy: waterfall\n    balancing_mode: CONNECTION\n    target_utilization: 1\n    backends:\n")
		for _, zone := range []string{"us-east-b", "us-east-c", "eu-west-b"} {
			per := 0
			for _, in := range insts {
				if in.zone == zone {
					per = in.maxConns
				}
			}
			fmt.Fprintf(&svc, "      - {group: %s-db, max_connections_per_instance: %d}\n", zone, per)
		}
		svc.WriteString("    health_check: {protocol: tcp, interval: 500ms, timeout: 250ms, healthy_threshold: 2, unhealthy_threshold: 2, jitter: 0.1}\n")
		y = strings.Replace(y, "routes:\n", svc.String()+"routes:\n", 1)
		return y + fmt.Sprintf("listeners:\n  - {name: db, protocol: tcp, port: %d, service: db}\n", tcpPort)
	}
}

// startTCPBackend starts the tcp instances in a backend process of their own
// with a process admin, emulating nyc's RTT to each region.
func startTCPBackend(t *testing.T, insts []tcpInstance) *proc.Proc {
	t.Helper()
	args := []string{"--admin", tcpAdmin, "--max-concurrency", "0", "--service-time", "0s",
		"--delay", "us-east:" + tcpGFESrc + "=5ms", "--delay", "eu-west:" + tcpGFESrc + "=40ms"}
	for _, in := range insts {
		args = append(args, "--instance", fmt.Sprintf("name=%s,addr=%s,region=%s,zone=%s,proto=tcp", in.name, in.addr, in.region, in.zone))
	}
	p, err := proc.Start("backend-tcp", bins["testbackend"], proc.Options{}, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("--- backend-tcp log (tail):\n%s", tail(p.Output(), 2000))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := proc.WaitHTTP(ctx, "http://"+tcpAdmin+"/admin/stats"); err != nil {
		t.Fatalf("tcp backend admin: %v", err)
	}
	return p
}

// tcpConn is one client connection through the gfe's tcp listener.
type tcpConn struct {
	c        net.Conn
	r        *bufio.Reader
	instance string // from the hello line
}

// tcpDialHello connects to addr and reads the hello line of the instance the
// gfe picked.
func tcpDialHello(addr string) (*tcpConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("hello: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "hello" {
		c.Close()
		return nil, fmt.Errorf("hello line %q", line)
	}
	c.SetReadDeadline(time.Time{})
	return &tcpConn{c: c, r: r, instance: f[1]}, nil
}

func (c *tcpConn) echo(msg string) error {
	c.c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c.c, msg+"\n"); err != nil {
		return err
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg+"\n" {
		return fmt.Errorf("echo of %q through %s = %q", msg, c.instance, got)
	}
	return nil
}

// tcpParallel runs f(i) for i in [0, n) on 20 goroutines and returns the
// errors.
func tcpParallel(n int, f func(i int) error) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		next = make(chan int)
	)
	for range 20 {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// tcpAdminStats returns the backend process's stats by instance name.
func tcpAdminStats(ctx context.Context) (map[string]testbackend.Stats, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+tcpAdmin+"/admin/stats", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var all []testbackend.Stats
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		return nil, err
	}
	out := map[string]testbackend.Stats{}
	for _, s := range all {
		out[s.Instance] = s
	}
	return out, nil
}

func tcpAdminPost(ctx context.Context, path string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+tcpAdmin+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b), nil
}

// tcpPlan returns the gfe's current plan row of service db, as shares by
// region and by group.
func tcpPlan(ctx context.Context, gf *topology.GFE) (regions, groups map[string]float64, err error) {
	st, err := topology.Status(ctx, gf)
	if err != nil {
		return nil, nil, err
	}
	regions, groups = map[string]float64{}, map[string]float64{}
	for _, s := range st.Services {
		if s.Name != "db" {
			continue
		}
		for _, f := range s.Plan {
			regions[f.Region] += f.Share
			groups[f.Group] += f.Share
		}
		return regions, groups, nil
	}
	return nil, nil, errors.New("no service db in /status")
}

// tcpWaitPlan waits until the plan's share of us-east is within 0.01 of want
// (the demand estimate has caught up with the open connections) and
// returns the plan.
func tcpWaitPlan(t *testing.T, gf *topology.GFE, want float64) (regions, groups map[string]float64) {
	t.Helper()
	ctx := context.Background()
	err := topology.WaitFor(ctx, 15*time.Second, func() (bool, error) {
		var err error
		regions, groups, err = tcpPlan(ctx, gf)
		if err != nil {
			return false, err
		}
		if math.Abs(regions["us-east"]-want) > 0.01 {
			return false, fmt.Errorf("plan %v, want us-east at %.3f", regions, want)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("plan did not settle: %v", err)
	}
	return regions, groups
}

// tcpSpread counts conns by instance, group and region.
func tcpSpread(conns []*tcpConn, insts []tcpInstance) (byInst, byGroup, byRegion map[string]int) {
	of := map[string]tcpInstance{}
	for _, in := range insts {
		of[in.name] = in
	}
	byInst, byGroup, byRegion = map[string]int{}, map[string]int{}, map[string]int{}
	for _, c := range conns {
		in := of[c.instance]
		byInst[c.instance]++
		byGroup[in.zone+"-db"]++
		byRegion[in.region]++
	}
	return byInst, byGroup, byRegion
}

// tcpCheckSpread compares the measured spread with the plan's shares, group by
// group and region by region.
func tcpCheckSpread(t *testing.T, phase string, conns []*tcpConn, insts []tcpInstance, planRegions, planGroups map[string]float64) {
	t.Helper()
	byInst, byGroup, byRegion := tcpSpread(conns, insts)
	n := float64(len(conns))
	for _, m := range []struct {
		what string
		plan map[string]float64
		got  map[string]int
	}{{"region", planRegions, byRegion}, {"group", planGroups, byGroup}} {
		keys := slices.Sorted(func(yield func(string) bool) {
			seen := map[string]bool{}
			for k := range m.plan {
				seen[k] = true
			}
			for k := range m.got {
				seen[k] = true
			}
			for k := range seen {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range keys {
			if got := float64(m.got[k]) / n; math.Abs(got-m.plan[k]) > tcpShareTol {
				t.Errorf("%s: %s %s holds %.3f of the connections (%d), plan %.3f ±%.2f", phase, m.what, k, got, m.got[k], m.plan[k], tcpShareTol)
			}
		}
	}
	t.Logf("%s: plan by region %v; connections by region %v, by group %v, by instance %v", phase, planRegions, byRegion, byGroup, byInst)
}

// TestTCPProxyEndToEnd opens 200 long-lived connections through one gfe's
// tcp listener to a CONNECTION-mode service and checks that
//
//  1. they spread as the plan says: every group's share of the connections
//     is within ±0.03 of its plan share once the plan has caught up with
//     the demand (the smoothed open connections);
//  2. none moves while its backend is healthy: after the plan changed under
//     them every connection still echoes, and each backend has accepted
//     from the gfe exactly the connections that named it;
//  3. when one instance fails its health check (its listener closes, its
//     established connections stay), the gfe closes exactly that instance's
//     25 connections, on both sides, and leaves the other 175 alone; the
//     25 clients reconnect elsewhere and the new spread matches the new
//     plan.
//
// The tolerance: us-east instances cap their connections at 25 each
// (max_concurrency), so us-east holds exactly its 100-connection capacity
// and the rest spills to eu-west, whatever the plan said while the
// connections were opening; the plan settles on 100/200 = 0.5 for us-east.
// Its share is read after it is within 0.01 of that, and each group's
// measured share may differ from its plan share by rounding (1/200) and by
// the round robin and least-loaded picks in eu-west (a few connections),
// hence ±0.03 (6 connections).
func TestTCPProxyEndToEnd(t *testing.T) {
	insts := tcpInstances()
	startTCPBackend(t, insts)
	spec := topology.Spec{
		Net: tcpNet,
		Regions: []topology.Region{
			{Name: "us-east", Zones: []string{"b", "c"}, Instances: 1, Rate: 100},
			{Name: "eu-west", Zones: []string{"b"}, Instances: 1, Rate: 100},
		},
		Sites:      []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": 5 * time.Millisecond, "eu-west": 40 * time.Millisecond}}},
		EditConfig: tcpEditConfig(insts),
	}
	if _, err := config.Parse([]byte(tcpEditConfig(insts)(spec.ConfigYAML())), "tcp.yaml"); err != nil {
		t.Fatalf("the edited config is invalid: %v", err)
	}
	c := startCluster(t, spec)
	gf := c.GFEs[0]
	addr := net.JoinHostPort(gf.SourceIP, strconv.Itoa(tcpPort))
	ctx := context.Background()
	addrOf := map[string]string{}
	for _, in := range insts {
		addrOf[in.name] = in.addr
	}

	// The listener is up once a connection gets a hello. That probe is a
	// proxied connection too: count it on its backend.
	var probe string
	if err := topology.WaitFor(ctx, 10*time.Second, func() (bool, error) {
		cn, err := tcpDialHello(addr)
		if err != nil {
			return false, err
		}
		cn.c.Close()
		probe = cn.instance
		return true, nil
	}); err != nil {
		t.Fatalf("the gfe's tcp listener %s: %v", addr, err)
	}

	// 1. Open 200 connections, 20 at a time.
	conns := make([]*tcpConn, tcpConns)
	if errs := tcpParallel(tcpConns, func(i int) (err error) {
		conns[i], err = tcpDialHello(addr)
		return err
	}); len(errs) > 0 {
		t.Fatalf("%d of %d connections failed, first: %v", len(errs), tcpConns, errs[0])
	}
	defer func() {
		for _, cn := range conns {
			cn.c.Close()
		}
	}()
	planRegions, planGroups := tcpWaitPlan(t, gf, 0.5)
	tcpCheckSpread(t, "200 connections", conns, insts, planRegions, planGroups)
	byInst, _, _ := tcpSpread(conns, insts)
	for _, in := range insts {
		if in.region == "us-east" && byInst[in.name] > in.maxConns {
			t.Errorf("%s holds %d connections, above its max_concurrency %d", in.name, byInst[in.name], in.maxConns)
		}
	}

	// 2. The plan moved from the idle plan (all us-east) to half in
	// eu-west while they were open: none of them moved.
	if errs := tcpParallel(tcpConns, func(i int) error { return conns[i].echo(fmt.Sprintf("ping %d", i)) }); len(errs) > 0 {
		t.Fatalf("%d connections broke while their backend was healthy, first: %v", len(errs), errs[0])
	}
	stats, err := tcpAdminStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range insts {
		want := byInst[in.name]
		if in.name == probe {
			want++
		}
		if got := stats[in.name].BySource[tcpGFESrc].Streams; got != uint64(want) {
			t.Errorf("%s accepted %d connections from the gfe, its clients count %d (a connection was re-dialled)", in.name, got, want)
		}
	}

	// 3. us-east-b-t1 fails its health check: its listener closes, its
	// established connections stay up on the backend's side.
	const victim = "us-east-b-t1"
	if _, err := tcpAdminPost(ctx, "/admin/health?instance="+victim+"&healthy=false"); err != nil {
		t.Fatal(err)
	}
	var victims, others []*tcpConn
	for _, cn := range conns {
		if cn.instance == victim {
			victims = append(victims, cn)
		} else {
			others = append(others, cn)
		}
	}
	closedByGFE := tcpParallel(len(victims), func(i int) error {
		cn := victims[i]
		cn.c.SetReadDeadline(time.Now().Add(15 * time.Second))
		b, err := cn.r.ReadByte()
		var ne net.Error
		switch {
		case err == nil:
			return fmt.Errorf("read %q from a connection of the unhealthy backend, want it closed", b)
		case errors.As(err, &ne) && ne.Timeout():
			return fmt.Errorf("a connection of the unhealthy backend is still open after 15s")
		}
		return nil
	})
	if len(closedByGFE) > 0 || len(victims) != 25 {
		t.Fatalf("%d connections on %s, %d not closed by the gfe: %v", len(victims), victim, len(closedByGFE), closedByGFE)
	}
	if errs := tcpParallel(len(others), func(i int) error { return others[i].echo(fmt.Sprintf("after %d", i)) }); len(errs) > 0 {
		t.Fatalf("%d connections of healthy backends broke, first: %v", len(errs), errs[0])
	}
	// The gfe closed its side to the backend as well.
	if err := topology.WaitFor(ctx, 5*time.Second, func() (bool, error) {
		st, err := tcpAdminStats(ctx)
		if err != nil {
			return false, err
		}
		if n := st[victim].OpenConns; n != 0 {
			return false, fmt.Errorf("%s still has %d open connections", victim, n)
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if body, err := tcpAdminPost(ctx, "/admin/close?instance="+victim); err != nil || !strings.Contains(body, `"closed":0`) {
		t.Errorf("/admin/close on %s = %q, %v; want nothing left to close", victim, body, err)
	}
	if got := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_tcp_closed_total", "service=db", "reason=unhealthy"); got != 25 {
		t.Errorf("spillway_gfe_tcp_closed_total{reason=unhealthy} = %v; want 25", got)
	}
	if got := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_tcp_open_connections", "service=db", "backend="+addrOf[victim]); got != 0 {
		t.Errorf("open connections of %s = %v; want 0", victim, got)
	}

	// The 25 clients reconnect: none lands on the unhealthy instance, and
	// the spread follows the new plan (us-east: 75 of 200).
	re := make([]*tcpConn, len(victims))
	if errs := tcpParallel(len(re), func(i int) (err error) {
		re[i], err = tcpDialHello(addr)
		return err
	}); len(errs) > 0 {
		t.Fatalf("%d reconnections failed, first: %v", len(errs), errs[0])
	}
	defer func() {
		for _, cn := range re {
			cn.c.Close()
		}
	}()
	for _, cn := range re {
		if cn.instance == victim {
			t.Errorf("a reconnection landed on the unhealthy %s", victim)
		}
	}
	now := append(others, re...)
	planRegions, planGroups = tcpWaitPlan(t, gf, 75.0/200)
	tcpCheckSpread(t, "after reconnecting", now, insts, planRegions, planGroups)
	if got := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_tcp_open_connections", "service=db", "backend="+addrOf["eu-west-b-t1"]); got == 0 {
		t.Errorf("open connections of eu-west-b-t1 in /metrics = %v; want its connections", got)
	}
}
