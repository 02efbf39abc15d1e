package idlebench

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/testkit"
)

var bins map[string]string

func TestMain(m *testing.M) {
	testkit.RunWithBinaries(m, &bins, "gfe", "controlplane", "testbackend", "idlebench")
}

// TestIdleConnectionsHeld: 800 keep-alive connections from 8 client
// addresses, each having made one request, stay open beside a steady load
// on a real gfe, and are every one served again after idling. Holding no
// request buffers (its bufio.Reader alone is 68 KiB at the default
// max_header_bytes) and no goroutine while idle (parked in the poller),
// each costs the gfe under 11 KiB of resident set, under 16 KiB of Go
// heap, under 4 KiB of goroutine stack and under a quarter of a
// goroutine. At 800 the fixed costs weigh: the poller's spare workers (at
// most 64, their stacks) and the pool's request buffers of the burst of
// first requests; measured 7.7 KiB, 1.1 KiB of stack, 0.07 goroutines
// (2.0 KiB, 13 B and none at 15,000, cmd/idlebench). A goroutine each,
// its stack grown to 8 KiB, measured 14.6 KiB, 8.4 KiB and 1.
func TestIdleConnectionsHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 800
	r, err := Run(ctx, Options{
		Dir: t.TempDir(), Bins: bins, Holder: bins["idlebench"], Net: 174,
		Conns: n, PerSource: 100, Rate: 100, Load: time.Second, Warmup: 500 * time.Millisecond,
		Window: time.Second, Settle: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *r)
	if r.Opened != n || r.ServedAfterIdle != n {
		t.Errorf("%d opened, %d served again after idling; want %d and %d (first failure: %s)", r.Opened, r.ServedAfterIdle, n, n, r.HolderFirstFail)
	}
	if r.Refused != 0 || r.Reclaimed != 0 {
		t.Errorf("the gfe refused %v connections and reclaimed %v idle ones; want none", r.Refused, r.Reclaimed)
	}
	if r.RSSPerIdleConn >= 11<<10 {
		t.Errorf("%.0f B of RSS per idle connection, want < 11 KiB", r.RSSPerIdleConn)
	}
	if r.GoroutinesPerConn >= 0.25 || r.StackPerIdleConn >= 4<<10 {
		t.Errorf("%.2f goroutines and %.0f B of stack per idle connection, want < 0.25 and < 4 KiB (parked: none)", r.GoroutinesPerConn, r.StackPerIdleConn)
	}
	if r.HeapPerIdleConn >= 16<<10 {
		t.Errorf("%.0f B of Go heap per idle connection, want < 16 KiB", r.HeapPerIdleConn)
	}
	if r.FailedWithout != 0 || r.FailedWith != 0 {
		t.Errorf("steady load failed %d requests without and %d with the idle connections, want 0", r.FailedWithout, r.FailedWith)
	}
}

// TestTwinRoles: the twin measurement runs a control round with no idle
// connections, then gives them to gfe 0 and gfe 1 in turn, and every
// round has both gfes' p99, their ratio, the idle CPU increase of the one
// holding them over the other (gfe 0's over gfe 1's in the control), and
// no failed request (400 connections on real gfes; the p99 figures
// themselves are cmd/idlebench --twin's, BENCHMARKS.md §8).
func TestTwinRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := RunTwin(ctx, Options{
		Dir: t.TempDir(), Bins: bins, Holder: bins["idlebench"], Net: 175,
		Conns: 400, PerSource: 100, Rate: 100, Load: time.Second, Warmup: 500 * time.Millisecond,
		Window: 500 * time.Millisecond, Settle: 300 * time.Millisecond, Rounds: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *r)
	if len(r.Rounds) != 3 {
		t.Fatalf("%d rounds, want 3 (the control and 2)", len(r.Rounds))
	}
	for i, rd := range r.Rounds {
		if want := i - 1; rd.Idle != want {
			t.Errorf("round %d: idle connections on gfe %d, want %d", i, rd.Idle, want)
		}
		if rd.P99[0] <= 0 || rd.P99[1] <= 0 || rd.Ratio <= 0 {
			t.Errorf("round %d: p99 %v, ratio %v; want both measured", i, rd.P99, rd.Ratio)
		}
		if rd.Failed != [2]int64{} {
			t.Errorf("round %d: failed %v (%v), want none", i, rd.Failed, rd.Errors)
		}
		g := max(rd.Idle, 0)
		if want := rd.IdleCPU[g] - rd.IdleCPU[1-g]; rd.IdleCPU[0] < 0 || rd.IdleCPU[1] < 0 || math.Abs(rd.IdleCPUIncrease-want) > 1e-9 {
			t.Errorf("round %d: idle CPU %v, increase %v; want both ≥ 0 and an increase of %v", i, rd.IdleCPU, rd.IdleCPUIncrease, want)
		}
	}
	if r.MedianRatio <= 0 || r.ControlRatio <= 0 {
		t.Errorf("median ratio %v, control %v; want both measured", r.MedianRatio, r.ControlRatio)
	}
}

// TestParseStat: utime + stime come from fields 14 and 15, counted after
// the command name, which may hold spaces and parentheses.
func TestParseStat(t *testing.T) {
	tests := []struct {
		stat string
		want time.Duration
	}{
		{"42 (gfe) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 0 0", 3 * time.Second},
		{"7 (a b) c)) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 1 0 0", 30 * time.Millisecond},
	}
	for _, tt := range tests {
		got, err := parseStat([]byte(tt.stat))
		if err != nil || got != tt.want {
			t.Errorf("parseStat(%q) = %v, %v; want %v", tt.stat, got, err, tt.want)
		}
	}
	if _, err := parseStat([]byte("1 (x) S 1")); err == nil {
		t.Error("parseStat of a short line: no error")
	}
}

// TestParseNetstat: a field of /proc/net/netstat is found by its section
// and name (a line of names, then one of values); a missing one is an
// error.
func TestParseNetstat(t *testing.T) {
	const text = "TcpExt: SyncookiesSent TCPKeepAlive DelayedACKs\nTcpExt: 0 35640 12\nIpExt: InNoRoutes TCPKeepAlive\nIpExt: 1 7\n"
	tests := []struct {
		prefix, name string
		want         int64
		ok           bool
	}{
		{"TcpExt:", "TCPKeepAlive", 35640, true},
		{"TcpExt:", "DelayedACKs", 12, true},
		{"IpExt:", "TCPKeepAlive", 7, true},
		{"TcpExt:", "NoSuch", 0, false},
		{"MPTcpExt:", "TCPKeepAlive", 0, false},
	}
	for _, tt := range tests {
		got, err := parseNetstat([]byte(text), tt.prefix, tt.name)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseNetstat(%s %s) = %d, %v; want %d (ok %v)", tt.prefix, tt.name, got, err, tt.want, tt.ok)
		}
	}
}

// TestMedian: the median of the rounds' ratios, odd and even counts.
func TestMedian(t *testing.T) {
	tests := []struct {
		x    []float64
		want float64
	}{
		{nil, 0},
		{[]float64{1.3}, 1.3},
		{[]float64{1.64, 1.0, 1.02}, 1.02},
		{[]float64{1.64, 1.0, 1.02, 0.9}, 1.01},
	}
	for _, tt := range tests {
		if got := median(slices.Clone(tt.x)); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("median(%v) = %v, want %v", tt.x, got, tt.want)
		}
	}
}
