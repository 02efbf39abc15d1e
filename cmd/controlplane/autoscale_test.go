package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway-lb/spillway/internal/autoscale/controller"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/snapshot"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// autoscaledYAML has one group, g1, with a file instance (addr) and an
// autoscaling block: up to 3 instances. Its cold_start (30s) is the
// autoscaler's estimate, longer than the instances' real one (1s), so that
// the rules' demand hold keeps what a capacity request started for the
// whole test although no load comes.
func autoscaledYAML(addr string) string {
	return fmt.Sprintf(`regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - name: g1
            instances:
              - address: %s
            autoscaling: {max_instances: 3, max_concurrency_per_instance: 4, cold_start: 30s}
services:
  - name: web
    backends:
      - group: g1
        max_rate_per_instance: 100
    health_check: {interval: 200ms, timeout: 150ms, jitter: 0, healthy_threshold: 1, unhealthy_threshold: 2}
routes:
  - service: web
`, addr)
}

// groupInstances returns g1's instances in s, and how many are healthy.
func groupInstances(s *snapshot.Snapshot) (addrs []string, healthy int) {
	ref, ok := s.Config.Group("g1")
	if !ok {
		return nil, 0
	}
	for _, in := range ref.Group.Instances {
		addrs = append(addrs, in.Address)
		if s.Healthy(in.Address) {
			healthy++
		}
	}
	return addrs, healthy
}

// TestAutoscaleOnDemand runs the real control plane with the process
// provider over the real testbackend: a capacity request starts two
// instances, which join g1 in the snapshot, unhealthy through their cold
// start and healthy after it; stopping the control plane stops them.
func TestAutoscaleOnDemand(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*defaultTestTimeout)
	defer cancel()
	b := newBackend(t)
	path := filepath.Join(dir, "cp.yaml")
	if err := os.WriteFile(path, []byte(autoscaledYAML(b.addr())), 0o644); err != nil {
		t.Fatal(err)
	}
	first := 20000 + rand.IntN(30000)
	command, _ := json.Marshal([]string{bins["testbackend"],
		"--instance", "name={{.Name}},addr={{.Address}},region={{.Region}},zone={{.Zone}}", "--startup-delay", "1s"})
	p, err := proc.Start("controlplane", bins["controlplane"], proc.Options{},
		"--config", path, "--node", "cp-as", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--gossip-addr", "127.0.0.1:0", "--log-format", "json", "--insecure-plaintext",
		"--autoscale-provider", "process", "--autoscale-command", string(command),
		"--autoscale-ports", fmt.Sprintf("%d-%d", first, first+19), "--autoscale-lease-ttl", "600ms",
		"--autoscale-drain-delay", "500ms", "--autoscale-drain-timeout", "5s")
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = p.Stop(10 * time.Second)
		}
		if t.Failed() {
			t.Logf("controlplane output:\n%s", p.Output())
		}
	}()
	grpcAddr := logAddr(t, p, "grpc listening")
	admin := "http://" + logAddr(t, p, "admin listening")
	if err := proc.WaitHTTP(ctx, admin+"/readyz"); err != nil {
		t.Fatal(err)
	}

	c := startClient(t, ctx, grpcAddr, "gfe-as", mtls.ClientConfig{InsecurePlaintext: true})
	waitSnapshot(t, c, "g1 with its file instance only", func(s *snapshot.Snapshot) bool {
		addrs, healthy := groupInstances(s)
		return len(addrs) == 1 && healthy == 1
	})

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cp := pb.NewControlPlaneClient(conn)
	req := &pb.CapacityRequest{NodeId: "gfe-as", Site: "paris", Service: "web", Group: "g1",
		Want: &pb.CapacityRequest_WantedInstances{WantedInstances: 3}, Reason: pb.CapacityReason_CAPACITY_REASON_QUEUEING}
	// The lease is taken one TTL after start; until then the answer says
	// another replica runs the group.
	var resp *pb.CapacityResponse
	poll(t, "a granted capacity request", func() bool {
		resp, err = cp.RequestCapacity(ctx, req)
		if err != nil {
			t.Fatalf("RequestCapacity: %v", err)
		}
		return resp.GetGranted()
	})
	// The file instance counts for nothing here: the autoscaler runs its
	// own instances, 3 wanted from 0.
	if want := `group "g1" recommended 3 instances (from 0)`; resp.GetMessage() != want {
		t.Errorf("RequestCapacity message %q, want %q", resp.GetMessage(), want)
	}
	var started []string
	s := waitSnapshot(t, c, "g1 with the 3 started instances", func(s *snapshot.Snapshot) bool {
		addrs, _ := groupInstances(s)
		return len(addrs) == 4
	})
	addrs, healthy := groupInstances(s)
	for _, a := range addrs {
		if a != b.addr() {
			started = append(started, a)
		}
	}
	if healthy > 1 {
		// The snapshot with the new instances comes before their first
		// probe passes: they start with a 1s cold start.
		t.Errorf("%d healthy instances in the first snapshot with the new ones, want 1 (the cold start)", healthy)
	}
	for _, a := range started {
		ref, _ := s.Config.Group("g1")
		for _, in := range ref.Group.Instances {
			if in.Address == a && in.MaxConcurrency != 4 {
				t.Errorf("instance %s max_concurrency %d, want max_concurrency_per_instance 4", a, in.MaxConcurrency)
			}
		}
	}
	waitSnapshot(t, c, "every instance healthy after the cold start", func(s *snapshot.Snapshot) bool {
		_, healthy := groupInstances(s)
		return healthy == 4
	})
	var st struct {
		Autoscaler []controller.GroupStatus
	}
	if err := json.Unmarshal([]byte(get(admin+"/status")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Autoscaler) != 1 || st.Autoscaler[0].Group != "g1" || st.Autoscaler[0].Active != 3 {
		t.Errorf("/status autoscaler = %+v, want g1 with 3 active", st.Autoscaler)
	}
	if m := get(admin + "/metrics"); !strings.Contains(m, `spillway_controlplane_autoscaler_instances{group="g1",state="active"} 3`) ||
		!strings.Contains(m, `spillway_controlplane_capacity_requests_total{result="granted"} 1`) {
		t.Errorf("metrics lack the autoscaler's figures:\n%s", grepLines(m, "autoscaler|capacity_requests"))
	}

	// Stopping the control plane stops its instances: their ports close.
	stopped = true
	if err := p.Stop(20 * time.Second); err != nil {
		t.Fatalf("controlplane exit: %v", err)
	}
	for _, a := range started {
		if conn, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			conn.Close()
			t.Errorf("instance %s still accepts connections after the control plane stopped", a)
		}
	}
}

func grepLines(s, pattern string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, p := range strings.Split(pattern, "|") {
			if strings.Contains(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
