package xdsexport

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway-lb/spillway/lb/clock"
)

// LoadReports is the export's load reporting service (LRS,
// envoy.service.load_stats.v3): the xDS clients whose clusters name this
// server as their LRS server (Options.LoadReporting) report, every
// Interval, how many calls they issued to each cluster. Demand turns the
// reports into what the gfes' demand is to the planner: requests per
// second per site and service. The clients bypass the gfes, so without
// their reports the plan would fill a region the clients already load.
//
// Guarantees:
//
//   - A client is at the site Access.Place gives it from its certificate
//     (its node's claim only picks among the sites it is granted); a
//     stream whose node claims another site is refused
//     (PERMISSION_DENIED), and so is one past the Gate's limits
//     (RESOURCE_EXHAUSTED).
//   - A client's demand is its latest report's issued calls over that
//     report's interval, per cluster (the service of the same name); a
//     cluster missing from a report has none. Only clusters that name a
//     service of SetServices that the client may see count; the others
//     are dropped and counted ("unknown_cluster").
//   - A stream keeps at most MaxClustersPerStream clusters of a report
//     and all streams together at most MaxEntries (the rest dropped and
//     counted: "stream_cap", "total_cap"), so memory is bounded whatever
//     the clients send.
//   - A site's demand for a service, summed over every client at the
//     site, is at most MaxSiteShare × the service's capacity (from
//     SetServices); the rest is reported as Excess.
//   - A client without a site is counted in Unplaced and not in Demand.
//   - A client's demand counts until its stream ends, or until it has
//     not reported for 3 × Interval (a client stalled or cut off without
//     its stream ending), whichever comes first.
//
// Safe for concurrent use.
type LoadReports struct {
	lrsv3.UnimplementedLoadReportingServiceServer

	// Immutable after NewLoadReports.
	cfg  LRSConfig
	opts LRSOptions
	log  zerolog.Logger // sampled
	clk  clock.Clock
	gate *Gate

	mu sync.Mutex
	// Guarded by mu.
	clients  map[uint64]*reporter // by stream
	next     uint64
	entries  int                // clusters held over every reporter
	capacity map[string]float64 // by service (SetServices)
}

// LRSConfig is what the operator sets for load reporting.
type LRSConfig struct {
	// Interval is how often clients are asked to report. Required, > 0.
	Interval time.Duration
	// MaxSiteShare bounds a site's demand for a service, summed over every
	// xDS client at the site, to this fraction of the service's capacity.
	// Default 1: a site's xDS clients count for at most what the service
	// can serve in all its regions together. Honest demand up to that is
	// planned in full (so the plan never sends clients to groups it
	// thinks empty while they can take the load), and demand beyond it
	// could not be served anywhere: counting more would only push other
	// sites' traffic farther, which is what a lying client wants. It is
	// half the bound on one gfe's gossiped demand (routing.DefaultBounds,
	// twice the capacity).
	MaxSiteShare float64
	// MaxClustersPerStream bounds the clusters kept of one report (the
	// services one client reports on). Default 1024.
	MaxClustersPerStream int
	// MaxEntries bounds the clusters kept over every stream together.
	// Default 65536 (a few MiB).
	MaxEntries int
}

// LRSOptions are LoadReports' dependencies.
type LRSOptions struct {
	// Access places every client. Required: OpenAccess without client
	// certificates.
	Access *Access
	// Gate counts the streams with the discovery server's (Server.Gate).
	// Nil: a Gate of DefaultLimits of its own.
	Gate *Gate
	// Clock times the reports. Nil: the real clock.
	Clock clock.Clock
	// Logger receives refused streams, sampled.
	Logger zerolog.Logger
	// Refused, if not nil, is called with the reason (Refused*) of every
	// stream refused. It must be safe for concurrent use and not block.
	Refused func(reason string)
	// Dropped, if not nil, is called with the number of clusters of a
	// report that were dropped and why ("unknown_cluster", "stream_cap",
	// "total_cap"), before Demand shows the report. It must be safe for
	// concurrent use, must not block and must not call LoadReports.
	Dropped func(reason string, n int)
}

