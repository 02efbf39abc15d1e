package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/cpclient"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/internal/version"
	"github.com/spillway-lb/spillway/lb/health"
)

// daemonRig runs a Daemon with a fake prober until the test ends (or stop).
type daemonRig struct {
	d      *Daemon
	prober *fakeProber
	path   string
	lis    *bufconn.Listener // set when gRPC is served in memory
	stop   func()
}

// startDaemon starts a daemon named name on the config in path. With
// inMemory, gRPC is served over bufconn instead of loopback TCP.
func startDaemon(t *testing.T, name, path string, seeds []string, clk clock.Clock, w *world, inMemory bool) *daemonRig {
	t.Helper()
	return startDaemonWith(t, name, path, seeds, clk, w, inMemory, nil)
}

// startDaemonWith is startDaemon with edit applied to the daemon's Config
// (after the test defaults: plain-text gRPC) when not nil.
func startDaemonWith(t *testing.T, name, path string, seeds []string, clk clock.Clock, w *world, inMemory bool, edit func(*Config)) *daemonRig {
	t.Helper()
	cfg := DefaultConfig()
	cfg.TLS.InsecurePlaintext = true
	cfg.ConfigPath, cfg.NodeName = path, name
	cfg.Replicas = testReplicas
	cfg.ListenAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.ReloadPoll = 0
	cfg.Gossip.BindPort = 0
	cfg.Gossip.Seeds = seeds
	cfg.Gossip.JoinBackoffMin, cfg.Gossip.JoinBackoffMax = 20*time.Millisecond, 200*time.Millisecond
	cfg.Gossip.LeaveTimeout = 500 * time.Millisecond
	// Slower failure detection than the LAN defaults: under -race on a
	// busy machine a 200ms probe timeout can declare a live replica dead,
	// and a flapping membership moves groups back and forth. A replica
	// that stops leaves gracefully, which is seen at once anyway.
	cfg.Gossip.ProbeInterval, cfg.Gossip.ProbeTimeout, cfg.Gossip.SuspicionMult = 2*time.Second, time.Second, 5
	cfg.ShutdownGrace = time.Second
	if edit != nil {
		edit(&cfg)
	}
	r := &daemonRig{prober: newFakeProber(w), path: path}
	d, err := New(cfg, Options{Clock: clk, Logger: testLogger(t).With().Str("cp", name).Logger(), Prober: r.prober})
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	if inMemory {
		d.lis.Close()
		r.lis = bufconn.Listen(1 << 20)
		d.lis = r.lis
	}
	r.d = d
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: Run() = %v", name, err)
		}
	}
	t.Cleanup(r.stop)
	select {
	case <-d.GossipReady():
	case <-time.After(defaultTestTimeout):
		t.Fatalf("%s: gossip never started", name)
	}
	return r
}

// client connects a cpclient to the rig's in-memory gRPC server.
func (r *daemonRig) client(t *testing.T, apply func(*snapshot.Snapshot) error) *cpclient.Client {
	t.Helper()
	cfg := cpclient.DefaultConfig()
	cfg.Addresses, cfg.Node, cfg.Site = []string{"passthrough:///cp"}, "gfe-1", "paris"
	cfg.TLS.InsecurePlaintext = true
	c, err := cpclient.New(cfg, cpclient.Options{
		Logger: testLogger(t), Apply: apply,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return r.lis.DialContext(ctx)
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cpclient Run() = %v", err)
		}
	})
	return c
}

// waitSnapshot waits until the client's current snapshot satisfies cond.
func waitSnapshot(t *testing.T, c *cpclient.Client, what string, cond func(*snapshot.Snapshot) bool) *snapshot.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for {
		if s := c.Current(); s != nil && cond(s) {
			return s
		}
		select {
		case <-c.Changes():
		case <-ctx.Done():
			t.Fatalf("timed out waiting for a snapshot where %s (current %+v)", what, c.Current())
		}
	}
}

