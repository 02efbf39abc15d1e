package xdsexport

import (
	"errors"
	"io"
	"math"
	"sync"
	"time"

	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway-lb/spillway/internal/clock"
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
//   - A client's demand is its latest report's issued calls over that
//     report's interval, per cluster (the service of the same name); a
//     cluster missing from a report has none.
//   - A client without a site (node.locality.region) is counted in
//     Unplaced and not in Demand.
//   - A client's demand counts until its stream ends, or until it has
//     not reported for 3 × Interval (a client stalled or cut off without
//     its stream ending), whichever comes first.
//
// Safe for concurrent use.
type LoadReports struct {
	lrsv3.UnimplementedLoadReportingServiceServer

	interval time.Duration
	clk      clock.Clock

	mu      sync.Mutex
	clients map[uint64]*reporter // by stream
	next    uint64
}

// reporter is one client's stream and its latest report.
type reporter struct {
	site string
	at   time.Time          // of the latest report; zero before the first
	rate map[string]float64 // calls/s by cluster
}

// NewLoadReports returns a LoadReports asking clients to report every
// interval (> 0), on clk (nil: the real clock).
func NewLoadReports(interval time.Duration, clk clock.Clock) *LoadReports {
	return &LoadReports{interval: interval, clk: clock.OrReal(clk), clients: map[uint64]*reporter{}}
}

// Interval is the reporting interval clients are asked for.
func (l *LoadReports) Interval() time.Duration { return l.interval }

// StreamLoadStats implements the LRS stream: the client's first message
// names its node, the server answers with the interval and "send all
// clusters", and every later message is a report.
func (l *LoadReports) StreamLoadStats(stream lrsv3.LoadReportingService_StreamLoadStatsServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.GetNode() == nil {
		return status.Error(codes.InvalidArgument, "lrs: the first LoadStatsRequest must carry the node")
	}
	r := &reporter{site: SiteOf(first.GetNode())}
	l.mu.Lock()
	id := l.next
	l.next++
	l.clients[id] = r
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.clients, id)
		l.mu.Unlock()
	}()
	if err := stream.Send(&lrsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(l.interval)}); err != nil {
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
		l.mu.Lock()
		r.at, r.rate = now, rate
		l.mu.Unlock()
	}
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

// Demand returns the reported demand at now: calls/s by site and service,
// summed over the clients of each site that reported within 3 × Interval.
// Unplaced is the calls/s of clients without a site.
func (l *LoadReports) Demand(now time.Time) (demand map[string]map[string]float64, unplaced float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	demand = map[string]map[string]float64{}
	for _, r := range l.clients {
		if r.at.IsZero() || now.Sub(r.at) > 3*l.interval {
			continue
		}
		for svc, v := range r.rate {
			if r.site == "" {
				unplaced += v
				continue
			}
			if demand[r.site] == nil {
				demand[r.site] = map[string]float64{}
			}
			demand[r.site][svc] += v
		}
	}
	return demand, unplaced
}
