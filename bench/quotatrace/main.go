// Command quotatrace measures where the gfe's quota admissions over 1 ms
// come from: many goroutines on GOMAXPROCS=2 doing request-like CPU work
// and calling Enforcer.Admit, with the Enforcer's Run loop making calls to
// an in-process Allocator. Phase 1 counts durations (time.Now/time.Since
// around Admit, and around nothing); phase 2 records a runtime/trace and
// attributes every slow admit region's time to goroutine states
// (golang.org/x/exp/trace): waiting(sync) is time blocked on a lock or
// channel, Runnable time descheduled by the Go scheduler (no P free), and
// Running time on a P (which includes time the OS took the thread away).
//
// It is its own module (bench/quotatrace/go.mod) so that x/exp stays out
// of Spillway's. Run it on 2 cores, as the gfes of cmd/quotabench run:
//
//	cd bench/quotatrace && GOMAXPROCS=2 go run . -d 6s -td 3s
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	rtrace "runtime/trace"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	xtrace "golang.org/x/exp/trace"
	"google.golang.org/grpc"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/quotaclient"
	"github.com/spillway-lb/spillway/lb/quota"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

type alloc struct {
	mu sync.Mutex
	a  *quota.Allocator
}

func (s *alloc) AllocateQuota(_ context.Context, in *pb.AllocateQuotaRequest, _ ...grpc.CallOption) (*pb.AllocateQuotaResponse, error) {
	v := in.GetValues()[0]
	s.mu.Lock()
	res, err := s.a.Allocate(time.Now(), quota.Request{Consumer: in.GetConsumer(), Mode: quota.ModeBestEffort, Values: []quota.MetricValue{{Metric: v.GetMetric(), Value: v.GetValue()}}})
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	time.Sleep(time.Millisecond) // a round trip
	return &pb.AllocateQuotaResponse{Allocated: []*pb.QuotaMetricValue{{Metric: v.GetMetric(), Value: res.Allocated[0].Value}}}, nil
}

var (
	workers   = flag.Int("workers", 64, "admitting goroutines")
	consumers = flag.Int("consumers", 10, "consumers")
	work      = flag.Int("work", 4096, "bytes hashed per request (request-like CPU work)")
	dur       = flag.Duration("d", 8*time.Second, "phase 1 duration")
	tdur      = flag.Duration("td", 3*time.Second, "phase 2 (trace) duration")
	limit     = flag.Int("limit", 60000, "default limit per minute")
)

