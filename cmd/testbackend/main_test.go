package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway-lb/spillway/internal/testbackend"
	"github.com/spillway-lb/spillway/internal/testbackend/echopb"
	"github.com/spillway-lb/spillway/internal/version"
	"github.com/spillway-lb/spillway/lb/loadreport"
)

const defaultTestTimeout = 60 * time.Second

func TestRunCommandLine(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
		wantStdout string
	}{
		{name: "help", args: []string{"-h"}, wantCode: 0, wantStderr: "usage: testbackend"},
		{name: "version", args: []string{"--version"}, wantCode: 0, wantStdout: "testbackend " + version.Get().String() + "\n"},
		{name: "no instance", args: nil, wantCode: 2, wantStderr: "testbackend: instances: at least one instance is required"},
		{name: "bad flag", args: []string{"--nope"}, wantCode: 2, wantStderr: "flag provided but not defined: -nope"},
		{name: "bad antagonist", args: []string{"--instance", "name=a,addr=127.0.0.1:0,region=r,zone=z", "--antagonist", "period=20s,slowdown=0.5x"}, wantCode: 2, wantStderr: `invalid value "period=20s,slowdown=0.5x" for flag -antagonist: antagonist "period=20s,slowdown=0.5x": slowdown: must be in [1, 1e6], got 0.5`},
		{name: "bad address", args: []string{"--instance", "name=a,addr=256.0.0.1:1,region=r,zone=z"}, wantCode: 1, wantStderr: `"message":"start failed"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			if got := run(tt.args, &stdout, &stderr); got != tt.wantCode || !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("run(%q) = %d with stderr %q, want %d with %q", tt.args, got, stderr.String(), tt.wantCode, tt.wantStderr)
			}
			if stdout.String() != tt.wantStdout {
				t.Errorf("run(%q) stdout = %q, want %q", tt.args, stdout.String(), tt.wantStdout)
			}
		})
	}
}

// TestBinary builds the real binary, runs two instances on free ports, hits
// them over HTTP and stops the process with SIGTERM.
func TestBinary(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "testbackend")
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command: %v", err)
	}
	if out, err := exec.CommandContext(ctx, gocmd, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	cmd := exec.CommandContext(ctx, bin,
		"--instance", "name=us-east-b-1,addr=127.0.0.1:0,region=us-east,zone=us-east-b",
		"--instance", "name=eu-west-b-1,addr=127.0.0.1:0,region=eu-west,zone=eu-west-b,max_concurrency=1,load_reports=true",
		"--load-reports=false",
		"--delay", "eu-west:127.0.1.0/24=30ms")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	defer func() {
		_ = cmd.Process.Kill() // no-op when it already exited
		for range lines {      // drain until the pipe closes
		}
		_ = cmd.Wait()
	}()

	// The process logs one "listening" line per instance, with the port
	// the system chose.
	addrs := map[string]string{}
	var logged []string
	for len(addrs) < 2 {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("process exited before listening; stderr:\n%s", strings.Join(logged, "\n"))
			}
			logged = append(logged, line)
			var ev struct{ Message, Instance, Addr string }
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("log line %q is not JSON: %v", line, err)
			}
			if ev.Message == "listening" {
				addrs[ev.Instance] = ev.Addr
			}
		case <-ctx.Done():
			t.Fatalf("no listening lines: %v; stderr:\n%s", ctx.Err(), strings.Join(logged, "\n"))
		}
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: defaultTestTimeout}
	for name, addr := range addrs {
		resp, err := client.Get("http://" + addr + "/hello")
		if err != nil {
			t.Fatalf("GET %s/hello: %v", name, err)
		}
		var reply testbackend.Reply
		err = json.NewDecoder(resp.Body).Decode(&reply)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || reply.Instance != name || resp.Header.Get(testbackend.HeaderBackend) != name {
			t.Errorf("GET %s/hello = %d %+v (%v), header %q; want 200 from %s", name, resp.StatusCode, reply, err, resp.Header.Get(testbackend.HeaderBackend), name)
		}
		// --load-reports=false turns reports off but for eu-west-b-1,
		// whose load_reports=true overrides it. Its one request has left
		// its slot: idle, with one arrival in the last second. The
		// process's CPU cores and the instance's concurrency follow,
		// measured on the real clock (internal/testbackend checks their
		// values on a fake one).
		wantLoad := map[string]string{
			"us-east-b-1": "",
			"eu-west-b-1": "TEXT application_utilization=0, cpu_utilization=0, rps_fractional=1, named_metrics.queue=0",
		}[name]
		got := resp.Header.Get(loadreport.Header)
		if wantLoad == "" && got != "" ||
			wantLoad != "" && !regexp.MustCompile(`^`+regexp.QuoteMeta(wantLoad)+`, named_metrics\.cpu_cores=[0-9.e+-]+, named_metrics\.concurrency=[0-9.e+-]+$`).MatchString(got) {
			t.Errorf("GET %s/hello: %s %q, want %q then the named metrics cpu_cores and concurrency", name, loadreport.Header, got, wantLoad)
		}
	}
	resp, err := client.Post("http://"+addrs["eu-west-b-1"]+"/admin/health?healthy=false", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = client.Get("http://" + addrs["eu-west-b-1"] + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(loadreport.Header) != "" {
		t.Errorf("GET /healthz after POST /admin/health?healthy=false = %d with %s %q, want 503 without a load report",
			resp.StatusCode, loadreport.Header, resp.Header.Get(loadreport.Header))
	}
	resp, err = client.Get("http://" + addrs["eu-west-b-1"] + "/admin/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st testbackend.Stats
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Served != 1 || st.Probes != 1 || st.Healthy || st.BySource["127.0.0.0/24"].Served != 1 {
		t.Errorf("stats = %+v (%v), want served 1, probes 1, unhealthy, 1 from 127.0.0.0/24", st, err)
	}

	// The eu-west instance delays callers from 127.0.1.0/24 by 30ms.
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, 9)}}
	farTr := &http.Transport{DialContext: dialer.DialContext}
	defer farTr.CloseIdleConnections()
	start := time.Now()
	resp, err = (&http.Client{Transport: farTr, Timeout: defaultTestTimeout}).Get("http://" + addrs["eu-west-b-1"] + "/rtt")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if took := time.Since(start); resp.StatusCode != http.StatusNoContent || took < 30*time.Millisecond {
		t.Errorf("GET /rtt from 127.0.1.9 = %d after %v, want 204 after >= 30ms", resp.StatusCode, took)
	}

	tr.CloseIdleConnections()
	farTr.CloseIdleConnections()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var stopped bool
	for line := range lines {
		stopped = stopped || strings.Contains(line, `"message":"stopped"`)
	}
	err = cmd.Wait()
	if err != nil || !stopped {
		t.Errorf("after SIGTERM: exit %v, logged stopped %v; want exit 0 and a stopped line", err, stopped)
	}
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("exit code %v, want 0", cmd.ProcessState)
	}
}

// TestBinaryProtocols runs the real binary with an h2, a grpc and a tcp
// instance and the process admin, and checks each protocol and the admin
// health toggle end to end.
func TestBinaryProtocols(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "testbackend")
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command: %v", err)
	}
	if out, err := exec.CommandContext(ctx, gocmd, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, "--admin", "127.0.0.1:0",
		"--instance", "name=tls-1,addr=127.0.0.1:0,region=us-east,zone=us-east-b,proto=h2",
		"--instance", "name=grpc-1,addr=127.0.0.1:0,region=us-east,zone=us-east-b,proto=grpc",
		"--instance", "name=tcp-1,addr=127.0.0.1:0,region=us-east,zone=us-east-b,proto=tcp")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	defer func() {
		_ = cmd.Process.Kill()
		for range lines {
		}
		_ = cmd.Wait()
	}()

	addrs := map[string]string{} // instance name or "admin" -> address
	protos := map[string]string{}
	var logged []string
	for len(addrs) < 4 {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("process exited before listening; stderr:\n%s", strings.Join(logged, "\n"))
			}
			logged = append(logged, line)
			var ev struct{ Message, Instance, Addr, Proto string }
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("log line %q is not JSON: %v", line, err)
			}
			switch ev.Message {
			case "listening":
				addrs[ev.Instance], protos[ev.Instance] = ev.Addr, ev.Proto
			case "admin listening":
				addrs["admin"] = ev.Addr
			}
		case <-ctx.Done():
			t.Fatalf("no listening lines: %v; stderr:\n%s", ctx.Err(), strings.Join(logged, "\n"))
		}
	}
	if want := map[string]string{"tls-1": "h2", "grpc-1": "grpc", "tcp-1": "tcp"}; !maps.Equal(protos, want) {
		t.Errorf("logged protocols %v, want %v", protos, want)
	}

	// h2: ALPN picks h2 (the self-signed certificate is not checked here).
	h2 := new(http.Protocols)
	h2.SetHTTP2(true)
	tlsTr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Protocols: h2}
	defer tlsTr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tlsTr, Timeout: defaultTestTimeout}).Get("https://" + addrs["tls-1"] + "/x")
	if err != nil {
		t.Fatalf("GET https://tls-1/x: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS.NegotiatedProtocol != "h2" || resp.Header.Get(testbackend.HeaderBackend) != "tls-1" {
		t.Errorf("GET https://tls-1/x = %d, ALPN %q, backend %q; want 200, h2, tls-1", resp.StatusCode, resp.TLS.NegotiatedProtocol, resp.Header.Get(testbackend.HeaderBackend))
	}

	// grpc: health follows the admin toggle; Echo answers.
	cc, err := grpc.NewClient("passthrough:///"+addrs["grpc-1"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthgrpc.NewHealthClient(cc)
	admin := &http.Client{Timeout: defaultTestTimeout}
	for _, healthy := range []bool{false, true} {
		resp, err := admin.Post(fmt.Sprintf("http://%s/admin/health?instance=grpc-1&healthy=%v", addrs["admin"], healthy), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := healthgrpc.HealthCheckResponse_SERVING
		if !healthy {
			want = healthgrpc.HealthCheckResponse_NOT_SERVING
		}
		if got, err := hc.Check(ctx, &healthgrpc.HealthCheckRequest{}); resp.StatusCode != http.StatusOK || err != nil || got.GetStatus() != want {
			t.Errorf("after POST /admin/health healthy=%v (%d): Check = %v, %v; want %v", healthy, resp.StatusCode, got.GetStatus(), err, want)
		}
	}
	if got, err := echopb.NewEchoClient(cc).Unary(ctx, &echopb.EchoRequest{Message: "m"}); err != nil || got.GetInstance() != "grpc-1" {
		t.Errorf("Echo.Unary = %v, %v; want a reply from grpc-1", got, err)
	}

	// tcp: hello and echo.
	conn, err := net.Dial("tcp", addrs["tcp-1"])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(defaultTestTimeout))
	r := bufio.NewReader(conn)
	hello, err := r.ReadString('\n')
	if err != nil || hello != "hello tcp-1 us-east us-east-b\n" {
		t.Errorf("tcp hello = %q, %v", hello, err)
	}
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	echo := make([]byte, 4)
	if _, err := io.ReadFull(r, echo); err != nil || string(echo) != "ping" {
		t.Errorf("tcp echo = %q, %v", echo, err)
	}

	resp, err = admin.Get("http://" + addrs["admin"] + "/admin/stats?instance=tcp-1")
	if err != nil {
		t.Fatal(err)
	}
	var st testbackend.Stats
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.OpenConns != 1 || st.Streams != 1 || st.Messages != 1 {
		t.Errorf("tcp-1 stats = %+v (%v), want 1 open connection, 1 stream, 1 message", st, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v, want exit 0", err)
	}
}
