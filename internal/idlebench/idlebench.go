// Package idlebench measures what idle keep-alive connections cost one gfe
// (BENCHMARKS.md §8, "15,000 idle connections"; cmd/idlebench): a real gfe,
// control plane and test backend on loopback, a steady load on a few
// connections, and, from a process of its own (Hold), many connections
// that each made one request and then wait, spread over many client
// addresses so that no address reaches max_connections_per_client.
//
// In one run, in this order: the steady load without the idle connections
// (its latency percentiles), the gfe's CPU over a window without any load,
// its resident set; then the idle connections open, and the gfe's resident
// set and CPU over the same window are measured again, the same steady
// load runs beside them, and every idle connection makes one more request,
// which must be served. The idle connections' cost is the difference:
// resident set (VmRSS) with them minus without, divided by their number;
// the Go runtime's heap and stack in use likewise (the gfe's /metrics),
// which say where the resident set goes; idle CPU with them minus
// without. With Options.Rounds the two steady loads run again, the idle
// connections closed and then opened anew, so that a run gives several
// ratios of loads a few seconds apart; each load also reports the gfe's
// GCs and CPU per request and the host's TCP keep-alive probes during it.
package idlebench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/topology"
)

// Options for Run. Zero fields take the defaults named.
type Options struct {
	// Dir holds binaries, config and logs. Default: a temporary directory,
	// removed when Run returns.
	Dir string
	// Bins are prebuilt gfe, controlplane and testbackend binaries
	// (topology.Options.Bins); nil builds them.
	Bins map[string]string
	// Holder is the binary run as "Holder hold" for the idle connections
	// (cmd/idlebench). Required.
	Holder string
	// Net is the second octet of the deployment's addresses. Default 173.
	Net int
	// Conns is how many idle connections (default 15000), PerSource how
	// many of them share one client address (default 150; at most the
	// listener's max_connections_per_client, 256 by default).
	Conns, PerSource int
	// Rate is the steady load, requests/s (default 500), run for Load
	// (default 10s) after a first Warmup (default 3s) that is not counted.
	Rate         float64
	Load, Warmup time.Duration
	// Rounds is how many times the two steady loads run, without and
	// then with the idle connections (default 1): after the first round
	// (the whole sequence above) the idle connections close, the load
	// runs without them, they open anew and it runs beside them, so that
	// each round's ratio compares two loads a few seconds apart.
	Rounds int
	// Window is how long the gfe's idle CPU is measured (default 10s),
	// Settle how long after a phase before (default 2s).
	Window, Settle time.Duration
	// Poller is the gfe's --poller mode (default auto).
	Poller string
	// PlanInterval and RTTInterval are the gfe's (topology's defaults,
	// 250ms each, when zero; the gfe's own are 500ms and 1s): most of
	// what an idle gfe does is planning and probing at these intervals.
	PlanInterval, RTTInterval time.Duration
	// ClientKeepAlive is the idle connections' TCP keep-alive idle time
	// on the client side (net.Dialer.KeepAlive: 0 Go's default, 15s;
	// negative none).
	ClientKeepAlive time.Duration
	// HeapProfile, when set, is a file that receives the gfe's heap
	// profile (its --pprof) taken with the idle connections open.
	HeapProfile string
	// CPUProfile, when set, is a file that receives the gfe's CPU
	// profile (its --pprof) over the steady load beside the idle
	// connections.
	CPUProfile string
	// TraceDir, when set, is a directory that receives the gfe's runtime
	// traces (its --pprof) of the first TraceSeconds (default 5) of each
	// phase: idle-without.trace, load-without.trace, idle-with.trace and
	// load-with.trace (go tool trace -pprof=sched says who waited to run,
	// -d=parsed what woke).
	TraceDir     string
	TraceSeconds int
	// Log receives progress lines (nil: none), Tee every process's log.
	Log, Tee io.Writer
}

