package e2e

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/spillway-lb/spillway/internal/autoscale/controller"
)

// pendingSecurityNet is the /16 of TestResetStreamsDoNotScaleFromZero.
const pendingSecurityNet = 85

// resetFlood opens an h2c connection to the gfe at addr, opens streams
// requests (GET path), resets each resetAfter later, and closes the
// connection: the attack of the second security review on the pending
// queue, under the gfe's reset budgets: at most 100 resets a connection,
// and from source address src, so that connections from distinct
// addresses also stay under the per-address budget (200).
func resetFlood(t *testing.T, src netip.Addr, addr, path string, streams int, resetAfter time.Duration) {
	t.Helper()
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go io.Copy(io.Discard, c) // the gfe's SETTINGS and acks: read, never answered
	var out bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	io.WriteString(&out, http2.ClientPreface)
	fr.WriteSettings()
	fr.WriteSettingsAck()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", path}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for i := range streams {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
	}
	if _, err := c.Write(out.Bytes()); err != nil {
		t.Fatalf("HEADERS: %v", err)
	}
	out.Reset()
	time.Sleep(resetAfter) // the attack's pacing: the resets follow the requests this much later
	for i := range streams {
		fr.WriteRSTStream(uint32(2*i+1), http2.ErrCodeCancel)
	}
	if _, err := c.Write(out.Bytes()); err != nil {
		t.Fatalf("RST_STREAM: %v", err)
	}
}

// TestResetStreamsDoNotScaleFromZero replays the attack of the second
// security review end to end: an autoscaled group at zero behind a real
// gfe and control plane; for 5 s a client opens 50 h2c streams per
// connection, 10 connections a second, and resets each stream 10 ms after
// opening it (under the reset budgets: each connection from a source
// address of its own, 127.85.250.N). They wait in the gfe's pending
// queue (at least half of them get there before their reset) and are
// canceled there; none asks for capacity
// (spillway_gfe_capacity_requests_total stays 0), and the group stays at
// zero instances. (Before the fix the same flood took the group from 0 to
// 3 instances.) One real request afterwards still scales it from zero.
func TestResetStreamsDoNotScaleFromZero(t *testing.T) {
	c := startCluster(t, autoscaleSpec(pendingSecurityNet))
	gf := c.GFEs[0]
	const group = "us-east-b-web"
	waitAutoscaler(t, c, group, "the group run at zero", 30*time.Second, func(s controller.GroupStatus) bool { return s.Acting })
	addr := strings.TrimPrefix(gf.URL, "http://")

	const streams = 50
	end := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond) // ten connections a second
	defer tick.Stop()
	conns := 0
	for time.Now().Before(end) {
		<-tick.C
		src := netip.AddrFrom4([4]byte{127, pendingSecurityNet, 250, byte(1 + conns%250)})
		resetFlood(t, src, addr, "/flood", streams, 10*time.Millisecond)
		conns++
	}
	canceled := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_pending_wait_seconds", "service=web", "result=canceled")
	asked := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_capacity_requests_total")
	closes := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_http2_reset_budget_closes_total") +
		metricValue(t, gf.Admin+"/metrics", "spillway_gfe_http2_client_reset_budget_closes_total")
	st := autoscalerStatus(t, c, group)
	t.Logf("%d connections × %d streams reset after 10ms: %v waits canceled, %v capacity requests, %v budget closes; group: %d instances, recommended %d",
		conns, streams, canceled, asked, closes, len(st.Instances), st.Recommended)
	if canceled < float64(conns*streams)/2 {
		t.Errorf("%v of %d reset streams waited in the pending queue, want at least half: the flood did not reach the queue", canceled, conns*streams)
	}
	if asked != 0 {
		t.Errorf("spillway_gfe_capacity_requests_total = %v after the flood, want 0", asked)
	}
	if len(st.Instances) != 0 || st.Recommended != 0 {
		t.Errorf("after the flood the group runs %d instances (recommended %d), want 0", len(st.Instances), st.Recommended)
	}
	if closes != 0 {
		t.Errorf("%v connections closed by the reset budget, want 0: the flood stays under it", closes)
	}

	// A request that waits asks, and is served after the cold start.
	start := time.Now()
	resp, err := http.Get(gf.URL + "/real")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a real request after the flood: %d after %v, want 200", resp.StatusCode, time.Since(start))
	}
	if got := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_capacity_requests_total", "result=granted"); got < 1 {
		t.Errorf("granted capacity requests after a real request = %v, want at least 1", got)
	}
	t.Logf("a real request from zero served after %v", time.Since(start).Round(10*time.Millisecond))
}
