package controlplane

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/quotaredis"
	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/quota"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// quotaService implements the Quota gRPC service (proto/spillway/v1/
// quota.proto, docs/design.md §7) over a quotaStore, with the limits of the
// configuration the hub serves now, so a reload applies to the next
// allocation. With ErrorRate > 0 it fails that fraction of the allocations
// with UNAVAILABLE on purpose, before charging anything, so that the
// callers' fail-open path stays exercised.
//
// Without Config.QuotaRedis the counters live in this replica's memory
// (lb/quota's Allocator): with several control planes each would count
// what it is asked, and a consumer spread over two replicas would get up
// to twice its limit. With it they live in Redis (package quotaredis),
// shared by every replica; Redis failing or slow is answered with
// UNAVAILABLE within its timeout, and the gfes fail open.
type quotaService struct {
	pb.UnimplementedQuotaServer

	hub       *hub
	clock     clock.Clock
	store     quotaStore
	storeName string // "memory" or "redis", on /status
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
	quotaStoreFailed   = "store_unavailable"
)

// quotaStore keeps the counters the quota service charges: lb/quota's
// Allocator in this replica's memory, or quotaredis.Store shared by every
// replica. Safe for concurrent use; a call returns within the store's own
// bound (memory: at once), and a failure that is not one of lb/quota's
// errors means the counters could not be reached (callers fail open).
type quotaStore interface {
	Allocate(ctx context.Context, now time.Time, r quota.Request) (quota.Result, error)
	Used(ctx context.Context, now time.Time, consumer, metric string) (int64, error)
}

// Both stores are quotaStores.
var (
	_ quotaStore = memoryStore{}
	_ quotaStore = (*quotaredis.Store)(nil)
)

// memoryStore is the quotaStore of a replica without Redis.
type memoryStore struct{ a *quota.Allocator }

func (m memoryStore) Allocate(_ context.Context, now time.Time, r quota.Request) (quota.Result, error) {
	return m.a.Allocate(now, r)
}

func (m memoryStore) Used(_ context.Context, now time.Time, consumer, metric string) (int64, error) {
	return m.a.Used(now, consumer, metric), nil
}

func newQuotaService(h *hub, clk clock.Clock, errorRate float64, redisCfg quotaredis.Config, seed uint64, log zerolog.Logger, reg prometheus.Registerer) (*quotaService, error) {
	q := &quotaService{
		hub:       h,
		clock:     clock.OrReal(clk),
		errorRate: errorRate,
		log:       log.With().Str("component", "quota").Logger(),
		rand:      rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15)),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "spillway", Subsystem: "controlplane", Name: "quota_allocations_total",
			Help: "AllocateQuota calls by result: ok, exhausted, invalid, unknown_metric, injected_error (on purpose, --quota-error-rate), unavailable (no configuration yet), store_unavailable (Redis failing, slow or behind an open breaker: UNAVAILABLE, callers fail open).",
		}, []string{"result"}),
	}
	if redisCfg.Addr == "" {
		q.store, q.storeName = memoryStore{quota.NewAllocator(q.limit)}, "memory"
	} else {
		s, err := quotaredis.New(redisCfg, q.limit, log.With().Str("component", "quota-redis").Logger(), reg)
		if err != nil {
			return nil, err
		}
		q.store, q.storeName = s, "redis"
	}
	for _, r := range []string{quotaOK, quotaExhausted, quotaInvalid, quotaUnknownMetric, quotaInjected, quotaUnavailable, quotaStoreFailed} {
		q.calls.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(q.calls)
	}
	return q, nil
}

// Run closes the store's connections when ctx is done.
func (q *quotaService) Run(ctx context.Context) error {
	<-ctx.Done()
	if c, ok := q.store.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
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
func (q *quotaService) AllocateQuota(ctx context.Context, req *pb.AllocateQuotaRequest) (*pb.AllocateQuotaResponse, error) {
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
	for _, v := range req.GetReturned() {
		r.Returned = append(r.Returned, quota.MetricValue{Metric: v.GetMetric(), Value: v.GetValue()})
	}
	r.ReturnedWindow = req.GetReturnedWindow()
	res, err := q.store.Allocate(ctx, q.clock.Now(), r)
	switch {
	case errors.Is(err, quota.ErrInvalidRequest):
		q.calls.WithLabelValues(quotaInvalid).Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, quota.ErrUnknownMetric):
		q.calls.WithLabelValues(quotaUnknownMetric).Inc()
		return nil, status.Error(codes.FailedPrecondition, fmt.Sprintf("%v (config %s)", err, st.Config.Hash))
	case err != nil:
		// The counters could not be reached: what went wrong is logged by
		// the store's metrics, not told to the caller.
		q.calls.WithLabelValues(quotaStoreFailed).Inc()
		return nil, status.Error(codes.Unavailable, "quota: counters unavailable; callers fail open")
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
	for _, v := range res.Returned {
		out.Returned = append(out.Returned, &pb.QuotaMetricValue{Metric: v.Metric, Value: v.Value})
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

// QuotaStatus is one consumer's standing for one metric in this window,
// as /status shows it.
type QuotaStatus struct {
	Consumer string `json:"consumer"`
	Metric   string `json:"metric"`
	// Limit is the effective limit per minute, and Source where it came
	// from: default, producer_override, consumer_override or
	// producer_and_consumer_override (lb/quota.EffectiveLimit).
	Limit  int64  `json:"limit"`
	Source string `json:"source"`
	// Used is what was charged in the current window (all replicas', with
	// Redis): what the gfes admitted and have leased ahead, less what they
	// gave back. A gfe's first call of a window leases the rest of the
	// window, and its next call, an Interval later, gives back what it
	// holds beyond twice its demand: after that, Used runs ahead of the
	// requests admitted by up to two seconds of each gfe's traffic. -1
	// when the store did not answer.
	Used int64 `json:"used"`
}

// Status returns every configured consumer's standing for every metric
// at now, by consumer then metric: the projects API keys map to, those
// with overrides, and "anonymous" when anonymous requests are allowed.
func (q *quotaService) Status(ctx context.Context, now time.Time) []QuotaStatus {
	st, _ := q.hub.Load()
	if st == nil || st.Config == nil {
		return nil
	}
	cfg := st.Config.Config
	seen := map[string]bool{}
	var projects []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			projects = append(projects, p)
		}
	}
	for _, c := range cfg.Quota.Consumers {
		add(c.Project)
	}
	for _, o := range append(append([]config.QuotaOverride(nil), cfg.Quota.ProducerOverrides...), cfg.Quota.ConsumerOverrides...) {
		add(o.Project)
	}
	if cfg.Quota.AllowAnonymous {
		add(config.AnonymousProject)
	}
	slices.Sort(projects)
	var out []QuotaStatus
	for _, p := range projects {
		for _, m := range cfg.Quota.Metrics {
			limit, src, _ := cfg.QuotaLimit(p, m.Name)
			used, err := q.store.Used(ctx, now, p, m.Name)
			if err != nil {
				used = -1
			}
			out = append(out, QuotaStatus{Consumer: p, Metric: m.Name, Limit: limit, Source: string(src), Used: used})
		}
	}
	return out
}