func main() {
	flag.Parse()
	fmt.Printf("GOMAXPROCS=%d workers=%d consumers=%d work=%dB limit=%d/min\n", runtime.GOMAXPROCS(0), *workers, *consumers, *work, *limit)
	var y strings.Builder
	fmt.Fprintf(&y, `
regions: [{name: r1, zones: [{name: z1, groups: [{name: g1, instances: [{address: "127.0.0.1:9001"}]}]}]}]
services: [{name: web, backends: [{group: g1, max_rate_per_instance: 10}]}]
routes: [{service: web}]
quota:
  metrics: [{name: calls, default_limit: %d}]
  charges: [{service: web, path_prefix: /api/, metric: calls}]
  consumers:
`, *limit)
	for i := range *consumers {
		fmt.Fprintf(&y, "  - {api_key: key-%04d-abcdefgh, project: p%04d}\n", i, i)
	}
	cfg, err := config.Parse([]byte(y.String()), "q.yaml")
	if err != nil {
		panic(err)
	}
	srv := &alloc{a: quota.NewAllocator(func(p, m string) (int64, bool) { l, _, ok := cfg.QuotaLimit(p, m); return l, ok })}
	e := quotaclient.New(quotaclient.Config{}, nil, func() quotaclient.Allocator { return srv }, zerolog.Nop(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Run(ctx)

	runtime.SetMutexProfileFraction(1)
	runtime.SetBlockProfileRate(1000) // 1µs

	var stop atomic.Bool
	var traced atomic.Bool
	type counts struct{ n, admitOver, nullOver, admitOver100u, nullOver100u int64 }
	res := make([]counts, *workers)
	var wg sync.WaitGroup
	run := func() {
		stop.Store(false)
		for w := range *workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, *work)
				reqs := make([]*http.Request, *consumers)
				for i := range reqs {
					reqs[i] = httptest.NewRequest(http.MethodGet, "/api/x", nil)
					reqs[i].Header.Set("x-api-key", fmt.Sprintf("key-%04d-abcdefgh", i))
				}
				c := &res[w]
				for i := 0; !stop.Load(); i++ {
					sum := sha256.Sum256(buf)
					buf[0] = sum[0]
					_ = make([]byte, 512) // garbage, as a request makes
					r := reqs[(w+i)%len(reqs)]
					if traced.Load() {
						rtrace.WithRegion(ctx, "admit", func() { e.Admit(cfg, "web", r, time.Now()) })
						rtrace.WithRegion(ctx, "null", func() {})
						continue
					}
					s := time.Now()
					e.Admit(cfg, "web", r, s)
					d := time.Since(s)
					s = time.Now()
					d0 := time.Since(s)
					c.n++
					if d > time.Millisecond {
						c.admitOver++
					}
					if d > 100*time.Microsecond {
						c.admitOver100u++
					}
					if d0 > time.Millisecond {
						c.nullOver++
					}
					if d0 > 100*time.Microsecond {
						c.nullOver100u++
					}
				}
			}()
		}
	}
	schedBefore := schedLat()
	run()
	time.Sleep(*dur)
	stop.Store(true)
	wg.Wait()
	schedAfter := schedLat()
	var tot counts
	for _, c := range res {
		tot.n += c.n
		tot.admitOver += c.admitOver
		tot.nullOver += c.nullOver
		tot.admitOver100u += c.admitOver100u
		tot.nullOver100u += c.nullOver100u
	}
	fmt.Printf("phase 1 (%v, no trace): %d admissions; over 1 ms: admit %d (%.4f%%), empty timing %d (%.4f%%); over 100 µs: admit %d, empty %d\n",
		*dur, tot.n, tot.admitOver, 100*float64(tot.admitOver)/float64(tot.n), tot.nullOver, 100*float64(tot.nullOver)/float64(tot.n), tot.admitOver100u, tot.nullOver100u)
	over, all := schedDiff(schedBefore, schedAfter, 1e-3)
	fmt.Printf("  runtime /sched/latencies (time runnable before running): %d of %d over 1 ms\n", over, all)
	var mb bytes.Buffer
	pprof.Lookup("mutex").WriteTo(&mb, 1)
	fmt.Println("  mutex profile (contention, cycles/count per stack; top lines naming quota):")
	printProfile(mb.String())
	var bb bytes.Buffer
	pprof.Lookup("block").WriteTo(&bb, 1)
	fmt.Println("  block profile (top lines naming quota):")
	printProfile(bb.String())

	// Phase 2: trace.
	var tb bytes.Buffer
	traced.Store(true)
	if err := rtrace.Start(&tb); err != nil {
		panic(err)
	}
	run()
	time.Sleep(*tdur)
	stop.Store(true)
	wg.Wait()
	rtrace.Stop()
	if p := os.Getenv("TRACE_OUT"); p != "" {
		os.WriteFile(p, tb.Bytes(), 0o644)
	}
	analyze(&tb)
}

func schedLat() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64Histogram()
}

func schedDiff(a, b *metrics.Float64Histogram, thr float64) (over, all uint64) {
	for i := range b.Counts {
		n := b.Counts[i] - a.Counts[i]
		all += n
		if b.Buckets[i] >= thr {
			over += n
		}
	}
	return
}

func printProfile(s string) {
	lines := strings.Split(s, "\n")
	shown := 0
	for i, l := range lines {
		if strings.HasPrefix(l, "--- ") || l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		// header lines: "cycles count @ addrs"
		if strings.Contains(l, "@") && shown < 6 {
			// gather stack lines following
			var st []string
			for j := i + 1; j < len(lines) && strings.HasPrefix(lines[j], "#"); j++ {
				f := strings.Fields(lines[j])
				if len(f) >= 3 {
					st = append(st, f[2])
				}
			}
			joined := strings.Join(st, " < ")
			if strings.Contains(joined, "quota") {
				fmt.Printf("    %s | %.200s\n", strings.SplitN(l, "@", 2)[0], joined)
				shown++
			}
		}
	}
	if shown == 0 {
		fmt.Println("    (no stack naming quota)")
	}
}