func (o *Options) defaults() {
	set := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	if o.Net == 0 {
		o.Net = 173
	}
	if o.Conns == 0 {
		o.Conns = 15000
	}
	if o.PerSource == 0 {
		o.PerSource = 150
	}
	if o.Rate == 0 {
		o.Rate = 500
	}
	set(&o.Load, 10*time.Second)
	set(&o.Warmup, 3*time.Second)
	set(&o.Window, 10*time.Second)
	set(&o.Settle, 2*time.Second)
	o.Rounds = max(o.Rounds, 1)
	if o.Poller == "" {
		o.Poller = "auto"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Result is what a run measured. Sizes in bytes, CPU in percent of one
// core, latencies in milliseconds.
type Result struct {
	IdleConns int    `json:"idle_conns"`
	Sources   int    `json:"sources"`
	Poller    string `json:"poller"`
	// Opened and ServedAfterIdle count the idle connections whose first
	// request was served, and those served again at the end.
	Opened          int `json:"opened"`
	ServedAfterIdle int `json:"served_after_idle"`

	RSSWithout        int64   `json:"rss_without_bytes"`
	RSSWith           int64   `json:"rss_with_bytes"`
	RSSPerIdleConn    float64 `json:"rss_per_idle_conn_bytes"`
	HeapPerIdleConn   float64 `json:"heap_per_idle_conn_bytes"`
	StackPerIdleConn  float64 `json:"stack_per_idle_conn_bytes"`
	GoroutinesPerConn float64 `json:"goroutines_per_idle_conn"`

	IdleCPUWithout float64 `json:"idle_cpu_without_pct"`
	IdleCPUWith    float64 `json:"idle_cpu_with_pct"`
	// IdleCPUIncrease is IdleCPUWith - IdleCPUWithout: what the idle
	// connections cost (the gfe's own background work, planning, gossip,
	// probes, is the same with or without them; negative within noise).
	IdleCPUIncrease float64 `json:"idle_cpu_increase_pct"`

	Rate            float64 `json:"active_rate"`
	P50Without      float64 `json:"active_p50_without_ms"`
	P99Without      float64 `json:"active_p99_without_ms"`
	P50With         float64 `json:"active_p50_with_ms"`
	P99With         float64 `json:"active_p99_with_ms"`
	P99Ratio        float64 `json:"active_p99_ratio"`
	FailedWithout   int64   `json:"active_failed_without"`
	FailedWith      int64   `json:"active_failed_with"`
	ActiveSentEach  int64   `json:"active_sent_per_phase"`
	HolderFirstFail string  `json:"holder_first_failure,omitempty"`
	// Refused and Reclaimed count the connections the gfe refused
	// (max_connections_per_client) and closed idle for a waiting client
	// (fd budget spent) after the idle connections opened.
	Refused float64 `json:"gfe_refused"`
	// ActiveErrors counts the steady load's failures of both phases by
	// kind (loadgen's transport error kinds, or "status NNN").
	ActiveErrors map[string]int64 `json:"active_errors,omitempty"`
	Reclaimed    float64          `json:"gfe_idle_reclaimed"`
	// PollerTurns counts the times the gfe's poller turned on or off
	// (--poller auto) while the idle connections were open.
	PollerTurns float64 `json:"gfe_poller_turns"`
	// Without and With are what the gfe and the host did during each
	// steady load: what may account for a p99 that differs.
	Without PhaseCost `json:"without"`
	With    PhaseCost `json:"with"`
	// Rounds are the p99s of every round (Options.Rounds; the first is
	// the one above), MedianRatio the median of their ratios.
	Rounds      []Round `json:"rounds"`
	MedianRatio float64 `json:"active_p99_median_ratio"`
}

// PhaseCost is what one steady load cost besides its latencies.
type PhaseCost struct {
	// GCs counts the gfe's garbage collections during the load.
	GCs float64 `json:"gfe_gcs"`
	// CPUPerRequest is the gfe's CPU (utime + stime) per request, µs.
	CPUPerRequest float64 `json:"gfe_cpu_per_request_us"`
	// KeepAliveProbes counts the TCP keep-alive probes the host's
	// kernel sent during the load (TcpExt TCPKeepAlive, every process:
	// the gfe's and the idle clients').
	KeepAliveProbes int64 `json:"host_keepalive_probes"`
}

// Spec is the benchmark's deployment: one gfe (site nyc), one control
// plane, one backend process with two instances far above the load, 1 ms
// away.
func Spec(o Options) topology.Spec {
	s := topology.Spec{
		Net:          o.Net,
		Regions:      []topology.Region{{Name: "us-east", Zones: []string{"b"}, Instances: 2, Rate: 50000}},
		Sites:        []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": time.Millisecond}}},
		ServiceTime:  100 * time.Microsecond,
		PlanInterval: o.PlanInterval, RTTInterval: o.RTTInterval,
		// 15,000 connections at 2 descriptors each would pass the budget
		// of a 20,000-descriptor process (BENCHMARKS.md §8).
		GFEArgs: []string{"--poller", o.Poller, "--fd-per-http-conn", "1"},
	}
	if o.HeapProfile != "" || o.CPUProfile != "" || o.TraceDir != "" {
		s.GFEArgs = append(s.GFEArgs, "--pprof")
	}
	return s
}

// Sources returns the client addresses of n idle connections, perSource
// each: 127.net.200.1 on.
func Sources(net, n, perSource int) []netip.Addr {
	k := (n + perSource - 1) / perSource
	return loadgen.Sources(netip.AddrFrom4([4]byte{127, byte(net), 200, 1}), k)
}

// Run runs the benchmark.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.defaults()
	if o.Holder == "" {
		return nil, errors.New("idlebench: Options.Holder is required")
	}
	srcs := Sources(o.Net, o.Conns, o.PerSource)
	if len(srcs) > 254 {
		return nil, fmt.Errorf("idlebench: %d connections at %d per address need %d addresses, more than 254", o.Conns, o.PerSource, len(srcs))
	}
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "spillway-idlebench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	} else if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "starting gfe, control plane, backend (in %s)\n", o.Dir)
	c, err := topology.Start(ctx, Spec(o), topology.Options{Dir: o.Dir, Bins: o.Bins, Tee: o.Tee})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	gf := c.GFEs[0]
	pid := gf.Proc.Pid()
	client := c.Client()
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	r := &Result{IdleConns: o.Conns, Sources: len(srcs), Poller: o.Poller, Rate: o.Rate}
	// trace starts the runtime trace of a phase, if asked for; the
	// function it returns waits for it.
	trace := func(name string) func() error {
		if o.TraceDir == "" {
			return func() error { return nil }
		}
		secs := o.TraceSeconds
		if secs <= 0 {
			secs = 5
		}
		return during(client, fmt.Sprintf("%s/debug/pprof/trace?seconds=%d", gf.Admin, secs), filepath.Join(o.TraceDir, name+".trace"))
	}
	// load runs the steady load (after warmup, not counted) and measures
	// its costs into pc, traced as name ("": not traced).
	load := func(warmup time.Duration, pc *PhaseCost, name string) (*loadgen.Result, error) {
		if warmup > 0 {
			// The warm-up alone, so that the costs count the load measured.
			if _, err := loadgen.Run(ctx, loadgen.Config{
				URL: gf.URL + "/", Rate: o.Rate, Duration: warmup, Sources: []netip.Addr{c.Spec.ClientIP(0)},
			}); err != nil {
				return nil, err
			}
		}
		before, err := phaseCounters(client, gf.Admin, pid)
		if err != nil {
			return nil, err
		}
		traced := func() error { return nil }
		if name != "" {
			traced = trace(name)
		}
		lr, err := loadgen.Run(ctx, loadgen.Config{
			URL: gf.URL + "/", Rate: o.Rate, Duration: o.Load,
			Sources: []netip.Addr{c.Spec.ClientIP(0)},
		})
		if err := errors.Join(err, traced()); err != nil {
			return nil, err
		}
		after, err := phaseCounters(client, gf.Admin, pid)
		if err != nil {
			return nil, err
		}
		*pc = after.cost(before, lr.Sent)
		return lr, nil
	}

	fmt.Fprintf(o.Log, "steady load without idle connections: %g req/s, %v (after %v warmup)\n", o.Rate, o.Load, o.Warmup)
	without, err := load(o.Warmup, &r.Without, "load-without")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "idle CPU without idle connections (%v)\n", o.Window)
	if r.IdleCPUWithout, err = idleCPU(ctx, pid, o.Settle, o.Window, func() func() error { return trace("idle-without") }); err != nil {
		return nil, err
	}
	if r.RSSWithout, err = rssBytes(pid); err != nil {
		return nil, err
	}
	g0, err := scrape(client, gf.Admin, goMetrics...)
	if err != nil {
		return nil, err
	}

	fmt.Fprintf(o.Log, "opening %d idle connections from %d addresses\n", o.Conns, len(srcs))
	hcfg := HoldConfig{Addr: hostPort(gf.URL), Sources: srcs, Conns: o.Conns, Parallel: 64, KeepAlive: o.ClientKeepAlive}
	h, err := startHolder(o.Holder, hcfg)
	if err != nil {
		return nil, err
	}
	defer func() { h.stop() }()
	first, err := h.report()
	if err != nil {
		return nil, err
	}
	r.Opened, r.HolderFirstFail = first.Opened, first.Error
	if first.Failed > 0 {
		return r, fmt.Errorf("idlebench: %d of %d idle connections failed their first request (first: %s)", first.Failed, o.Conns, first.Error)
	}
	fmt.Fprintf(o.Log, "idle CPU with %d idle connections (%v)\n", o.Conns, o.Window)
	if r.IdleCPUWith, err = idleCPU(ctx, pid, o.Settle, o.Window, func() func() error { return trace("idle-with") }); err != nil {
		return nil, err
	}
	r.IdleCPUIncrease = r.IdleCPUWith - r.IdleCPUWithout
	if r.RSSWith, err = rssBytes(pid); err != nil {
		return nil, err
	}
	g1, err := scrape(client, gf.Admin, goMetrics...)
	if err != nil {
		return nil, err
	}
	if o.HeapProfile != "" {
		if err := saveProfile(client, gf.Admin+"/debug/pprof/heap", o.HeapProfile); err != nil {
			return nil, err
		}
	}
	n := float64(o.Conns)
	r.RSSPerIdleConn = float64(r.RSSWith-r.RSSWithout) / n
	r.HeapPerIdleConn = (g1[heapInuse] - g0[heapInuse]) / n
	r.StackPerIdleConn = (g1[stackInuse] - g0[stackInuse]) / n
	r.GoroutinesPerConn = (g1[goroutines] - g0[goroutines]) / n

	fmt.Fprintf(o.Log, "steady load with %d idle connections: %g req/s, %v\n", o.Conns, o.Rate, o.Load)
	cpuProf := func() error { return nil }
	if o.CPUProfile != "" {
		secs := max(int(o.Load/time.Second), 1)
		cpuProf = during(client, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", gf.Admin, secs), o.CPUProfile)
	}
	with, err := load(0, &r.With, "load-with")
	if err := errors.Join(err, cpuProf()); err != nil {
		return nil, err
	}
	r.P50Without, r.P99Without = ms(without.Percentile(50)), ms(without.Percentile(99))
	r.P50With, r.P99With = ms(with.Percentile(50)), ms(with.Percentile(99))
	if r.P99Without > 0 {
		r.P99Ratio = r.P99With / r.P99Without
	}
	r.FailedWithout, r.FailedWith, r.ActiveSentEach = without.Failed+without.Dropped, with.Failed+with.Dropped, with.Sent
	for _, lr := range []*loadgen.Result{without, with} {
		for k, v := range lr.Errors {
			addErr(r, k, v)
		}
		for code, v := range lr.Status {
			if code/100 != 2 {
				addErr(r, fmt.Sprintf("status %d", code), v)
			}
		}
		if lr.Dropped > 0 {
			addErr(r, "dropped", lr.Dropped)
		}
	}

	fmt.Fprintf(o.Log, "one more request on every idle connection\n")
	again, err := h.check()
	if err != nil {
		return nil, err
	}
	r.ServedAfterIdle = again.Served
	// What closed idle connections, if any did.
	if m, err := scrape(client, gf.Admin, closers...); err == nil {
		r.Refused, r.Reclaimed = m[refused]-g0[refused], m[reclaimed]-g0[reclaimed]
		r.PollerTurns = m[turns] - g0[turns]
	}
	if again.Failed > 0 && r.HolderFirstFail == "" {
		r.HolderFirstFail = again.Error
	}

	// More rounds of the same two loads, side by side: the idle
	// connections closed, the load without them, then opened anew, and
	// the load with them.
	r.Rounds = []Round{{P99Without: r.P99Without, P99With: r.P99With, Ratio: r.P99Ratio}}
	for i := 1; i < o.Rounds; i++ {
		h.stop()
		if err := sleep(ctx, o.Settle); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Log, "round %d: steady load without idle connections\n", i+1)
		var rd Round
		lw, err := load(0, &rd.Without, "")
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Log, "round %d: opening %d idle connections, steady load with them\n", i+1, o.Conns)
		if h, err = startHolder(o.Holder, hcfg); err != nil {
			return nil, err
		}
		rep, err := h.report()
		if err != nil {
			return nil, err
		}
		if rep.Failed > 0 {
			return r, fmt.Errorf("idlebench: round %d: %d of %d idle connections failed their first request (first: %s)", i+1, rep.Failed, o.Conns, rep.Error)
		}
		if err := sleep(ctx, o.Settle); err != nil {
			return nil, err
		}
		lx, err := load(0, &rd.With, "")
		if err != nil {
			return nil, err
		}
		rd.P99Without, rd.P99With = ms(lw.Percentile(99)), ms(lx.Percentile(99))
		if rd.P99Without > 0 {
			rd.Ratio = rd.P99With / rd.P99Without
		}
		r.Rounds = append(r.Rounds, rd)
	}
	r.MedianRatio = medianRatio(r.Rounds)
	return r, nil
}

