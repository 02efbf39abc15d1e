package pending

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/spillway-lb/spillway/internal/clock"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// fakeCP is a hand-written control plane: it records every request and
// answers with resp and err; while hold is not nil, calls wait for it to
// close.
type fakeCP struct {
	mu   sync.Mutex
	reqs []*pb.CapacityRequest
	hold chan struct{}
	resp *pb.CapacityResponse
	err  error
}

func (f *fakeCP) RequestCapacity(ctx context.Context, in *pb.CapacityRequest, _ ...grpc.CallOption) (*pb.CapacityResponse, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, in)
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return f.resp, f.err
}

func (f *fakeCP) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

func newTestAsker(clk clock.Clock, cp *fakeCP, tg Target) *Asker {
	return NewAsker(AskConfig{Node: "gfe-1", Site: "paris"}, AskOptions{
		Clock:  clk,
		Client: func() Requester { return cp },
		Target: func(string) (Target, bool) { return tg, true },
	})
}

func TestAskerRequest(t *testing.T) {
	tests := []struct {
		name       string
		line       Line
		target     Target
		wantWanted uint32
		wantReason pb.CapacityReason
		wantDetail string
	}{
		{name: "scaled to zero", line: Line{Service: "web", Waiting: 1, Oldest: 200 * time.Millisecond},
			target: Target{Group: "g", MaxConcurrency: 80}, wantWanted: 1,
			wantReason: pb.CapacityReason_CAPACITY_REASON_NO_INSTANCE, wantDetail: "1 requests pending for 0.2s"},
		{name: "all down", line: Line{Service: "web", Waiting: 3, Oldest: time.Second},
			target: Target{Group: "g", Instances: 2, MaxConcurrency: 1}, wantWanted: 5,
			wantReason: pb.CapacityReason_CAPACITY_REASON_NO_INSTANCE, wantDetail: "3 requests pending for 1.0s"},
		{name: "queueing rounds up", line: Line{Service: "web", Waiting: 12, Oldest: 1200 * time.Millisecond},
			target: Target{Group: "g", Instances: 3, Healthy: 3, MaxConcurrency: 10}, wantWanted: 5,
			wantReason: pb.CapacityReason_CAPACITY_REASON_QUEUEING, wantDetail: "12 requests pending for 1.2s"},
		{name: "starting instances take the waiters", line: Line{Service: "web", Waiting: 3, Oldest: time.Second},
			target: Target{Group: "g", Instances: 1, Starting: 1, MaxConcurrency: 4}, wantWanted: 1,
			wantReason: pb.CapacityReason_CAPACITY_REASON_NO_INSTANCE, wantDetail: "3 requests pending for 1.0s"},
		{name: "beyond the starting slots", line: Line{Service: "web", Waiting: 6, Oldest: time.Second},
			target: Target{Group: "g", Instances: 3, Healthy: 2, Starting: 1, MaxConcurrency: 4}, wantWanted: 4,
			wantReason: pb.CapacityReason_CAPACITY_REASON_QUEUEING, wantDetail: "6 requests pending for 1.0s"},
		{name: "the arrival rate asks for more", line: Line{Service: "web", Waiting: 12, Oldest: time.Second},
			target: Target{Group: "g", Instances: 3, Healthy: 3, MaxConcurrency: 10, RateWant: 17}, wantWanted: 17,
			wantReason: pb.CapacityReason_CAPACITY_REASON_QUEUEING, wantDetail: "12 requests pending for 1.0s"},
		{name: "the waiters ask for more than the rate", line: Line{Service: "web", Waiting: 12, Oldest: time.Second},
			target: Target{Group: "g", Instances: 3, Healthy: 3, MaxConcurrency: 10, RateWant: 2}, wantWanted: 5,
			wantReason: pb.CapacityReason_CAPACITY_REASON_QUEUEING, wantDetail: "12 requests pending for 1.0s"},
		{name: "concurrency unset counts as 1", line: Line{Service: "web", Waiting: 2},
			target: Target{Group: "g", Instances: 1, Healthy: 1}, wantWanted: 3,
			wantReason: pb.CapacityReason_CAPACITY_REASON_QUEUEING, wantDetail: "2 requests pending for 0.0s"},
	}
	a := NewAsker(AskConfig{Node: "gfe-1", Site: "paris"}, AskOptions{Target: func(string) (Target, bool) { return Target{}, false }})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := a.Request(tt.line, tt.target)
			want := &pb.CapacityRequest{NodeId: "gfe-1", Site: "paris", Service: "web", Group: "g",
				Want:   &pb.CapacityRequest_WantedInstances{WantedInstances: tt.wantWanted},
				Reason: tt.wantReason, Detail: tt.wantDetail}
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Request(%+v, %+v) (-want +got):\n%s", tt.line, tt.target, diff)
			}
		})
	}
}