type region struct {
	start   xtrace.Time
	last    xtrace.Time
	state   xtrace.GoState
	reason  string
	byState map[string]time.Duration
	where   string        // the innermost frames where it last stopped running
	longest time.Duration // the longest stretch not running
	at      string        // where that stretch began
}

func analyze(r io.Reader) {
	rd, err := xtrace.NewReader(r)
	if err != nil {
		panic(err)
	}
	open := map[xtrace.GoID]*region{} // goroutine -> open region (admit or null)
	kind := map[xtrace.GoID]string{}
	state := map[xtrace.GoID]xtrace.GoState{}
	reason := map[xtrace.GoID]string{}
	type done struct {
		kind    string
		d       time.Duration
		byState map[string]time.Duration
		where   string // where it left the P for the longest time
	}
	var all []done
	label := func(s xtrace.GoState, why string) string {
		if s == xtrace.GoWaiting {
			return "waiting(" + why + ")"
		}
		return s.String()
	}
	for {
		ev, err := rd.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			panic(err)
		}
		switch ev.Kind() {
		case xtrace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != xtrace.ResourceGoroutine {
				continue
			}
			g := st.Resource.Goroutine()
			_, to := st.Goroutine()
			if rg := open[g]; rg != nil {
				d := ev.Time().Sub(rg.last)
				rg.byState[label(rg.state, rg.reason)] += d
				if rg.state != xtrace.GoRunning && d > rg.longest {
					rg.longest, rg.at = d, rg.where
					if rg.at == "" {
						rg.at = "(no stack in the trace: stopped by the runtime, e.g. its P taken while in a syscall, or a stop-the-world)"
					}
				}
				if to != xtrace.GoRunning {
					rg.where = frames(st.Stack, 3)
				}
				rg.last, rg.state, rg.reason = ev.Time(), to, st.Reason
			}
			state[g], reason[g] = to, st.Reason
		case xtrace.EventRegionBegin:
			g := ev.Goroutine()
			open[g] = &region{start: ev.Time(), last: ev.Time(), state: xtrace.GoRunning, byState: map[string]time.Duration{}}
			kind[g] = ev.Region().Type
		case xtrace.EventRegionEnd:
			g := ev.Goroutine()
			rg := open[g]
			if rg == nil {
				continue
			}
			rg.byState[label(rg.state, rg.reason)] += ev.Time().Sub(rg.last)
			all = append(all, done{kind[g], ev.Time().Sub(rg.start), rg.byState, rg.at})
			delete(open, g)
		}
	}
	for _, k := range []string{"admit", "null"} {
		var n, over int
		sum := map[string]time.Duration{}
		var ds []time.Duration
		for _, d := range all {
			if d.kind != k {
				continue
			}
			n++
			ds = append(ds, d.d)
			if d.d > time.Millisecond {
				over++
				for s, t := range d.byState {
					sum[s] += t
				}
			}
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		wheres := map[string]int{}
		for _, d := range all {
			if d.kind == k && d.d > time.Millisecond {
				wheres[d.where]++
			}
		}
		if n == 0 {
			continue
		}
		fmt.Printf("phase 2 (trace) region %q: %d, p99 %v, p99.99 %v, max %v; %d over 1 ms, their time by goroutine state:", k, n, ds[n*99/100], ds[n*9999/10000], ds[n-1], over)
		var ks []string
		for s := range sum {
			ks = append(ks, s)
		}
		sort.Strings(ks)
		for _, s := range ks {
			fmt.Printf(" %s %v;", s, sum[s].Round(time.Microsecond))
		}
		fmt.Println()
		var ws []string
		for w := range wheres {
			ws = append(ws, w)
		}
		sort.Slice(ws, func(i, j int) bool { return wheres[ws[i]] > wheres[ws[j]] })
		for i, w := range ws {
			if i == 5 {
				break
			}
			n := wheres[w]
			if w == "" {
				w = "(never off its P: slow while running, i.e. the OS took the thread)"
			}
			fmt.Printf("    %4d stopped longest at: %s\n", n, w)
		}
	}
}

// frames returns the n innermost frames of st, "a < b < c".
func frames(st xtrace.Stack, n int) string {
	var fs []string
	for f := range st.Frames() {
		fn := f.Func
		if i := strings.LastIndex(fn, "/"); i >= 0 {
			fn = fn[i+1:]
		}
		fs = append(fs, fn)
		if len(fs) == n {
			break
		}
	}
	return strings.Join(fs, " < ")
}