// The reasons LRSOptions.Dropped receives.
const (
	DroppedUnknownCluster = "unknown_cluster" // not a service the client may see
	DroppedStreamCap      = "stream_cap"      // past MaxClustersPerStream
	DroppedTotalCap       = "total_cap"       // past MaxEntries
)

// DefaultLRSConfig returns the defaults of every field of LRSConfig but
// Interval.
func DefaultLRSConfig() LRSConfig {
	return LRSConfig{MaxSiteShare: 1, MaxClustersPerStream: 1024, MaxEntries: 65536}
}

// Validate reports every problem with c, naming its field (0 is the
// default but for Interval).
func (c LRSConfig) Validate() error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("xds.load_report_interval: must be > 0, got %v", c.Interval))
	}
	if !(c.MaxSiteShare >= 0) || math.IsInf(c.MaxSiteShare, 0) {
		errs = append(errs, fmt.Errorf("xds.max_site_demand: must be a finite fraction >= 0 (0: the default), got %v", c.MaxSiteShare))
	}
	if c.MaxClustersPerStream < 0 || c.MaxEntries < 0 {
		errs = append(errs, fmt.Errorf("xds: lrs caps must be >= 0 (0: the default), got %d per stream, %d in all", c.MaxClustersPerStream, c.MaxEntries))
	}
	return errors.Join(errs...)
}

// reporter is one client's stream and its latest report.
type reporter struct {
	place Placement
	at    time.Time          // of the latest report; zero before the first
	rate  map[string]float64 // calls/s by cluster
}

// NewLoadReports returns a LoadReports that knows no service yet
// (SetServices).
func NewLoadReports(cfg LRSConfig, opts LRSOptions) (*LoadReports, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Access == nil {
		return nil, errors.New("xdsexport: LRSOptions.Access is required (OpenAccess without client certificates)")
	}
	d := DefaultLRSConfig()
	if cfg.MaxSiteShare == 0 {
		cfg.MaxSiteShare = d.MaxSiteShare
	}
	if cfg.MaxClustersPerStream == 0 {
		cfg.MaxClustersPerStream = d.MaxClustersPerStream
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = d.MaxEntries
	}
	l := &LoadReports{
		cfg: cfg, opts: opts, clk: clock.OrReal(opts.Clock), gate: opts.Gate,
		log:     opts.Logger.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Second}),
		clients: map[uint64]*reporter{}, capacity: map[string]float64{},
	}
	if l.gate == nil {
		l.gate = NewGate(Limits{})
	}
	return l, nil
}

// Interval is the reporting interval clients are asked for.
func (l *LoadReports) Interval() time.Duration { return l.cfg.Interval }

// SetServices sets the services clients may report on, with each one's
// capacity (in its demand unit; requests/s for rate-balanced services),
// the base of MaxSiteShare. A cluster that names no service of capacity
// is dropped.
func (l *LoadReports) SetServices(capacity map[string]float64) {
	c := make(map[string]float64, len(capacity))
	for k, v := range capacity {
		c[k] = v
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.capacity = c
}

// drop counts n clusters dropped for reason.
func (l *LoadReports) drop(reason string, n int) {
	if n > 0 && l.opts.Dropped != nil {
		l.opts.Dropped(reason, n)
	}
}

// refuse counts and logs a refused stream and returns its status.
func (l *LoadReports) refuse(client string, err error) error {
	if l.opts.Refused != nil {
		l.opts.Refused(refusal(err))
	}
	l.log.Warn().Err(err).Str("client", client).Msg("lrs stream refused")
	return statusOf(err)
}

// StreamLoadStats implements the LRS stream: the client's first message
// names its node, the server places it (Access.Place), answers with the
// interval and "send all clusters", and every later message is a report.
func (l *LoadReports) StreamLoadStats(stream lrsv3.LoadReportingService_StreamLoadStatsServer) error {
	ids, client := clientOf(stream.Context())
	release, err := l.gate.Enter(client)
	if err != nil {
		return l.refuse(client, err)
	}
	defer release()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.GetNode() == nil {
		return status.Error(codes.InvalidArgument, "lrs: the first LoadStatsRequest must carry the node")
	}
	place, err := l.opts.Access.Place(ids, SiteOf(first.GetNode()))
	if err != nil {
		return l.refuse(client, err)
	}
	r := &reporter{place: place}
	l.mu.Lock()
	id := l.next
	l.next++
	l.clients[id] = r
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.entries -= len(r.rate)
		delete(l.clients, id)
		l.mu.Unlock()
	}()
	if err := stream.Send(&lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(l.cfg.Interval)}); err != nil {
		return err
	}
	last := l.clk.Now()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		now := l.clk.Now()
		rate := reportRates(req, now.Sub(last))
		last = now
		l.keep(r, rate, now)
	}
}

