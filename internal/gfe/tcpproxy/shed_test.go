package tcpproxy

import (
	"bufio"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/lb/routing"
)

// TestShedGlobalOverload: a CONNECTION-mode service with overload.shed
// whose global demand is 1.2 times its capacity (another gfe of the site
// gossips it) has 1/6 of its new connections closed at once, before any
// backend is picked or dialled, counted in the shed counter and in
// spillway_gfe_tcp_connections_total{result="shed"}; the others are
// proxied.
func TestShedGlobalOverload(t *testing.T) {
	gfetest.CheckLeaks(t)
	e1 := gfetest.NewEchoBackend(t, "e1")
	cfg := gfetest.TCPConfig(t, "waterfall", gfetest.Instances(e1.Addr()), nil, 0)
	cfg.Services[0].Overload.Shed = true // a fresh parse of the test's own
	shed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shed"}, []string{"service", "reason"})
	h := startTCPWith(t, cfg, func(x *Proxy) { x.shed = shed })
	const capacity = 100 * 0.95 // max_connections_per_instance 100, target_utilization 0.95
	h.p.SetPeer(routing.Peer{Node: "gfe-nyc-2", Site: "nyc", RTT: map[string]float64{"us-east": 5}, Demand: map[string]float64{"db": 1.2 * capacity}})
	h.p.Step()
	if got := h.p.Table().Services["db"].Shed().Fraction(); math.Abs(got-1.0/6) > 0.01 {
		t.Fatalf("shed fraction %v, want 1/6", got)
	}
	const n = 240
	refused := 0
	for range n {
		c, err := net.Dial("tcp", h.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(gfetest.TCPTestTimeout))
		line, err := bufio.NewReader(c).ReadString('\n')
		switch {
		case err == nil && strings.HasPrefix(line, "hello e1"):
		case err != nil && line == "":
			refused++ // closed before any byte: shed
		default:
			t.Fatalf("read %q, %v", line, err)
		}
	}
	// Binomial at n = 240 and p = 1/6: 4σ = 0.096.
	if share := float64(refused) / n; math.Abs(share-1.0/6) > 0.096 {
		t.Errorf("refused %d of %d connections (%.3f), want 1/6 ± 0.096", refused, n, share)
	}
	if got := metricValue(shed.WithLabelValues("db", "overload")); got != float64(refused) {
		t.Errorf("shed{reason=overload} = %v, want %d", got, refused)
	}
	if got := h.counter("accepted", "db", "shed"); got != float64(refused) {
		t.Errorf("accepted{result=shed} = %v, want %d", got, refused)
	}
	waitFor(t, "the admitted connections at the backend", func() bool { return e1.Open.Load() == int64(n-refused) })
	if got := h.backendErrors; metricValue(got) != 0 {
		t.Errorf("backend errors %v, want 0: a shed connection is not the backend's", metricValue(got))
	}
}
