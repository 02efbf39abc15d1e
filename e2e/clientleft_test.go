package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/topology"
)

// TestClientLeavesMidRequest: a client that closes its connection while
// its request holds a backend gets the backend freed, long before the
// backend would have answered, and counts as a canceled client, not a
// backend failure. On the fast path (the default) the listener's sweep
// notices within about 1.5 s; on net/http alone (SPILLWAY_E2E_FAST_PATH=0)
// its background read notices at once.
func TestClientLeavesMidRequest(t *testing.T) {
	spec := protoSpec(34)
	spec.ServiceTime = 20 * time.Second // the backend would answer after 20 s
	c := startCluster(t, spec)
	gf := c.GFEs[0]

	conn, err := net.Dial("tcp", gf.SourceIP+":8080")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET /slow HTTP/1.1\r\nHost: web\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	err = topology.WaitFor(context.Background(), 10*time.Second, func() (bool, error) {
		n, err := regionInFlight(c, "us-east")
		return n == 1, fmt.Errorf("%d in flight (%v)", n, err)
	})
	if err != nil {
		t.Fatalf("the request never reached a backend: %v", err)
	}
	left := time.Now()
	conn.Close()
	err = topology.WaitFor(context.Background(), 10*time.Second, func() (bool, error) {
		n, err := regionInFlight(c, "us-east")
		return n == 0, fmt.Errorf("%d in flight (%v)", n, err)
	})
	if err != nil {
		t.Fatalf("backend still held after the client left: %v", err)
	}
	freed := time.Since(left)
	t.Logf("backend freed %v after the client left", freed)
	if freed > 5*time.Second {
		t.Errorf("backend freed %v after the client left, want within 5 s (the sweep's 0.5–1.5 s and scheduling)", freed)
	}
	metrics := gf.Admin + "/metrics"
	// The gfe counts it once the freed backend connection's error is back.
	err = topology.WaitFor(context.Background(), 5*time.Second, func() (bool, error) {
		v := metricValue(t, metrics, "spillway_gfe_client_errors_total", "reason=canceled")
		return v == 1, fmt.Errorf("canceled clients %v, want 1", v)
	})
	if err != nil {
		t.Error(err)
	}
	if v := metricValue(t, metrics, "spillway_gfe_backend_errors_total"); v != 0 {
		t.Errorf("backend errors %v, want 0", v)
	}
}
