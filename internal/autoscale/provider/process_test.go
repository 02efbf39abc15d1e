package provider

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/clock"
)

var testGroup = Group{Name: "us-east-b-web", Region: "us-east", Zone: "us-east-b"}

// TestProcessColdStart starts a real test backend with a 1s cold start,
// checks that it fails its health check (or is not up yet) until at least
// 1s after Start and passes it after, serves, and is drained by Stop with
// nothing left behind.
func TestProcessColdStart(t *testing.T) {
	const startup = time.Second
	ports := freePorts(t, 8)
	p, err := NewProcess(ProcessConfig{
		Command: []string{testbackendBin,
			"--instance", "name={{.Name}},addr={{.Address}},region={{.Region}},zone={{.Zone}}",
			"--startup-delay", startup.String(), "--shutdown-timeout", "2s"},
		Ports:        ports,
		DrainTimeout: defaultTestTimeout,
	}, ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })

	start := time.Now()
	insts, err := p.Start(t.Context(), testGroup, 1)
	if err != nil || len(insts) != 1 {
		t.Fatalf("Start = %v, %v; want one instance", insts, err)
	}
	inst := insts[0]
	want := Instance{Group: testGroup, Address: "127.0.0.1:" + strconv.Itoa(ports.First), Name: "us-east-b-web-1", PID: inst.PID}
	if inst != want || inst.PID == 0 {
		t.Fatalf("Start = %+v, want %+v with a pid", inst, want)
	}

	// Probe until healthy: every earlier answer is a refused connection
	// (not listening yet) or 503 "starting".
	c := &http.Client{Timeout: defaultTestTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	var starting int
	deadline := time.Now().Add(defaultTestTimeout)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("not healthy %v after Start", defaultTestTimeout)
		}
		resp, err := c.Get("http://" + inst.Address + "/healthz")
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "starting\n" {
			t.Fatalf("/healthz during start-up = %d %q, want 503 \"starting\"", resp.StatusCode, body)
		}
		starting++
		time.Sleep(20 * time.Millisecond)
	}
	if healthyAfter := time.Since(start); healthyAfter < startup {
		t.Errorf("healthy %v after Start, want at least the start-up delay %v", healthyAfter, startup)
	}
	t.Logf("healthy after %v, %d probes answered \"starting\"", time.Since(start), starting)

	resp, err := c.Get("http://" + inst.Address + "/work")
	if err != nil {
		t.Fatalf("GET /work: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Spillway-Backend") != inst.Name {
		t.Errorf("GET /work = %d from %q, want 200 from %q", resp.StatusCode, resp.Header.Get("X-Spillway-Backend"), inst.Name)
	}

	if got := p.Instances(); len(got) != 1 || got[0] != inst {
		t.Errorf("Instances = %+v, want [%+v]", got, inst)
	}
	if err := p.Stop(t.Context(), inst); err != nil {
		t.Fatalf("Stop: %v (want a drained exit after SIGTERM)", err)
	}
	if groupAlive(t, inst.PID) {
		t.Errorf("process group %d still alive after Stop", inst.PID)
	}
	if err := syscall.Kill(inst.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) after Stop = %v, want ESRCH (reaped)", inst.PID, err)
	}
	if got := p.Instances(); len(got) != 0 {
		t.Errorf("Instances after Stop = %+v, want none", got)
	}
	ln, err := net.Listen("tcp", inst.Address)
	if err != nil {
		t.Errorf("port of the stopped instance not free: %v", err)
	} else {
		_ = ln.Close()
	}
	if err := p.Stop(t.Context(), inst); !errors.Is(err, ErrUnknown) {
		t.Errorf("second Stop = %v, want ErrUnknown", err)
	}
}

// readyWriter closes ready once the output holds "ready\n".
type readyWriter struct {
	mu    sync.Mutex
	buf   strings.Builder
	ready chan struct{}
	once  sync.Once
}

func (w *readyWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if strings.Contains(w.buf.String(), "ready\n") {
		w.once.Do(func() { close(w.ready) })
	}
	return len(b), nil
}

// TestProcessKillsAfterDrainTimeout stops an instance that ignores SIGTERM
// and has a child: after the drain timeout (on the fake clock) the whole
// group is killed and Stop says so.
func TestProcessKillsAfterDrainTimeout(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	out := &readyWriter{ready: make(chan struct{})}
	p, err := NewProcess(ProcessConfig{
		Command:      []string{"sh", "-c", `trap "" TERM; sleep 300 & echo ready; wait`},
		Ports:        freePorts(t, 4),
		DrainTimeout: 5 * time.Second,
	}, ProcessOptions{Clock: clk, Output: out})
	if err != nil {
		t.Fatal(err)
	}
	insts, err := p.Start(t.Context(), testGroup, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	select {
	case <-out.ready:
	case <-ctx.Done():
		t.Fatal("instance never printed ready")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop(context.Background(), insts[0]) }()
	if err := clk.BlockUntil(ctx, 1); err != nil { // Stop's drain timer
		t.Fatal(err)
	}
	clk.Advance(5*time.Second - time.Nanosecond)
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned %v before the drain timeout", err)
	default:
	}
	if !groupAlive(t, insts[0].PID) {
		t.Fatalf("instance died from SIGTERM, which it ignores")
	}
	clk.Advance(time.Nanosecond)
	if err := <-stopped; !errors.Is(err, ErrKilled) {
		t.Fatalf("Stop = %v, want ErrKilled", err)
	}
	waitGroupGone(t, insts[0].PID)
	if strings.Count(out.buf.String(), "[us-east-b-web-1] ready\n") != 1 {
		t.Errorf("output %q, want one prefixed ready line", out.buf.String())
	}
}

