package controlplane

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/lb/quota"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// quotaService implements the Quota gRPC service (proto/spillway/v1/
// quota.proto, DESIGN.md §7): lb/quota's Allocator in memory, with the
// limits of the configuration the hub serves now, so a reload applies to
// the next allocation. With ErrorRate > 0 it fails that fraction of the
// allocations with UNAVAILABLE on purpose, before charging anything, so
// that the callers' fail-open path stays exercised.
//
// Counters live in this replica's memory: with several control planes each
// counts what it is asked, so a consumer spread over two replicas gets up
// to twice its limit (counters shared in Redis are issue #13's next step).
type quotaService struct {
	pb.UnimplementedQuotaServer

	hub       *hub
	clock     clock.Clock
	alloc     *quota.Allocator
	errorRate float64
	log       zerolog.Logger
	calls     *prometheus.CounterVec // result

	mu   sync.Mutex
	rand *rand.Rand // guarded by mu
}

// The results of AllocateQuota, as counted in
// spillway_controlplane_quota_allocations_total{result}.
const (
	quotaOK            = "ok"
	quotaExhausted     = "exhausted"
	quotaInvalid       = "invalid"
	quotaUnknownMetric = "unknown_metric"
	quotaInjected      = "injected_error"
	quotaUnavailable   = "unavailable"
)

func newQuotaService(h *hub, clk clock.Clock, errorRate float64, seed uint64, log zerolog.Logger, reg prometheus.Registerer) *quotaService {
	q := &quotaService{
		hub:       h,
		clock:     clock.OrReal(clk),
		errorRate: errorRate,
		log:       log.With().Str("component", "quota").Logger(),
		rand:      rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15)),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spillway", Subsystem: "controlplane", Name: "quota_allocations_total",
			Help: "AllocateQuota calls by result: ok, exhausted, invalid, unknown_metric, injected_error (on purpose, --quota-error-rate), unavailable (no configuration yet).",
		}, []string{"result"}),
	}
	q.alloc = quota.NewAllocator(q.limit)
	for _, r := range []string{quotaOK, quotaExhausted, quotaInvalid, quotaUnknownMetric, quotaInjected, quotaUnavailable} {
		q.calls.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(q.calls)
	}
	return q
}

// limit is the Allocator's Limits: the effective limit in the
// configuration served now.
func (q *quotaService) limit(consumer, metric string) (int64, bool) {
	st, _ := q.hub.Load()
	if st == nil || st.Config == nil {
		return 0, false
	}
	l, _, ok := st.Config.Config.QuotaLimit(consumer, metric)
	return l, ok
}

// injectError reports whether this call fails on purpose.
func (q *quotaService) injectError() bool {
	if q.errorRate <= 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rand.Float64() < q.errorRate
}

// AllocateQuota implements the Quota service (see quota.proto).
func (q *quotaService) AllocateQuota(_ context.Context, req *pb.AllocateQuotaRequest) (*pb.AllocateQuotaResponse, error) {
	st, _ := q.hub.Load()
	if st == nil || st.Config == nil {
		q.calls.WithLabelValues(quotaUnavailable).Inc()
		return nil, status.Error(codes.Unavailable, "quota: no configuration loaded yet")
	}
	if q.injectError() {
		q.calls.WithLabelValues(quotaInjected).Inc()
		return nil, status.Error(codes.Unavailable, "quota: injected error (--quota-error-rate); callers fail open")
	}
	r := quota.Request{OperationID: req.GetOperationId(), Consumer: req.GetConsumer()}
	switch req.GetMode() {
	case pb.QuotaMode_QUOTA_MODE_NORMAL:
		r.Mode = quota.ModeNormal
	case pb.QuotaMode_QUOTA_MODE_BEST_EFFORT:
		r.Mode = quota.ModeBestEffort
	case pb.QuotaMode_QUOTA_MODE_CHECK_ONLY:
		r.Mode = quota.ModeCheckOnly
	default:
		q.calls.WithLabelValues(quotaInvalid).Inc()
		return nil, status.Errorf(codes.InvalidArgument, "quota: mode: must be NORMAL, BEST_EFFORT or CHECK_ONLY, got %v", req.GetMode())
	}
	for _, v := range req.GetValues() {
		r.Values = append(r.Values, quota.MetricValue{Metric: v.GetMetric(), Value: v.GetValue()})
	}
	res, err := q.alloc.Allocate(q.clock.Now(), r)
	switch {
	case errors.Is(err, quota.ErrInvalidRequest):
		q.calls.WithLabelValues(quotaInvalid).Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, quota.ErrUnknownMetric):
		q.calls.WithLabelValues(quotaUnknownMetric).Inc()
		return nil, status.Error(codes.FailedPrecondition, fmt.Sprintf("%v (config %s)", err, st.Config.Hash))
	case err != nil:
		q.calls.WithLabelValues(quotaUnavailable).Inc()
		return nil, status.Error(codes.Internal, err.Error())
	}
	if res.Exhausted {
		q.calls.WithLabelValues(quotaExhausted).Inc()
		return nil, exhausted(r.Consumer, res.RetryAfter)
	}
	q.calls.WithLabelValues(quotaOK).Inc()
	out := &pb.AllocateQuotaResponse{OperationId: req.GetOperationId(), ConfigVersion: st.Config.Hash}
	for _, v := range res.Allocated {
		out.Allocated = append(out.Allocated, &pb.QuotaMetricValue{Metric: v.Metric, Value: v.Value})
	}
	return out, nil
}

// exhausted is the RESOURCE_EXHAUSTED status of a consumer whose quota
// has room again after retry, with that delay as a google.rpc.RetryInfo.
func exhausted(consumer string, retry time.Duration) error {
	st := status.Newf(codes.ResourceExhausted, "quota: consumer %q: quota exhausted for this window; room again in %v", consumer, retry)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
		st = d
	}
	return st.Err()
}
