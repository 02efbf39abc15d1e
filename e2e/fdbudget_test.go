package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/proc"
)

// The fd budget deployment (the first security review, finding 4:
// SECURITY.md): one gfe at 127.77.0.1 started with a file limit of fdLimit,
// serving from a local config an http service and a tcp service whose
// backends are the test's own loopback servers.
const (
	fdHost  = "127.77.0.1"
	fdLimit = 256
	// fdFlood is how many connections the test opens to each of the tcp
	// and the http listener: together they need about 4 × fdFlood
	// descriptors in the gfe, several times fdLimit.
	fdFlood = 300
)

// freeTCPPort returns a port free on host a moment ago.
func freeTCPPort(t *testing.T, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestFDFloodKeepsAdmin (the first security review, finding 4): with a low
// RLIMIT_NOFILE, one client flooding the gfe's tcp and http listeners with
// idle connections gets the ones beyond the fd budget refused (tcp, counted
// in spillway_gfe_tcp_refused_total{reason="fd_budget"}) or left waiting in
// the backlog (http), and the admin listener still answers /status. Before
// the fix the gfe ran out of descriptors and the admin listener failed with
// EMFILE.
func TestFDFloodKeepsAdmin(t *testing.T) {
	// Backends: a tcp echo server and an http server, in this process.
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	accepting := make(chan struct{})
	defer func() {
		// Stop accepting before waiting: held.Go must not race held.Wait.
		echo.Close()
		<-accepting
		held.Wait()
	}()
	go func() {
		defer close(accepting)
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			held.Go(func() { io.Copy(c, c); c.Close() })
		}
	}()
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), ReadHeaderTimeout: 5 * time.Second}
	webLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go web.Serve(webLn)
	defer web.Close()

	listen, tcpPort, admin := freeTCPPort(t, fdHost), freeTCPPort(t, fdHost), freeTCPPort(t, fdHost)
	gossipPort := freeTCPPort(t, "127.0.0.1")
	cfg := fmt.Sprintf(`regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - {name: web, instances: [{address: "%s"}]}
          - {name: db, instances: [{address: "%s"}]}
services:
  - name: web
    backends: [{group: web, max_rate_per_instance: 1000}]
  - name: db
    balancing_mode: CONNECTION
    backends: [{group: db, max_connections_per_instance: 100000}]
    health_check: {protocol: tcp}
routes:
  - service: web
listeners:
  - {name: db, protocol: tcp, port: %d, service: db}
`, webLn.Addr(), echo.Addr(), tcpPort)
	path := filepath.Join(t.TempDir(), "fd.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// The shell lowers both the soft and the hard limit, then becomes the
	// gfe.
	script := fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, fdLimit)
	p, err := proc.Start("gfe-fd", "/bin/sh", proc.Options{}, "-c", script, bins["gfe"],
		"--site", "nyc", "--node", "gfe-fd", "--config", path,
		"--listen", fmt.Sprintf("%s:%d", fdHost, listen), "--admin", fmt.Sprintf("%s:%d", fdHost, admin),
		"--gossip-addr", fmt.Sprintf("127.0.0.1:%d", gossipPort), "--log-format", "json")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("--- gfe log (tail):\n%s", tail(p.Output(), 4000))
		}
	})
	adminURL := fmt.Sprintf("http://%s:%d", fdHost, admin)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := proc.WaitHTTP(ctx, adminURL+"/status"); err != nil {
		t.Fatalf("gfe admin: %v", err)
	}
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", p.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`Max open files\s+(\d+)\s+(\d+)`).FindSubmatch(limits); m == nil || string(m[1]) != strconv.Itoa(fdLimit) || string(m[2]) != strconv.Itoa(fdLimit) {
		t.Fatalf("the gfe's file limits are not %d:\n%s", fdLimit, limits)
	}

	// The flood: idle connections to both listeners, all held open.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, port := range []int{tcpPort, listen} {
		for range fdFlood {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", fdHost, port), 5*time.Second)
			if err != nil {
				continue // the backlog is full: refused by the kernel
			}
			conns = append(conns, c)
		}
	}

	// The admin listener answers, again and again, while the flood holds.
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(url string) (string, error) {
		resp, err := client.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("status %d", resp.StatusCode)
		}
		return string(b), err
	}
	for i := range 5 {
		if _, err := get(adminURL + "/status"); err != nil {
			t.Fatalf("admin /status during the flood (try %d): %v", i, err)
		}
	}
	metrics, err := get(adminURL + "/metrics")
	if err != nil {
		t.Fatalf("admin /metrics during the flood: %v", err)
	}
	m := parseMetrics(t, strings.NewReader(metrics))
	refused := m.value("spillway_gfe_tcp_refused_total", "listener=db", "reason=fd_budget")
	waits := m.value("spillway_gfe_listener_fd_budget_waits_total", "listener=listen")
	used, budget := m.value("spillway_gfe_fd_budget_used"), m.value("spillway_gfe_fd_budget")
	t.Logf("fd budget %v, used %v; tcp refused for the budget %v; http accept waits %v", budget, used, refused, waits)
	if budget <= 0 || budget >= fdLimit {
		t.Errorf("spillway_gfe_fd_budget = %v, want in (0, %d)", budget, fdLimit)
	}
	if refused < fdFlood/2 {
		t.Errorf("tcp connections refused for the fd budget = %v, want at least %d", refused, fdFlood/2)
	}
	if waits < 1 {
		t.Errorf("http listener fd budget waits = %v, want at least 1", waits)
	}
	if strings.Contains(p.Output(), "too many open files") {
		t.Errorf("the gfe ran out of file descriptors:\n%s", tail(p.Output(), 2000))
	}
}