// Round is one pair of steady loads, without and with the idle
// connections, run one after the other (Options.Rounds).
type Round struct {
	P99Without float64 `json:"p99_without_ms"`
	P99With    float64 `json:"p99_with_ms"`
	Ratio      float64 `json:"ratio"`
	// Without and With are the two loads' costs (the first round's are
	// Result.Without and Result.With).
	Without PhaseCost `json:"without"`
	With    PhaseCost `json:"with"`
}

// medianRatio returns the median of the rounds' p99 ratios.
func medianRatio(rs []Round) float64 {
	x := make([]float64, len(rs))
	for i, rd := range rs {
		x[i] = rd.Ratio
	}
	return median(x)
}

// median returns the median of x (0 when empty), sorting x.
func median(x []float64) float64 {
	n := len(x)
	if n == 0 {
		return 0
	}
	slices.Sort(x)
	if n%2 == 0 {
		return (x[n/2-1] + x[n/2]) / 2
	}
	return x[n/2]
}

// The gfe's metrics Run reads.
const (
	goroutines = "go_goroutines"
	heapInuse  = "go_memstats_heap_inuse_bytes"
	stackInuse = "go_memstats_stack_inuse_bytes"
	refused    = "spillway_gfe_listener_refused_total"
	reclaimed  = "spillway_gfe_listener_idle_reclaimed_total"
	turns      = "spillway_gfe_poller_turns_total"
	gcs        = "go_gc_duration_seconds_count"
)