// keep makes rate r's latest report at now: only the clusters that name a
// service r may see, within the stream's and the total caps.
func (l *LoadReports) keep(r *reporter, rate map[string]float64, now time.Time) {
	l.mu.Lock()
	unknown := 0
	for c := range rate {
		if _, ok := l.capacity[c]; !ok || !r.place.Allows(c) {
			delete(rate, c)
			unknown++
		}
	}
	room := max(0, min(l.cfg.MaxClustersPerStream, l.cfg.MaxEntries-(l.entries-len(r.rate))))
	over, reason := len(rate)-room, DroppedStreamCap
	if room < l.cfg.MaxClustersPerStream {
		reason = DroppedTotalCap
	}
	for c := range rate { // which ones go is arbitrary: a client past the caps is lying
		if len(rate) <= room {
			break
		}
		delete(rate, c)
	}
	l.entries += len(rate) - len(r.rate)
	r.at, r.rate = now, rate
	// Counted before Demand can show the report.
	l.drop(DroppedUnknownCluster, unknown)
	l.drop(reason, over)
	l.mu.Unlock()
}

// reportRates returns the calls/s per cluster of one report: the calls
// issued over the interval the report states, or over since (the time
// since the previous report) when it states none.
func reportRates(req *lrsv3.LoadStatsRequest, since time.Duration) map[string]float64 {
	out := make(map[string]float64, len(req.GetClusterStats()))
	for _, cs := range req.GetClusterStats() {
		d := cs.GetLoadReportInterval().AsDuration()
		if d <= 0 {
			d = since
		}
		if d <= 0 || cs.GetClusterName() == "" {
			continue
		}
		var issued uint64
		for _, ls := range cs.GetUpstreamLocalityStats() {
			issued += ls.GetTotalIssuedRequests()
		}
		if r := float64(issued) / d.Seconds(); r > 0 && !math.IsInf(r, 0) {
			out[cs.GetClusterName()] += r
		}
	}
	return out
}

// Demand is the xDS clients' demand at one time.
type Demand struct {
	// BySite is calls/s by site and service, summed over the clients of
	// each site that reported within 3 × Interval, each at most
	// MaxSiteShare × the service's capacity.
	BySite map[string]map[string]float64
	// Excess is, by site and service, what the clients reported beyond
	// that bound (calls/s); only the pairs that have any.
	Excess map[string]map[string]float64
	// Unplaced is the calls/s of clients without a site.
	Unplaced float64
}

// Demand returns the reported demand at now.
func (l *LoadReports) Demand(now time.Time) Demand {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := Demand{BySite: map[string]map[string]float64{}, Excess: map[string]map[string]float64{}}
	for _, r := range l.clients {
		if r.at.IsZero() || now.Sub(r.at) > 3*l.cfg.Interval {
			continue
		}
		for svc, v := range r.rate {
			if _, ok := l.capacity[svc]; !ok {
				continue // the service is gone since the report
			}
			if r.place.Site == "" {
				out.Unplaced += v
				continue
			}
			if out.BySite[r.place.Site] == nil {
				out.BySite[r.place.Site] = map[string]float64{}
			}
			out.BySite[r.place.Site][svc] += v
		}
	}
	for site, d := range out.BySite {
		for svc, v := range d {
			if limit := l.cfg.MaxSiteShare * l.capacity[svc]; v > limit {
				d[svc] = limit
				if out.Excess[site] == nil {
					out.Excess[site] = map[string]float64{}
				}
				out.Excess[site][svc] = v - limit
			}
		}
	}
	return out
}
