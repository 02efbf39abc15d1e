package e2e

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/autoscale/controller"
	"github.com/spillway-lb/spillway/internal/daemonflags"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/mtls"
)

// gossipInsiderNet is the 127.N/16 of the gossip-insider test.
const gossipInsiderNet = 83

// TestGossipInsiderImpersonatesAbsentReplica replays the gossip-insider
// finding on real binaries: the control plane cp-1 lists replicas cp-1,
// cp-2 and cp-3 (--replicas), of which only cp-1 runs; it holds the lease
// of the autoscaled group and runs its one instance (min_instances 1). A
// gossip-key holder joins as cp-2, sealing with the key of the compromised
// gfe-nyc-1 (every gfe host holds the gossip key and its own certificate),
// and publishes an autoscaled instance at its own address and the group's
// lease with term 2^64-2; then another joins as cp-3 without a seal and
// publishes the same. cp-1 and the gfe refuse both (counted); over twelve
// requests through the gfe after each, the impostor's backend gets none,
// every answer is 200, cp-1 keeps acting on the group with its instance and
// stops none. Before seals the impostor got 4 of 12 requests, and cp-1
// drained and stopped the group's instance, the service answering 429.
func TestGossipInsiderImpersonatesAbsentReplica(t *testing.T) {
	spec := autoscaleSpec(gossipInsiderNet)
	spec.Autoscale.Block = "{min_instances: 1, max_instances: 3, max_concurrency_per_instance: 4, cold_start: 2s}"
	spec.CPArgs = append(spec.CPArgs, "--replicas", "cp-1,cp-2,cp-3") // the last --replicas wins
	c := startCluster(t, spec)
	const group = "us-east-b-web"
	gf := c.GFEs[0]
	cpAdmin := c.Spec.ControlPlaneAdmin(0)
	st := waitAutoscaler(t, c, group, "cp-1 runs the group's instance", 30*time.Second, func(s controller.GroupStatus) bool {
		return s.Acting && s.Active == 1
	})
	instance := st.Instances[0].Address

	// The impostor's backend: answers everything, counts health checks
	// and the test's requests (not the gfe's RTT probes).
	var stolen, checked atomic.Int64
	lis, err := net.Listen("tcp", fmt.Sprintf("127.%d.201.1:0", gossipInsiderNet))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			checked.Add(1)
		case strings.HasPrefix(r.URL.Path, "/insider-"):
			stolen.Add(1)
		}
		fmt.Fprintln(w, "ok")
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	rogueAddr := lis.Addr().String()

	keys, _, err := daemonflags.ReadKeyring(c.GossipKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	gfeKey, err := mtls.NewGossipSealer(mtls.Files{
		CA: filepath.Join(c.PKIDir, "ca.crt"), Cert: filepath.Join(c.PKIDir, gf.Name+".crt"), Key: filepath.Join(c.PKIDir, gf.Name+".key"),
	}, gf.Name, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	stops := func() float64 {
		return metricValue(t, cpAdmin+"/metrics", "spillway_controlplane_autoscaler_stops_total", "group="+group)
	}
	refused := func(url, metric string) float64 { return metricValue(t, url+"/metrics", metric) }
	stopsBefore := stops()

	for i, rogue := range []struct {
		name string
		opts gossip.Options
	}{
		{"cp-2", gossip.Options{Sealer: gfeKey}}, // a compromised gfe's own key
		{"cp-3", gossip.Options{}},               // no seal
	} {
		cpRefused := refused(cpAdmin, "spillway_controlplane_gossip_refused_states_total")
		gfeRefused := refused(gf.Admin, "spillway_gfe_gossip_refused_states_total")
		cfg := probeConfig(rogue.name, fmt.Sprintf("127.%d.200.%d", gossipInsiderNet, i+1), keys, fmt.Sprintf("127.%d.0.1:7946", gossipInsiderNet))
		startGossipNode(context.Background(), t, cfg, rogue.opts, &gossip.NodeState{
			Kind:       gossip.KindControlPlane,
			Leases:     map[string]uint64{group: math.MaxUint64 - 1},
			Autoscaled: map[string][]gossip.AutoscaledInstance{group: {{Address: rogueAddr}}},
		})
		// Decided: cp-1 refused the impostor's state, or acted on it (lost
		// the lease, or health-checks the impostor's instance).
		deadline := time.Now().Add(30 * time.Second)
		for refused(cpAdmin, "spillway_controlplane_gossip_refused_states_total") == cpRefused && autoscalerStatus(t, c, group).Acting && checked.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: cp-1 neither refused the impostor's state nor acted on it in 30s", rogue.name)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Twelve requests over 3.6s: several health-check intervals
		// (200ms), lease TTLs (1s) and drain delays (1s), in which a
		// believed instance would have been checked and served, and a
		// lost lease drained and stopped the group's instance.
		codes := map[int]int{}
		for j := range 12 {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/insider-%d-%d", gf.URL, i, j), nil)
			req.Header.Set("Cookie", "session=secret")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: request %d: %v", rogue.name, j, err)
			}
			resp.Body.Close()
			codes[resp.StatusCode]++
			time.Sleep(300 * time.Millisecond)
		}
		st := autoscalerStatus(t, c, group)
		if n := stolen.Load(); n != 0 || codes[http.StatusOK] != 12 {
			t.Errorf("%s: the impostor's backend got %d requests, answers %v; want 0 and 12 × 200", rogue.name, n, codes)
		}
		if !st.Acting || st.Active != 1 || len(st.Instances) != 1 || st.Instances[0].Address != instance || stops() != stopsBefore {
			t.Errorf("%s: cp-1's autoscaler %+v, stops %v (was %v); want acting on its one instance %s, none stopped",
				rogue.name, st, stops(), stopsBefore, instance)
		}
		if got := refused(gf.Admin, "spillway_gfe_gossip_refused_states_total"); got <= gfeRefused {
			t.Errorf("%s: the gfe counts %v refused states, was %v; want more", rogue.name, got, gfeRefused)
		}
		t.Logf("%s: answers %v, impostor's backend %d, cp-1 refused %v states, acting %v with %d instance(s)",
			rogue.name, codes, stolen.Load(), refused(cpAdmin, "spillway_controlplane_gossip_refused_states_total")-cpRefused, st.Acting, st.Active)
	}
	if out := c.CPs[0].Output(); !strings.Contains(out, `"reason":"bad_seal"`) || !strings.Contains(out, `"reason":"unsealed"`) {
		t.Errorf("cp-1 did not log both refusals (bad_seal, unsealed):\n%s", tail(out, 3000))
	}
}
