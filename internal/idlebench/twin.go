package idlebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/topology"
)

// Twin measurement (cmd/idlebench --twin): the p99 clause side by side.
//
// Run compares a load with the idle connections to the same load seconds
// earlier without them; on a machine shared with other work the two
// loads meet different neighbours, and their p99s differ by more than the
// idle connections could make them. RunTwin starts two identical gfes of
// one site instead and runs the same steady load against both at once,
// one of them holding the idle connections: whatever else the machine
// does, both loads meet it at the same moments, and the ratio of their
// p99s is what the idle connections cost. The roles alternate from round
// to round (the idle connections closed, and opened anew to the other
// gfe), and a first round without any says how far apart the twins are
// without them.

// TwinRound is one round of RunTwin.
type TwinRound struct {
	// Idle is the gfe (0 or 1) that held the idle connections; -1 in the
	// control round, which had none.
	Idle int `json:"idle_gfe"`
	// P99 is each gfe's steady load p99, ms.
	P99 [2]float64 `json:"p99_ms"`
	// Ratio is the p99 of the gfe with the idle connections over the
	// other's (the control round: gfe 0's over gfe 1's).
	Ratio float64 `json:"ratio"`
	// Costs are each gfe's GCs and CPU per request during the load.
	Costs [2]PhaseCost `json:"costs"`
	// IdleCPU is each gfe's CPU over Options.Window before the load, in
	// percent of a core, measured at the same time; IdleCPUIncrease the
	// one with the idle connections minus its twin's (the control round:
	// gfe 0's minus gfe 1's).
	IdleCPU         [2]float64 `json:"idle_cpu_pct"`
	IdleCPUIncrease float64    `json:"idle_cpu_increase_pct"`
	// Failed counts each load's failed and dropped requests, Errors says
	// what they were.
	Failed [2]int64  `json:"failed"`
	Errors [2]string `json:"errors,omitempty"`
}

// TwinResult is what RunTwin measured.
type TwinResult struct {
	IdleConns int         `json:"idle_conns"`
	Rate      float64     `json:"active_rate_each"`
	Rounds    []TwinRound `json:"rounds"`
	// MedianRatio is the median of the ratios of the rounds with idle
	// connections; ControlRatio the control round's.
	MedianRatio  float64 `json:"active_p99_median_ratio"`
	ControlRatio float64 `json:"control_ratio"`
	// MedianIdleCPUIncrease is the median of the rounds' idle CPU
	// increases, percent of a core.
	MedianIdleCPUIncrease float64 `json:"idle_cpu_increase_median_pct"`
}