var (
	closers   = []string{refused, reclaimed, turns}
	goMetrics = append([]string{goroutines, heapInuse, stackInuse}, closers...)
)

func addErr(r *Result, kind string, n int64) {
	if r.ActiveErrors == nil {
		r.ActiveErrors = map[string]int64{}
	}
	r.ActiveErrors[kind] += n
}

// idleCPU waits settle, then returns the CPU process pid uses over
// window, in percent of one core. It calls start as the window starts and
// the function start returns as it ends.
func idleCPU(ctx context.Context, pid int, settle, window time.Duration, start func() func() error) (float64, error) {
	if err := sleep(ctx, settle); err != nil {
		return 0, err
	}
	end := start()
	c0, err := cpuTime(pid)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := sleep(ctx, window); err != nil {
		return 0, err
	}
	c1, err := cpuTime(pid)
	if err != nil {
		return 0, err
	}
	if err := end(); err != nil {
		return 0, err
	}
	return 100 * float64(c1-c0) / float64(time.Since(t0)), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// during starts saving what url answers to file (a profile or trace over
// some seconds) and returns a function that waits until it is saved.
func during(client *http.Client, url, file string) func() error {
	done := make(chan error, 1)
	go func() { done <- saveProfile(client, url, file) }()
	return func() error { return <-done }
}

// saveProfile writes what url answers to file.
func saveProfile(client *http.Client, url, file string) error {
	resp, err := client.Get(url)
	if err != nil {
		return fmt.Errorf("idlebench: profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("idlebench: profile: %s answered %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("idlebench: profile: %w", err)
	}
	return os.WriteFile(file, b, 0o644)
}

// hostPort returns the host:port of URL u.
func hostPort(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Host
}

// holder is a running Hold process.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// startHolder starts "bin hold" and sends it cfg.
func startHolder(bin string, cfg HoldConfig) (*holder, error) {
	cmd := exec.Command(bin, "hold")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("idlebench: start holder %s: %w", bin, err)
	}
	h := &holder{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	if err := json.NewEncoder(stdin).Encode(cfg); err != nil {
		h.stop()
		return nil, fmt.Errorf("idlebench: holder config: %w", err)
	}
	return h, nil
}

// report reads the holder's next report.
func (h *holder) report() (HoldReport, error) {
	var r HoldReport
	if !h.out.Scan() {
		return r, fmt.Errorf("idlebench: holder ended without a report: %v", h.out.Err())
	}
	if err := json.Unmarshal(h.out.Bytes(), &r); err != nil {
		return r, fmt.Errorf("idlebench: holder report %q: %w", h.out.Bytes(), err)
	}
	return r, nil
}

// check has the holder make one more request on each connection.
func (h *holder) check() (HoldReport, error) {
	if _, err := io.WriteString(h.stdin, "check\n"); err != nil {
		return HoldReport{}, fmt.Errorf("idlebench: holder: %w", err)
	}
	return h.report()
}

// stop ends the holder: its connections close with its stdin.
func (h *holder) stop() {
	h.stdin.Close()
	done := make(chan struct{})
	go func() {
		h.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		h.cmd.Process.Kill()
		<-done
	}
}

// WriteTable prints r for people.
func WriteTable(w io.Writer, r *Result) {
	kib := func(b float64) string { return fmt.Sprintf("%.2f KiB", b/1024) }
	fmt.Fprintf(w, "%d idle connections from %d addresses (poller %s): %d opened, %d served again after idling\n",
		r.IdleConns, r.Sources, r.Poller, r.Opened, r.ServedAfterIdle)
	fmt.Fprintf(w, "  gfe RSS:      %.1f MiB without, %.1f MiB with: %s per idle connection (Go heap %s, stacks %s, %.2f goroutines)\n",
		float64(r.RSSWithout)/(1<<20), float64(r.RSSWith)/(1<<20), kib(r.RSSPerIdleConn), kib(r.HeapPerIdleConn), kib(r.StackPerIdleConn), r.GoroutinesPerConn)
	fmt.Fprintf(w, "  gfe idle CPU: %.2f%% of a core without, %.2f%% with: %+.2f%% for the idle connections\n", r.IdleCPUWithout, r.IdleCPUWith, r.IdleCPUIncrease)
	fmt.Fprintf(w, "  steady load %g req/s: p50 %.2f ms, p99 %.2f ms without; p50 %.2f ms, p99 %.2f ms with (p99 ×%.2f); failed %d / %d of %d\n",
		r.Rate, r.P50Without, r.P99Without, r.P50With, r.P99With, r.P99Ratio, r.FailedWithout, r.FailedWith, r.ActiveSentEach)
	for _, p := range []struct {
		name string
		c    PhaseCost
	}{{"without", r.Without}, {"with", r.With}} {
		fmt.Fprintf(w, "  steady load %s: gfe %.0f µs CPU per request, %.0f GCs; host %d TCP keep-alive probes\n", p.name, p.c.CPUPerRequest, p.c.GCs, p.c.KeepAliveProbes)
	}
	if len(r.Rounds) > 1 {
		for i, rd := range r.Rounds {
			fmt.Fprintf(w, "  round %d: p99 %.2f ms without, %.2f ms with (×%.2f)\n", i+1, rd.P99Without, rd.P99With, rd.Ratio)
		}
		fmt.Fprintf(w, "  median p99 ratio of %d rounds: ×%.2f\n", len(r.Rounds), r.MedianRatio)
	}
	fmt.Fprintf(w, "  the gfe's poller turned on or off %.0f times with the idle connections open\n", r.PollerTurns)
	if len(r.ActiveErrors) > 0 {
		fmt.Fprintf(w, "  steady load failures: %v\n", r.ActiveErrors)
	}
	if r.Refused+r.Reclaimed > 0 {
		fmt.Fprintf(w, "  the gfe refused %.0f connections and closed %.0f idle ones for waiting clients\n", r.Refused, r.Reclaimed)
	}
	if r.HolderFirstFail != "" {
		fmt.Fprintf(w, "  first idle-connection failure: %s\n", r.HolderFirstFail)
	}
}
