package controlplane

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/quotaredis"
	"github.com/spillway-lb/spillway/internal/testkit"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// quotaYAML is manyGroups(1)'s config with a quota section: 3 requests a
// minute for everyone, 5 for project big (producer override).
func quotaYAML() string {
	return manyGroups(1).yaml() + `quota:
  metrics:
    - {name: calls, default_limit: 3}
  charges:
    - {service: web, metric: calls}
  consumers:
    - {api_key: small-key-0001, project: small}
    - {api_key: big-key-000001, project: big}
  producer_overrides:
    - {project: big, metric: calls, limit: 5}
`
}

// quotaClient starts a control plane with quotaYAML (edit applied to its
// Config) and returns a Quota client over real gRPC, the daemon and its
// fake clock, which starts 20 s into a window.
func quotaClient(t *testing.T, edit func(*Config)) (pb.QuotaClient, *Daemon, *clock.Fake) {
	t.Helper()
	path := writeFile(t, t.TempDir(), "cp.yaml", quotaYAML())
	clk := clock.NewFake(epoch.Truncate(time.Minute).Add(20 * time.Second))
	qc, d := quotaReplica(t, "cp-quota", path, clk, edit)
	return qc, d, clk
}

// quotaReplica starts a control plane named name on the config at path
// and returns a Quota client over real gRPC and the daemon.
func quotaReplica(t *testing.T, name, path string, clk clock.Clock, edit func(*Config)) (pb.QuotaClient, *Daemon) {
	t.Helper()
	r := startDaemonWith(t, name, path, nil, clk, newWorld(), false, edit)
	t.Cleanup(r.stop)
	waitState(t, r.d.State, "a configuration", func(st *State) bool { return st.Config != nil })
	cc, err := grpc.NewClient("passthrough:///"+r.d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewQuotaClient(cc), r.d
}

func calls(n int64) []*pb.QuotaMetricValue {
	return []*pb.QuotaMetricValue{{Metric: "calls", Value: n}}
}

// TestAllocateQuota: AllocateQuota over real gRPC charges the limits of
// the served config (the default, and a producer override), answers
// RESOURCE_EXHAUSTED with the time until the next window as RetryInfo,
// charges a retried operation once, and reports malformed requests and
// unknown metrics with their own codes; every outcome is counted.
func TestAllocateQuota(t *testing.T) {
	qc, d, clk := quotaClient(t, nil)
	ctx := context.Background()
	admitted := map[string]int{}
	for _, consumer := range []string{"small", "big"} {
		for range 8 {
			_, err := qc.AllocateQuota(ctx, &pb.AllocateQuotaRequest{Consumer: consumer, Values: calls(1), Mode: pb.QuotaMode_QUOTA_MODE_NORMAL})
			switch status.Code(err) {
			case codes.OK:
				admitted[consumer]++
			case codes.ResourceExhausted:
				st := status.Convert(err)
				var retry time.Duration
				for _, d := range st.Details() {
					if ri, ok := d.(*errdetails.RetryInfo); ok {
						retry = ri.GetRetryDelay().AsDuration()
					}
				}
				if retry != 40*time.Second {
					t.Errorf("%s: RetryInfo %v, want 40s (the rest of the window)", consumer, retry)
				}
			default:
				t.Fatalf("%s: AllocateQuota: %v", consumer, err)
			}
		}
	}
	if admitted["small"] != 3 || admitted["big"] != 5 {
		t.Errorf("admitted %v of 8 each, want small 3 (default) and big 5 (producer override)", admitted)
	}
	// The next window has room again.
	clk.Advance(41 * time.Second)
	if _, err := qc.AllocateQuota(ctx, &pb.AllocateQuotaRequest{Consumer: "small", Values: calls(1), Mode: pb.QuotaMode_QUOTA_MODE_NORMAL}); err != nil {
		t.Errorf("next window: %v, want OK", err)
	}
	// A retried operation is charged once.
	op := &pb.AllocateQuotaRequest{OperationId: "op-7", Consumer: "small", Values: calls(2), Mode: pb.QuotaMode_QUOTA_MODE_NORMAL}
	for i := range 3 {
		resp, err := qc.AllocateQuota(ctx, op)
		if err != nil || resp.GetAllocated()[0].GetValue() != 2 {
			t.Fatalf("try %d of op-7: %v, %v; want 2 allocated each time", i, resp, err)
		}
	}
	if _, err := qc.AllocateQuota(ctx, &pb.AllocateQuotaRequest{Consumer: "small", Values: calls(1), Mode: pb.QuotaMode_QUOTA_MODE_CHECK_ONLY}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("after 1 + op-7's 2 of 3: check-only of 1 = %v, want RESOURCE_EXHAUSTED (op-7 charged once would leave 0)", err)
	}
	for _, tt := range []struct {
		req  *pb.AllocateQuotaRequest
		want codes.Code
	}{
		{&pb.AllocateQuotaRequest{Consumer: "small", Values: calls(1)}, codes.InvalidArgument}, // mode unspecified
		{&pb.AllocateQuotaRequest{Values: calls(1), Mode: pb.QuotaMode_QUOTA_MODE_NORMAL}, codes.InvalidArgument},
		{&pb.AllocateQuotaRequest{Consumer: "small", Values: calls(-1), Mode: pb.QuotaMode_QUOTA_MODE_NORMAL}, codes.InvalidArgument},
		{&pb.AllocateQuotaRequest{Consumer: "small", Values: []*pb.QuotaMetricValue{{Metric: "bytes", Value: 1}}, Mode: pb.QuotaMode_QUOTA_MODE_NORMAL}, codes.FailedPrecondition},
	} {
		if _, err := qc.AllocateQuota(ctx, tt.req); status.Code(err) != tt.want {
			t.Errorf("AllocateQuota(%v) = %v, want %v", tt.req, err, tt.want)
		}
	}
	// op-7 is answered OK three times (charged once).
	for result, want := range map[string]float64{quotaOK: 3 + 5 + 1 + 3, quotaExhausted: 5 + 3 + 1, quotaInvalid: 3, quotaUnknownMetric: 1, quotaInjected: 0} {
		if got := testutil.ToFloat64(d.quota.calls.WithLabelValues(result)); got != want {
			t.Errorf("quota_allocations_total{result=%q} = %v, want %v", result, got, want)
		}
	}
}

// TestAllocateQuotaInjectedErrors: with --quota-error-rate 0.5 about half
// of the calls fail with UNAVAILABLE, charge nothing and are counted.
func TestAllocateQuotaInjectedErrors(t *testing.T) {
	qc, d, _ := quotaClient(t, func(c *Config) { c.QuotaErrorRate = 0.5 })
	ok, unavailable := 0, 0
	for range 200 {
		_, err := qc.AllocateQuota(context.Background(), &pb.AllocateQuotaRequest{Consumer: "big", Values: calls(0), Mode: pb.QuotaMode_QUOTA_MODE_NORMAL})
		switch status.Code(err) {
		case codes.OK:
			ok++
		case codes.Unavailable:
			unavailable++
		default:
			t.Fatalf("AllocateQuota: %v", err)
		}
	}
	if unavailable < 70 || unavailable > 130 || ok+unavailable != 200 {
		t.Errorf("%d of 200 calls failed on purpose, want about 100 (70..130)", unavailable)
	}
	if got := testutil.ToFloat64(d.quota.calls.WithLabelValues(quotaInjected)); got != float64(unavailable) {
		t.Errorf("injected errors counted %v, want %d", got, unavailable)
	}
}

// TestAllocateQuotaSharedInRedis: two replicas with --quota-redis on one
// real redis-server charge the same counters: calls alternating between
// them admit small's limit of 3 (in memory each would admit 3: 6 in all)
// and big's 5; both replicas' /status data say so, with each limit's
// source. With Redis killed, calls fail with UNAVAILABLE (callers fail
// open) within the Redis timeout (250ms) plus slack, counted as
// store_unavailable.
func TestAllocateQuotaSharedInRedis(t *testing.T) {
	rs := testkit.StartRedis(t, "")
	addr := rs.Addr
	path := writeFile(t, t.TempDir(), "cp.yaml", quotaYAML())
	// Real time: Redis expires the counters on its own clock. Both
	// replicas read one clock, so a window cannot turn between them.
	clk := clock.NewFake(time.Now().Truncate(time.Minute).Add(time.Second))
	// A timeout a busy machine cannot miss: the tight bound is
	// quotaredis's TestStoreFailsFastAndRecovers.
	useRedis := func(c *Config) { c.QuotaRedis = quotaredis.Config{Addr: addr, Timeout: 250 * time.Millisecond} }
	qa, da := quotaReplica(t, "cp-a", path, clk, useRedis)
	qb, db := quotaReplica(t, "cp-b", path, clk, useRedis)
	ctx := context.Background()
	admitted := map[string]int{}
	for _, consumer := range []string{"small", "big"} {
		for i := range 10 {
			qc := []pb.QuotaClient{qa, qb}[i%2]
			_, err := qc.AllocateQuota(ctx, &pb.AllocateQuotaRequest{Consumer: consumer, Values: calls(1), Mode: pb.QuotaMode_QUOTA_MODE_NORMAL})
			switch status.Code(err) {
			case codes.OK:
				admitted[consumer]++
			case codes.ResourceExhausted:
			default:
				t.Fatalf("%s: AllocateQuota: %v", consumer, err)
			}
		}
	}
	if admitted["small"] != 3 || admitted["big"] != 5 {
		t.Errorf("over two replicas admitted %v of 10 each, want small 3 and big 5 (one count in Redis)", admitted)
	}
	want := []QuotaStatus{
		{Consumer: "big", Metric: "calls", Limit: 5, Source: "producer_override", Used: 5},
		{Consumer: "small", Metric: "calls", Limit: 3, Source: "default", Used: 3},
	}
	for _, d := range []*Daemon{da, db} {
		if d.quota.storeName != "redis" {
			t.Errorf("store %q, want redis", d.quota.storeName)
		}
		if diff := cmp.Diff(want, d.quota.Status(ctx, clk.Now())); diff != "" {
			t.Errorf("Status (-want +got):\n%s", diff)
		}
	}
	rs.Kill()
	var worst time.Duration
	for range 50 {
		start := time.Now()
		_, err := qa.AllocateQuota(ctx, &pb.AllocateQuotaRequest{Consumer: "big", Values: calls(0), Mode: pb.QuotaMode_QUOTA_MODE_NORMAL})
		worst = max(worst, time.Since(start))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("Redis down: AllocateQuota = %v, want UNAVAILABLE", err)
		}
	}
	t.Logf("Redis down: 50 AllocateQuota calls answered UNAVAILABLE, slowest %v", worst)
	if worst > 400*time.Millisecond {
		t.Errorf("Redis down: slowest AllocateQuota %v, want <= 400ms (250ms timeout, then the open breaker)", worst)
	}
	if got := testutil.ToFloat64(da.quota.calls.WithLabelValues(quotaStoreFailed)); got != 50 {
		t.Errorf("store_unavailable counted %v, want 50", got)
	}
	if got := da.quota.Status(ctx, clk.Now()); len(got) != 2 || got[0].Used != -1 {
		t.Errorf("Status with Redis down = %+v, want used -1", got)
	}
}