// RunTwin runs the twin measurement: a control round, then o.Rounds
// rounds (at least 2, so that each gfe holds the idle connections once)
// of o.Conns idle connections on one gfe and the steady load o.Rate on
// both for o.Load.
func RunTwin(ctx context.Context, o Options) (*TwinResult, error) {
	o.defaults()
	o.Rounds = max(o.Rounds, 2)
	if o.Holder == "" {
		return nil, errors.New("idlebench: Options.Holder is required")
	}
	srcs := Sources(o.Net, o.Conns, o.PerSource)
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "spillway-idlebench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	}
	spec := Spec(o)
	spec.Sites[0].GFEs = 2
	fmt.Fprintf(o.Log, "starting two gfes, control plane, backend (in %s)\n", o.Dir)
	c, err := topology.Start(ctx, spec, topology.Options{Dir: o.Dir, Bins: o.Bins, Tee: o.Tee})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	client := c.Client()
	res := &TwinResult{IdleConns: o.Conns, Rate: o.Rate}
	// idle measures both gfes' CPU over the same window.
	idle := func(rd *TwinRound) error {
		var (
			wg   sync.WaitGroup
			errs [2]error
		)
		for i, gf := range c.GFEs[:2] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rd.IdleCPU[i], errs[i] = idleCPU(ctx, gf.Proc.Pid(), 0, o.Window, func() func() error { return func() error { return nil } })
			}()
		}
		wg.Wait()
		return errors.Join(errs[:]...)
	}
	// both runs the steady load against both gfes at once.
	both := func(warmup time.Duration) (rd TwinRound, err error) {
		var (
			wg   sync.WaitGroup
			lrs  [2]*loadgen.Result
			errs [2]error
			cs   [2]counters
		)
		for i, gf := range c.GFEs[:2] {
			if cs[i], err = phaseCounters(client, gf.Admin, gf.Proc.Pid()); err != nil {
				return rd, err
			}
		}
		for i, gf := range c.GFEs[:2] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lrs[i], errs[i] = loadgen.Run(ctx, loadgen.Config{
					URL: gf.URL + "/", Rate: o.Rate, Duration: warmup + o.Load, Warmup: warmup,
					Sources: []netip.Addr{c.Spec.ClientIP(0)},
				})
			}()
		}
		wg.Wait()
		if err := errors.Join(errs[:]...); err != nil {
			return rd, err
		}
		for i, gf := range c.GFEs[:2] {
			after, err := phaseCounters(client, gf.Admin, gf.Proc.Pid())
			if err != nil {
				return rd, err
			}
			rd.Costs[i] = after.cost(cs[i], lrs[i].Sent)
			rd.P99[i] = float64(lrs[i].Percentile(99)) / 1e6
			rd.Failed[i] = lrs[i].Failed + lrs[i].Dropped
			for code, n := range lrs[i].Status {
				if code/100 != 2 {
					rd.Errors[i] = fmt.Sprintf("%s%d× status %d; ", rd.Errors[i], n, code)
				}
			}
			for kind, n := range lrs[i].Errors {
				rd.Errors[i] = fmt.Sprintf("%s%d× %s; ", rd.Errors[i], n, kind)
			}
		}
		return rd, nil
	}

	fmt.Fprintf(o.Log, "control round: idle CPU and steady load on both gfes, no idle connections\n")
	var ctl TwinRound
	if err := sleep(ctx, o.Settle); err != nil {
		return nil, err
	}
	if err := idle(&ctl); err != nil {
		return nil, err
	}
	rd, err := both(o.Warmup)
	if err != nil {
		return nil, err
	}
	rd.Idle, rd.IdleCPU, rd.IdleCPUIncrease = -1, ctl.IdleCPU, ctl.IdleCPU[0]-ctl.IdleCPU[1]
	if rd.P99[1] > 0 {
		rd.Ratio = rd.P99[0] / rd.P99[1]
	}
	res.Rounds = append(res.Rounds, rd)
	res.ControlRatio = rd.Ratio
	for i := range o.Rounds {
		gi := i % 2
		fmt.Fprintf(o.Log, "round %d: %d idle connections on gfe %d, idle CPU and steady load on both\n", i+1, o.Conns, gi)
		h, err := startHolder(o.Holder, HoldConfig{Addr: hostPort(c.GFEs[gi].URL), Sources: srcs, Conns: o.Conns, Parallel: 64, KeepAlive: o.ClientKeepAlive})
		if err != nil {
			return nil, err
		}
		rep, err := h.report()
		if err == nil && rep.Failed > 0 {
			err = fmt.Errorf("%d of %d idle connections failed their first request (first: %s)", rep.Failed, o.Conns, rep.Error)
		}
		if err == nil {
			err = sleep(ctx, o.Settle)
		}
		var cpu TwinRound
		if err == nil {
			err = idle(&cpu)
		}
		if err == nil {
			rd, err = both(0)
		}
		h.stop()
		if err != nil {
			return nil, err
		}
		rd.Idle, rd.IdleCPU = gi, cpu.IdleCPU
		rd.IdleCPUIncrease = rd.IdleCPU[gi] - rd.IdleCPU[1-gi]
		if other := rd.P99[1-gi]; other > 0 {
			rd.Ratio = rd.P99[gi] / other
		}
		res.Rounds = append(res.Rounds, rd)
		if err := sleep(ctx, o.Settle); err != nil {
			return nil, err
		}
	}
	var ratios, cpus []float64
	for _, rd := range res.Rounds[1:] {
		ratios = append(ratios, rd.Ratio)
		cpus = append(cpus, rd.IdleCPUIncrease)
	}
	res.MedianRatio = median(ratios)
	res.MedianIdleCPUIncrease = median(cpus)
	return res, nil
}

// WriteTwin prints r for people.
func WriteTwin(w io.Writer, r *TwinResult) {
	fmt.Fprintf(w, "two gfes, %g req/s on each at once; %d idle connections on one of them a round\n", r.Rate, r.IdleConns)
	for i, rd := range r.Rounds {
		who := "none (control)"
		if rd.Idle >= 0 {
			who = fmt.Sprintf("on gfe %d", rd.Idle)
		}
		fmt.Fprintf(w, "  round %d, idle connections %s: idle CPU %.2f%%, %.2f%% (%+.2f%%); p99 %.2f ms (gfe 0), %.2f ms (gfe 1): ×%.2f; GCs %.0f, %.0f; CPU per request %.0f, %.0f µs; failed %d, %d\n",
			i, who, rd.IdleCPU[0], rd.IdleCPU[1], rd.IdleCPUIncrease, rd.P99[0], rd.P99[1], rd.Ratio, rd.Costs[0].GCs, rd.Costs[1].GCs, rd.Costs[0].CPUPerRequest, rd.Costs[1].CPUPerRequest, rd.Failed[0], rd.Failed[1])
	}
	fmt.Fprintf(w, "  p99 with the idle connections over the twin's without them, median of %d rounds: ×%.2f (control ×%.2f); idle CPU increase, median: %+.2f%% of a core\n", len(r.Rounds)-1, r.MedianRatio, r.ControlRatio, r.MedianIdleCPUIncrease)
}
