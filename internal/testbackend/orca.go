package testbackend

import (
	"context"
	"net/http"
	"strconv"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservicegrpc "github.com/cncf/xds/go/xds/service/orca/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/lb/loadreport"
)

// DefaultORCAMinInterval is the shortest interval between two out-of-band
// load reports on an OpenRcaService stream when Config.ORCAMinInterval is
// 0. It is short so that tests see reports quickly; grpc-go's own service
// never goes below 30s.
const DefaultORCAMinInterval = 100 * time.Millisecond

// utilization returns the load an instance of capacity c reports with
// inFlight requests holding a slot, queued requests waiting and rps
// arrivals per second over the last second (see the package doc):
//
//	U = max(inFlight/MaxConcurrency, rps/MaxRPS)                       with no queue
//	U = max(inFlight/MaxConcurrency, rps/MaxRPS, 1) + queued/D        with a queue
//
// where a term whose limit is 0 (unlimited) is left out, and D is
// MaxConcurrency when set, else MaxRPS: a queue as long as the slots is one
// more instance's worth of demand; with a rate limit alone, queued/MaxRPS
// is the seconds of work waiting. A request waits only when the instance
// cannot start it now, so U > 1 exactly when requests are queued or
// arrivals outrun MaxRPS. An instance with neither limit never queues and
// reports 0.
func utilization(c Capacity, inFlight, queued int, rps float64) float64 {
	var u float64
	if c.MaxConcurrency > 0 {
		u = float64(inFlight) / float64(c.MaxConcurrency)
	}
	if c.MaxRPS > 0 {
		u = max(u, rps/c.MaxRPS)
	}
	if queued > 0 {
		d := c.MaxRPS
		if c.MaxConcurrency > 0 {
			d = float64(c.MaxConcurrency)
		}
		u = max(u, 1) + float64(queued)/d
	}
	return u
}

// Named metrics that the load reports carry besides loadreport.QueueMetric
// (see "CPU and concurrency" in the package doc).
const (
	// CPUCoresMetric is the process's CPU cores in use over the last second.
	CPUCoresMetric = "cpu_cores"
	// ConcurrencyMetric is the instance's average in-flight requests over
	// the last second.
	ConcurrencyMetric = "concurrency"
)

// load is an instance's load report: the fields lb/loadreport knows, and
// the named metrics it does not keep (its parser skips them; the
// autoscaler reads them).
type load struct {
	loadreport.Report
	CPUCores, Concurrency float64
}

// loadReport returns the instance's load now: utilization (see above) as
// application_utilization; as cpu_utilization the CPU cores in use over
// the last second divided by Config.CPUs when that is set, else the
// utilization again (see "CPU and concurrency" in the package doc); the
// arrivals per second over the last second as rps_fractional; and the
// named metrics queue (requests queued now), cpu_cores and concurrency.
func (in *instance) loadReport() load {
	use := in.meter.read(in.clock.Now())
	inFlight, queued, rps := in.lim.report()
	u := utilization(in.cfg.Capacity, inFlight, queued, rps)
	cpu := u
	if in.cpusSet {
		cpu = use.CPUCores / in.cpus
	}
	return load{
		Report: loadreport.Report{
			ApplicationUtilization: u,
			CPUUtilization:         cpu,
			RPSFractional:          rps,
			Queue:                  float64(queued),
		},
		CPUCores:    use.CPUCores,
		Concurrency: use.Concurrency,
	}
}

// formatLoad returns l as an Endpoint-Load-Metrics TEXT value:
// loadreport.Format's, then the named metrics cpu_cores and concurrency.
func formatLoad(l load) string {
	b := []byte(loadreport.Format(l.Report))
	b = append(b, ", named_metrics."+CPUCoresMetric+"="...)
	b = strconv.AppendFloat(b, l.CPUCores, 'g', -1, 64)
	b = append(b, ", named_metrics."+ConcurrencyMetric+"="...)
	b = strconv.AppendFloat(b, l.Concurrency, 'g', -1, 64)
	return string(b)
}

// setLoadHeader sets the Endpoint-Load-Metrics header of an answer to a
// normal request, unless load reports are off.
func (in *instance) setLoadHeader(w http.ResponseWriter) {
	if in.cfg.NoLoadReports {
		return
	}
	w.Header().Set(loadreport.Header, formatLoad(in.loadReport()))
}

// recordCallLoad sets the per-call ORCA report of an RPC, which
// orca.CallMetricsServerOption sends in its trailer endpoint-load-metrics-bin
// once the handler returns. It does nothing when load reports are off
// (the server then has no such option and ctx no recorder).
func (in *instance) recordCallLoad(ctx context.Context) {
	rec := orca.CallMetricsRecorderFromContext(ctx)
	if rec == nil {
		return
	}
	r := in.loadReport()
	rec.SetApplicationUtilization(r.ApplicationUtilization)
	rec.SetCPUUtilization(r.CPUUtilization)
	rec.SetQPS(r.RPSFractional)
	rec.SetNamedMetric(loadreport.QueueMetric, r.Queue)
	rec.SetNamedMetric(CPUCoresMetric, r.CPUCores)
	rec.SetNamedMetric(ConcurrencyMetric, r.Concurrency)
}

// reportProto returns l as an ORCA load report proto.
func reportProto(l load) *v3orcapb.OrcaLoadReport {
	return &v3orcapb.OrcaLoadReport{
		ApplicationUtilization: l.ApplicationUtilization,
		CpuUtilization:         l.CPUUtilization,
		RpsFractional:          l.RPSFractional,
		NamedMetrics: map[string]float64{
			loadreport.QueueMetric: l.Queue,
			CPUCoresMetric:         l.CPUCores,
			ConcurrencyMetric:      l.Concurrency,
		},
	}
}

// orcaService is xds.service.orca.v3.OpenRcaService, the out-of-band load
// reports: StreamCoreMetrics sends the instance's report at once and then
// every interval, the longer of the one the client asks for and
// minInterval, on the instance's clock. grpc-go's orca.Service is not used
// because it cannot report more often than every 30s and ticks on the real
// clock. The stream takes no capacity and no emulated delay; it ends when
// the client cancels it, or with UNAVAILABLE when the instance stops, so
// that a graceful stop does not wait for it.
type orcaService struct {
	v3orcaservicegrpc.UnimplementedOpenRcaServiceServer
	in          *instance
	minInterval time.Duration
}

func (o *orcaService) StreamCoreMetrics(req *v3orcaservicegrpc.OrcaLoadReportRequest, stream v3orcaservicegrpc.OpenRcaService_StreamCoreMetricsServer) error {
	interval := max(req.GetReportInterval().AsDuration(), o.minInterval)
	ticker := o.in.clock.NewTicker(interval)
	defer ticker.Stop()
	ctx := stream.Context()
	for {
		if err := stream.Send(reportProto(o.in.loadReport())); err != nil {
			return err
		}
		select {
		case <-ticker.C():
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-o.in.stopCtx.Done():
			return status.Error(codes.Unavailable, "testbackend: instance stopping")
		}
	}
}