func rateOf(s *snapshot.Snapshot) float64 { return s.Config.Services[0].Backends[0].MaxRatePerInstance }

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestDaemonConfigChanges runs the whole daemon with a gfe client over
// bufconn: ACKs recorded, a new push per config change, invalid changes
// rejected while the last good config is served, a NACK that keeps the
// gfe's last good snapshot without stopping later pushes, and a health
// change pushed.
func TestDaemonConfigChanges(t *testing.T) {
	base := manyGroups(2).yaml()
	withRate := func(rate int) string {
		return strings.ReplaceAll(base, "max_rate_per_instance: 100", fmt.Sprintf("max_rate_per_instance: %d", rate))
	}
	path := writeFile(t, t.TempDir(), "cp.yaml", base)
	clk := clock.NewFake(epoch)
	w := newWorld()
	r := startDaemon(t, "cp-a", path, nil, clk, w, true)
	c := r.client(t, func(s *snapshot.Snapshot) error {
		if rateOf(s) == 13 {
			return fmt.Errorf("rate 13 is unlucky")
		}
		return nil
	})

	s1 := waitSnapshot(t, c, "first snapshot, all healthy", func(s *snapshot.Snapshot) bool {
		return rateOf(s) == 100 && len(s.Health) == 4 && s.Healthy("127.0.0.1:20000") && s.Healthy("127.0.0.1:20003")
	})
	if s1.ControlPlane != "cp-a" || s1.Source != path {
		t.Errorf("snapshot from %q source %q, want cp-a and %s", s1.ControlPlane, s1.Source, path)
	}
	waitUntil(t, "ACK of the first snapshot recorded", func() bool {
		n, ok := r.d.Node("gfe-1")
		return ok && n.Acked == s1.Version && n.Acks == 1 && n.Site == "paris"
	})

	// A valid change: new config version, pushed and acknowledged.
	replaceFile(t, path, withRate(50))
	if !r.d.Reload() {
		t.Fatal("Reload() of a valid change = false")
	}
	s2 := waitSnapshot(t, c, "rate 50", func(s *snapshot.Snapshot) bool { return rateOf(s) == 50 })
	if r.d.Config().Seq != 2 || s2.Version == s1.Version {
		t.Errorf("after a valid change: config seq %d, snapshot %s (was %s); want seq 2 and a new version", r.d.Config().Seq, s2.Version, s1.Version)
	}
	waitUntil(t, "ACK of rate 50", func() bool { n, _ := r.d.Node("gfe-1"); return n.Acked == s2.Version })

	// An invalid change is rejected: the last good config stays, and the
	// admin metrics show the failure.
	replaceFile(t, path, strings.Replace(withRate(50), "jitter: 0,", "jitter: 7,", 1))
	if r.d.Reload() {
		t.Fatal("Reload() of an invalid change = true")
	}
	if r.d.Config().Seq != 2 {
		t.Errorf("config seq %d after an invalid change, want 2", r.d.Config().Seq)
	}
	_, metrics := httpGet(t, "http://"+r.d.AdminAddr()+"/metrics")
	for _, want := range []string{
		`spillway_controlplane_config_reloads_total{result="failure"} 1`,
		`spillway_controlplane_config_reloads_total{result="success"} 2`,
		`spillway_controlplane_config_last_reload_successful 0`,
		`spillway_controlplane_config_info{version="` + r.d.Config().Version + `"} 1`,
		`spillway_controlplane_connected_gfes 1`,
		`spillway_controlplane_snapshot_acks_total 2`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// A config the gfe refuses: NACKed and recorded; the gfe keeps rate 50.
	replaceFile(t, path, withRate(13))
	if !r.d.Reload() {
		t.Fatal("Reload() of rate 13 = false")
	}
	n := waitNodeStatus(t, r.d, "NACK of rate 13", func(n NodeStatus) bool { return n.Nacks == 1 })
	if n.LastNack == nil || !strings.Contains(n.LastNack.Error, "rate 13 is unlucky") || n.LastNack.Serving != s2.Version || n.Acked != s2.Version {
		t.Errorf("node after NACK = %+v, want the apply error, serving and acked %s", n, s2.Version)
	}
	if cur := c.Current(); cur.Version != s2.Version {
		t.Errorf("gfe serves %s after a NACK, want %s", cur.Version, s2.Version)
	}

	// Later pushes still flow: a health change and a good config.
	w.setFailing("127.0.0.1:20002", true)
	replaceFile(t, path, withRate(60))
	if !r.d.Reload() {
		t.Fatal("Reload() of rate 60 = false")
	}
	advanceUntil(t, clk, time.Second, "the gfe sees rate 60 with 20002 down", func() bool {
		s := c.Current()
		return rateOf(s) == 60 && !s.Healthy("127.0.0.1:20002") && s.Healthy("127.0.0.1:20003")
	})
	s4 := c.Current()
	if d := s4.Health["127.0.0.1:20002"].Detail; !strings.Contains(d, "fake: connection refused") {
		t.Errorf("detail of 20002 = %q, want the probe error", d)
	}
	waitUntil(t, "ACK of the last push", func() bool { n, _ := r.d.Node("gfe-1"); return n.Acked == s4.Version })

	// Admin endpoints.
	if code, body := httpGet(t, "http://"+r.d.AdminAddr()+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d %q, want 200", code, body)
	}
	if code, _ := httpGet(t, "http://"+r.d.AdminAddr()+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}
	_, body := httpGet(t, "http://"+r.d.AdminAddr()+"/status")
	var page statusPage
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	if page.Node != "cp-a" || page.SnapshotVersion != s4.Version || len(page.GFEs) != 1 || page.GFEs[0].Acked != s4.Version ||
		len(page.Health) != 4 || !slices.Equal(page.OwnedGroups, []string{"g00", "g01"}) {
		t.Errorf("/status = %+v, want cp-a serving %s to one gfe, owning both groups", page, s4.Version)
	}
	if want := version.Get(); page.Version != want || want.GoVersion == "" {
		t.Errorf("/status version = %+v, want %+v", page.Version, want)
	}
}

func waitNodeStatus(t *testing.T, d *Daemon, what string, cond func(NodeStatus) bool) NodeStatus {
	t.Helper()
	var n NodeStatus
	waitUntil(t, what, func() bool {
		var ok bool
		n, ok = d.Node("gfe-1")
		return ok && cond(n)
	})
	return n
}

// TestControlPlanesShareHealthOverGossip runs two daemons over real
// memberlist on loopback: each checks about half the groups and serves the
// other's verdicts; when one stops, the other takes over every group.
func TestControlPlanesShareHealthOverGossip(t *testing.T) {
	tp := manyGroups(20)
	addrsOf := map[string][]string{}
	for _, g := range tp.groups {
		addrsOf[g.name] = g.addrs
	}
	addrs := func(groups []string) []string {
		var out []string
		for _, g := range groups {
			out = append(out, addrsOf[g]...)
		}
		slices.Sort(out)
		return out
	}
	dir := t.TempDir()
	clk := clock.NewFake(epoch)
	w := newWorld()
	a := startDaemon(t, "cp-a", writeFile(t, dir, "a.yaml", tp.yaml()), nil, clk, w, false)
	b := startDaemon(t, "cp-b", writeFile(t, dir, "b.yaml", tp.yaml()), []string{a.d.GossipAddr()}, clk, w, false)

	var aOwned, bOwned []string
	waitUntil(t, "both replicas agree on a split of the groups", func() bool {
		am, ao := a.d.Ownership()
		bm, bo := b.d.Ownership()
		aOwned, bOwned = ao, bo
		both := []string{"cp-a", "cp-b"}
		return slices.Equal(am, both) && slices.Equal(bm, both) && len(ao)+len(bo) == 20 &&
			len(slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(ao), bo...))))) == 20
	})
	for name, owned := range map[string][]string{"cp-a": aOwned, "cp-b": bOwned} {
		if len(owned) < 5 || len(owned) > 15 {
			t.Errorf("%s checks %d of 20 groups, want about half", name, len(owned))
		}
	}
	for _, r := range []*daemonRig{a, b} {
		waitState(t, r.d.State, "ready and every instance healthy", func(s *State) bool {
			if !s.Ready || len(s.Health) != 40 {
				return false
			}
			for _, ih := range s.Health {
				if ih.Status != health.StatusHealthy {
					return false
				}
			}
			return true
		})
	}
	// Each probes exactly its own groups' instances.
	a.prober.takeCounts()
	b.prober.takeCounts()
	advanceUntil(t, clk, time.Second, "each replica probed its own groups", func() bool {
		return slices.Equal(a.prober.probedSet(), addrs(aOwned)) && slices.Equal(b.prober.probedSet(), addrs(bOwned))
	})

	// An instance checked by cp-a fails: cp-b serves cp-a's verdict.
	down := addrsOf[aOwned[0]][0]
	w.setFailing(down, true)
	advanceUntil(t, clk, time.Second, down+" down at cp-b", func() bool {
		st, _ := b.d.State()
		return statusOf(st, down) == health.StatusUnhealthy
	})
	st, _ := b.d.State()
	for _, ih := range st.Health {
		if wantSrc := map[bool]string{true: "cp-a", false: "cp-b"}[slices.Contains(aOwned, ih.Group)]; ih.Source != wantSrc {
			t.Errorf("cp-b serves %s/%s from %q, want %q", ih.Group, ih.Address, ih.Source, wantSrc)
		}
	}
	if a, b := waitState(t, a.d.State, "same view at cp-a", func(s *State) bool { return s.Version == st.Version }), st; a.Version != b.Version {
		t.Errorf("versions differ: cp-a %s, cp-b %s", a.Version, b.Version)
	}

	// cp-a stops: cp-b takes over every group and checks it itself.
	b.prober.takeCounts()
	a.stop()
	waitUntil(t, "cp-b owns every group", func() bool { _, o := b.d.Ownership(); return len(o) == 20 })
	b.prober.waitProbed(t, addrs(aOwned)) // the new groups are probed at once, without advancing the clock
	waitState(t, b.d.State, "cp-b decides everything", func(s *State) bool {
		for _, ih := range s.Health {
			if ih.Source != "cp-b" || (ih.Address == down) != (ih.Status == health.StatusUnhealthy) {
				return false
			}
		}
		return true
	})
}