// TestProcessReportsExit checks that an instance that exits by itself is
// reported once, with its status and output, and forgotten.
func TestProcessReportsExit(t *testing.T) {
	exits := make(chan Exit, 1)
	p, err := NewProcess(ProcessConfig{
		Command: []string{"sh", "-c", "echo {{.Group}} {{.Region}} {{.Zone}} {{.Index}} {{.Name}} {{.Host}} {{.Port}} {{.Address}}; exit 3"},
		Ports:   freePorts(t, 4),
	}, ProcessOptions{OnExit: func(e Exit) { exits <- e }})
	if err != nil {
		t.Fatal(err)
	}
	insts, err := p.Start(t.Context(), testGroup, 1)
	if err != nil {
		t.Fatal(err)
	}
	var e Exit
	select {
	case e = <-exits:
	case <-time.After(defaultTestTimeout):
		t.Fatal("no exit reported")
	}
	inst := insts[0]
	if e.Instance != inst {
		t.Errorf("Exit.Instance = %+v, want %+v", e.Instance, inst)
	}
	var ee *exec.ExitError
	if !errors.As(e.Err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("Exit.Err = %v, want exit status 3", e.Err)
	}
	port := strings.TrimPrefix(inst.Address, "127.0.0.1:")
	if want := "us-east-b-web us-east us-east-b 1 us-east-b-web-1 127.0.0.1 " + port + " " + inst.Address + "\n"; e.Output != want {
		t.Errorf("Exit.Output = %q, want %q", e.Output, want)
	}
	if got := p.Instances(); len(got) != 0 {
		t.Errorf("Instances after the exit = %+v, want none", got)
	}
	if err := p.Stop(t.Context(), inst); !errors.Is(err, ErrUnknown) {
		t.Errorf("Stop after the exit = %v, want ErrUnknown", err)
	}
}

// TestProcessPorts checks that ports come from the range, lowest free
// first, skipping one another program holds and those of running
// instances, and that Start stops when none is left.
func TestProcessPorts(t *testing.T) {
	r := freePorts(t, 3)
	held, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(r.First+1))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	p, err := NewProcess(ProcessConfig{Command: []string{"sleep", "300"}, Ports: r, DrainTimeout: time.Minute}, ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		if got := p.Instances(); len(got) != 0 {
			t.Errorf("Instances after Close = %+v", got)
		}
	}()
	insts, err := p.Start(t.Context(), testGroup, 3)
	if err == nil || !strings.Contains(err.Error(), "no free port") {
		t.Errorf("Start(3) error = %v, want no free port", err)
	}
	var got []string
	for _, in := range insts {
		got = append(got, in.Address)
	}
	want := []string{"127.0.0.1:" + strconv.Itoa(r.First), "127.0.0.1:" + strconv.Itoa(r.First+2)}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Start(3) started %v, want %v", got, want)
	}
	if len(insts) == 2 && (insts[0].Name != "us-east-b-web-1" || insts[1].Name != "us-east-b-web-2") {
		t.Errorf("names %q, %q; want us-east-b-web-1, us-east-b-web-2", insts[0].Name, insts[1].Name)
	}
}

func TestNewProcessErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  ProcessConfig
		want string
	}{
		{name: "no command", cfg: ProcessConfig{Ports: PortRange{1000, 1001}}, want: "command: must not be empty"},
		{name: "no ports", cfg: ProcessConfig{Command: []string{"x"}}, want: "ports: 0..0, want 1 <= first <= last <= 65535"},
		{name: "reversed ports", cfg: ProcessConfig{Command: []string{"x"}, Ports: PortRange{2000, 1000}}, want: "ports: 2000..1000"},
		{name: "bad template", cfg: ProcessConfig{Command: []string{"x", "{{.Port"}, Ports: PortRange{1000, 1001}}, want: "command[1]: template: command[1]:1: unclosed action"},
		{name: "unknown field", cfg: ProcessConfig{Command: []string{"x", "{{.Nope}}"}, Ports: PortRange{1000, 1001}}, want: "command[1]: template: command[1]:1:2: executing \"command[1]\" at <.Nope>: can't evaluate field Nope"},
		{name: "negative drain", cfg: ProcessConfig{Command: []string{"x"}, Ports: PortRange{1000, 1001}, DrainTimeout: -time.Second}, want: "drain_timeout: -1s is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewProcess(tt.cfg, ProcessOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewProcess error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestTailWriter(t *testing.T) {
	var out strings.Builder
	w := &tailWriter{prefix: "[a] ", w: &out, atStart: true}
	for _, s := range []string{"one\ntw", "o\n", "", "three"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if want := "[a] one\n[a] two\n[a] three"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
	big := strings.Repeat("x", outputTail+10)
	_, _ = w.Write([]byte(big))
	if got := w.tail(); len(got) != outputTail || got != big[10:] {
		t.Errorf("tail is %d bytes, want the last %d", len(got), outputTail)
	}
}

func TestProcessStartCanceled(t *testing.T) {
	p, err := NewProcess(ProcessConfig{Command: []string{"sleep", "300"}, Ports: freePorts(t, 2)}, ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	insts, err := p.Start(ctx, testGroup, 2)
	if !errors.Is(err, context.Canceled) || len(insts) != 0 {
		t.Errorf("Start on a canceled context = %v, %v; want no instance and context.Canceled", insts, err)
	}
	if got := p.Instances(); len(got) != 0 {
		t.Errorf("Instances = %+v, want none", got)
	}
}
