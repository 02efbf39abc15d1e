package controlplane

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/quotaredis"
	"github.com/spillway-lb/spillway/internal/testkit"
	"github.com/spillway-lb/spillway/lb/quota"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// TestAllocateQuotaReturns: over real gRPC, in memory and in Redis, units
// a caller gives back (returned, in the window charged) make room for the
// consumer again and are echoed in the answer; a return of another
// window is dropped, and answered with nothing given back.
func TestAllocateQuotaReturns(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			var edit func(*Config)
			if store == "redis" {
				rs := testkit.StartRedis(t, "")
				edit = func(c *Config) { c.QuotaRedis = quotaredis.Config{Addr: rs.Addr, Timeout: 250 * time.Millisecond} }
			}
			path := writeFile(t, t.TempDir(), "cp.yaml", quotaYAML())
			// Real time for Redis, which expires counters on its own clock.
			clk := clock.NewFake(time.Now().Truncate(time.Minute).Add(time.Second))
			qc, d := quotaReplica(t, "cp-"+store, path, clk, edit)
			ctx := context.Background()
			w := quota.WindowOf(clk.Now())
			alloc := func(ask, back, window int64) (*pb.AllocateQuotaResponse, error) {
				req := &pb.AllocateQuotaRequest{Consumer: "small", Values: calls(ask), Mode: pb.QuotaMode_QUOTA_MODE_BEST_EFFORT}
				if back > 0 {
					req.Returned, req.ReturnedWindow = calls(back), window
				}
				return qc.AllocateQuota(ctx, req)
			}
			if resp, err := alloc(3, 0, 0); err != nil || resp.GetAllocated()[0].GetValue() != 3 {
				t.Fatalf("the whole limit: %v, %v", resp, err)
			}
			if _, err := alloc(1, 0, 0); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("beyond the limit: %v, want RESOURCE_EXHAUSTED", err)
			}
			resp, err := alloc(1, 2, w-1)
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("giving back the previous window's units: %v, %v; want RESOURCE_EXHAUSTED (nothing given back)", resp, err)
			}
			resp, err = alloc(1, 2, w)
			if err != nil || resp.GetAllocated()[0].GetValue() != 1 || len(resp.GetReturned()) != 1 || resp.GetReturned()[0].GetValue() != 2 {
				t.Fatalf("giving back 2 and asking 1: %v, %v; want 1 allocated and 2 given back", resp, err)
			}
			if st := d.quota.Status(ctx, clk.Now()); len(st) != 2 || st[1].Consumer != "small" || st[1].Used != 2 {
				t.Errorf("Status = %+v, want small 2 used", st)
			}
		})
	}
}