// TestAskerRate: one call per Interval per (service, group), counted by
// result.
func TestAskerRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		cp := &fakeCP{resp: &pb.CapacityResponse{Granted: false, Message: "no autoscaler configured"}}
		a := newTestAsker(clk, cp, Target{Group: "g", Instances: 1, Healthy: 1, MaxConcurrency: 1})
		lines := []Line{{Service: "web", Waiting: 1}}
		steps := []struct {
			at    time.Duration
			calls int
		}{{0, 1}, {5 * time.Millisecond, 1}, {999 * time.Millisecond, 1}, {time.Second, 2}, {1500 * time.Millisecond, 2}, {2 * time.Second, 3}}
		for _, s := range steps {
			clk.AdvanceTo(t0.Add(s.at))
			a.Step(context.Background(), clk.Now(), lines)
			synctest.Wait()
			if got := cp.calls(); got != s.calls {
				t.Errorf("calls after a step at +%v = %d, want %d", s.at, got, s.calls)
			}
		}
		a.Wait()
		if got := testutil.ToFloat64(a.total.WithLabelValues("web", "g", "refused")); got != 3 {
			t.Errorf("capacity_requests_total{refused} = %v, want 3", got)
		}
		cp.err, cp.resp = errors.New("unavailable"), nil
		clk.Advance(time.Second)
		a.Step(context.Background(), clk.Now(), lines)
		a.Wait()
		cp.err, cp.resp = nil, &pb.CapacityResponse{Granted: true}
		clk.Advance(time.Second)
		a.Step(context.Background(), clk.Now(), lines)
		a.Wait()
		for _, r := range []string{"error", "granted"} {
			if got := testutil.ToFloat64(a.total.WithLabelValues("web", "g", r)); got != 1 {
				t.Errorf("capacity_requests_total{%s} = %v, want 1", r, got)
			}
		}
	})
}

// TestAskerOneInFlight: a call that has not returned holds back the next
// one for its (service, group), however long it takes, and never the
// caller.
func TestAskerOneInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		cp := &fakeCP{hold: make(chan struct{}), resp: &pb.CapacityResponse{Granted: true}}
		a := newTestAsker(clk, cp, Target{Group: "g", MaxConcurrency: 1})
		lines := []Line{{Service: "web", Waiting: 4}}
		for i := range 4 {
			a.Step(context.Background(), clk.Now(), lines) // returns at once
			synctest.Wait()
			if got := cp.calls(); got != 1 {
				t.Fatalf("calls after step %d with one in flight = %d, want 1", i, got)
			}
			clk.Advance(time.Second)
		}
		close(cp.hold)
		synctest.Wait()
		a.Step(context.Background(), clk.Now(), lines)
		synctest.Wait()
		if got := cp.calls(); got != 2 {
			t.Errorf("calls after the first returned = %d, want 2", got)
		}
		a.Wait()
	})
}

// TestAskerNoClient: without a control plane, nothing is asked.
func TestAskerNoClient(t *testing.T) {
	a := NewAsker(AskConfig{Node: "n", Site: "s"}, AskOptions{Client: func() Requester { return nil },
		Target: func(string) (Target, bool) { t.Fatal("Target called without a client"); return Target{}, false }})
	a.Step(context.Background(), t0, []Line{{Service: "web", Waiting: 1}})
	a.Wait()
}

// TestAskerTargetLookups: polling every 5ms for a second looks the target
// up once per Interval, not once per round.
func TestAskerTargetLookups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(t0)
		cp := &fakeCP{resp: &pb.CapacityResponse{Granted: true}}
		var lookups int
		a := NewAsker(AskConfig{Node: "gfe-1", Site: "paris"}, AskOptions{
			Clock:  clk,
			Client: func() Requester { return cp },
			Target: func(string) (Target, bool) { lookups++; return Target{Group: "g", MaxConcurrency: 1}, true },
		})
		for i := range 201 { // 0, 5ms, ..., 1s
			clk.AdvanceTo(t0.Add(time.Duration(i) * 5 * time.Millisecond))
			a.Step(context.Background(), clk.Now(), []Line{{Service: "web", Waiting: 1}})
			synctest.Wait()
		}
		a.Wait()
		if lookups != 2 || cp.calls() != 2 {
			t.Errorf("over 201 rounds in 1s: %d target lookups, %d calls; want 2, 2", lookups, cp.calls())
		}
	})
}
