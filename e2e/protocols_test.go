package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/testbackend/echopb"
	"github.com/spillway-lb/spillway/internal/testkit"
	"github.com/spillway-lb/spillway/internal/topology"
)

// The listener and protocol tests: one site (nyc, one gfe) in front of one
// region (us-east, one zone of two http instances), round robin, plus
// extra listeners and backends per test.

// protoSpec is the deployment of the protocol tests on 127.net.0.0/16.
func protoSpec(net int) topology.Spec {
	return topology.Spec{
		Net:     net,
		Policy:  "round_robin",
		Regions: []topology.Region{{Name: "us-east", Zones: []string{"b"}, Instances: 2, Rate: 2000}},
		Sites:   []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": time.Millisecond}}},
		GFEArgs: []string{"--cert-check-interval", "200ms"},
	}
}

// connLog counts the connections a client transport opens and, for TLS,
// the serial of the certificate each was served.
type connLog struct {
	mu      sync.Mutex
	serials []int64
	dials   int
}

func (l *connLog) count() (int, []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dials, append([]int64(nil), l.serials...)
}

// h2Client returns an HTTP/2-only client: over TLS to sni (verified
// against ca) when ca is set, else h2c with prior knowledge.
func h2Client(l *connLog, ca *testkit.CA, sni string) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	var d net.Dialer
	if ca == nil {
		tr.Protocols.SetUnencryptedHTTP2(true)
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			l.mu.Lock()
			l.dials++
			l.mu.Unlock()
			return d.DialContext(ctx, network, addr)
		}
	} else {
		tr.Protocols.SetHTTP2(true)
		tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, &tls.Config{RootCAs: ca.Pool, ServerName: sni, NextProtos: []string{"h2"}})
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			l.mu.Lock()
			l.dials++
			l.serials = append(l.serials, tc.ConnectionState().PeerCertificates[0].SerialNumber.Int64())
			l.mu.Unlock()
			return tc, nil
		}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// getN sends n GETs to url and returns how many were 200 over HTTP/2 and
// how many each backend served.
func getN(t *testing.T, cl *http.Client, url string, n int) (ok int, byBackend map[string]int) {
	t.Helper()
	byBackend = map[string]int{}
	for range n {
		resp, err := cl.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && resp.ProtoMajor == 2 {
			ok++
		}
		byBackend[resp.Header.Get("X-Spillway-Backend")]++
	}
	return ok, byBackend
}

// startGRPCBackends runs a test backend process with n gRPC instances
// grpc-east-b-1..n at 127.net.200.1:9001.. and a process admin at :9999,
// and returns their addresses and the admin's.
func startGRPCBackends(t *testing.T, netN, n int) ([]string, string) {
	t.Helper()
	admin := fmt.Sprintf("127.%d.200.1:9999", netN)
	args := []string{"--admin", admin, "--max-concurrency", "0", "--queue", "64", "--service-time", "1ms"}
	var addrs []string
	for i := 1; i <= n; i++ {
		a := fmt.Sprintf("127.%d.200.1:%d", netN, 9000+i)
		addrs = append(addrs, a)
		args = append(args, "--instance", fmt.Sprintf("name=grpc-east-b-%d,addr=%s,region=grpc-east,zone=grpc-east-b,proto=grpc", i, a))
	}
	p, err := proc.Start("backend-grpc", bins["testbackend"], proc.Options{}, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := proc.WaitHTTP(ctx, "http://"+admin+"/admin/stats"); err != nil {
		t.Fatalf("gRPC backends: %v\n%s", err, p.Output())
	}
	return addrs, admin
}

// withGRPCService adds region grpc-east with the gRPC instances addrs, a
// service echo over them (round robin, gRPC health checks) and a route for
// the Echo service's path to it.
func withGRPCService(yaml string, addrs []string) string {
	var region strings.Builder
	region.WriteString("  - name: grpc-east\n    zones:\n      - name: grpc-east-b\n        groups:\n          - name: grpc-east-b-echo\n            instances:\n")
	for _, a := range addrs {
		fmt.Fprintf(&region, "              - address: %s\n", a)
	}
	yaml = strings.Replace(yaml, "services:\n", region.String()+"services:\n", 1)
	yaml = strings.Replace(yaml, "routes:\n", `  - name: echo
    policy: round_robin
    backends:
      - {group: grpc-east-b-echo, max_rate_per_instance: 2000}
    health_check: {protocol: grpc, interval: 500ms, timeout: 250ms, healthy_threshold: 2, unhealthy_threshold: 2, jitter: 0.1}
routes:
  - {host: "*", path_prefix: /spillway.testing.v1.Echo/, service: echo}
`, 1)
	return yaml
}

// postAdmin posts to a test backend admin URL and fails t on a non-2xx.
func postAdmin(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Post(url, "", nil)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, body)
	}
}

// TestListenerProtocols runs every HTTP listener kind through the real gfe:
// h2 over TLS with two certificates chosen by SNI and reloaded without
// dropping an open connection, h2c, gRPC passthrough (unary and a bidi
// stream, header metadata and trailers intact) and WebSocket echo; and a
// WebSocket or gRPC stream whose backend becomes unhealthy is closed while
// the others go on.
func TestListenerProtocols(t *testing.T) {
	const netN = 30
	ca := testkit.NewCA(t)
	dir := t.TempDir()
	aCrt, aKey := ca.Issue(t, dir, "a.test", 100, "a.test", "a.test")
	bCrt, bKey := ca.Issue(t, dir, "b.test", 200, "b.test", "b.test")
	grpcAddrs, grpcAdmin := startGRPCBackends(t, netN, 2)
	spec := protoSpec(netN)
	spec.EditConfig = func(y string) string {
		return withGRPCService(y, grpcAddrs) + fmt.Sprintf(`listeners:
  - name: public-https
    protocol: https
    port: 8443
    certificates:
      - {cert_file: %s, key_file: %s}
      - {cert_file: %s, key_file: %s}
  - name: public-http
    protocol: http
    port: 8081
`, aCrt, aKey, bCrt, bKey)
	}
	c := startCluster(t, spec)
	host := c.GFEs[0].SourceIP
	httpsAddr := host + ":8443"

	t.Run("https SNI and ALPN", func(t *testing.T) {
		tests := []struct {
			sni        string
			wantSerial int64
		}{{"a.test", 100}, {"b.test", 200}, {"", 100}, {"unknown.test", 100}}
		for _, tt := range tests {
			serial, alpn := testkit.Handshake(t, httpsAddr, ca, tt.sni)
			if serial != tt.wantSerial || alpn != "h2" {
				t.Errorf("SNI %q: certificate serial %d, ALPN %q; want %d, h2", tt.sni, serial, alpn, tt.wantSerial)
			}
		}
		for _, sni := range []string{"a.test", "b.test"} {
			var l connLog
			ok, by := getN(t, h2Client(&l, ca, sni), "https://"+httpsAddr+"/", 20)
			dials, serials := l.count()
			t.Logf("https %s: %d/20 h2 200s over %d connection(s), backends %v", sni, ok, dials, by)
			if ok != 20 || dials != 1 || len(by) != 2 {
				t.Errorf("https %s: %d of 20 requests 200 over h2, %d connections (serials %v), backends %v; want 20, 1, both backends", sni, ok, dials, serials, by)
			}
		}
	})

	t.Run("certificate reload keeps connections", func(t *testing.T) {
		var l connLog
		cl := h2Client(&l, ca, "a.test")
		if ok, _ := getN(t, cl, "https://"+httpsAddr+"/", 10); ok != 10 {
			t.Fatalf("%d of 10 requests before the reload", ok)
		}
		ca.Issue(t, dir, "a.test", 101, "a.test", "a.test")
		t0 := time.Now()
		err := topology.WaitFor(context.Background(), 10*time.Second, func() (bool, error) {
			serial, _ := testkit.Handshake(t, httpsAddr, ca, "a.test")
			return serial == 101, fmt.Errorf("serial %d", serial)
		})
		if err != nil {
			t.Fatalf("new certificate not served: %v", err)
		}
		took := time.Since(t0)
		ok, _ := getN(t, cl, "https://"+httpsAddr+"/", 10)
		dials, serials := l.count()
		t.Logf("new certificate served %v after the files changed; old connection: %d/10 after, %d connection(s), serials %v", took.Round(time.Millisecond), ok, dials, serials)
		if ok != 10 || dials != 1 || serials[0] != 100 {
			t.Errorf("after the reload: %d of 10 requests on the old connection, %d connections (serials %v); want 10 on 1 connection with serial 100", ok, dials, serials)
		}
		if took > 3*time.Second {
			t.Errorf("new certificate served %v after the change, want within 3s (check interval 200ms)", took)
		}
	})

	t.Run("h2c", func(t *testing.T) {
		for _, addr := range []string{host + ":8080", host + ":8081"} {
			var l connLog
			ok, by := getN(t, h2Client(&l, nil, ""), "http://"+addr+"/", 20)
			dials, _ := l.count()
			t.Logf("h2c %s: %d/20 HTTP/2 200s over %d connection(s), backends %v", addr, ok, dials, by)
			if ok != 20 || dials != 1 || by["us-east-b-1"] != 10 || by["us-east-b-2"] != 10 {
				t.Errorf("h2c %s: %d of 20 requests 200 over HTTP/2, %d connections, backends %v; want 20, 1, 10 each", addr, ok, dials, by)
			}
		}
	})

	t.Run("grpc", func(t *testing.T) {
		cc, err := grpc.NewClient("passthrough:///"+host+":8080", grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		client := echopb.NewEchoClient(cc)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()

		by := map[string]int{}
		for i := range 20 {
			var hdr, trl metadata.MD
			r, err := client.Unary(ctx, &echopb.EchoRequest{Message: fmt.Sprint(i)}, grpc.Header(&hdr), grpc.Trailer(&trl))
			if err != nil {
				t.Fatalf("Unary %d: %v", i, err)
			}
			if r.Message != fmt.Sprint(i) || first(hdr, "x-spillway-backend") != r.Instance || first(trl, "x-spillway-backend") != r.Instance || first(hdr, "x-spillway-region") != "grpc-east" {
				t.Fatalf("Unary %d = %v, header %v, trailer %v; want the message, the instance in header and trailer", i, r, hdr, trl)
			}
			by[r.Instance]++
		}
		if by["grpc-east-b-1"] != 10 || by["grpc-east-b-2"] != 10 {
			t.Errorf("unary calls by instance = %v, want 10 each", by)
		}

		// An error status and its trailer pass through.
		var trl metadata.MD
		_, err = client.Unary(ctx, &echopb.EchoRequest{StatusCode: int32(codes.NotFound), StatusMessage: "no such thing"}, grpc.Trailer(&trl))
		if st, _ := status.FromError(err); st.Code() != codes.NotFound || st.Message() != "no such thing" || first(trl, "x-spillway-backend") == "" {
			t.Errorf("Unary with status NOT_FOUND = %v, trailer %v; want NOT_FOUND \"no such thing\" with x-spillway-backend", err, trl)
		}

		// A bidi stream: 50 messages, every reply from the same instance,
		// in order; header and trailer intact.
		st, err := client.Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const n = 50
		instances := map[string]int{}
		for i := 1; i <= n; i++ {
			if err := st.Send(&echopb.EchoRequest{Message: fmt.Sprint(i)}); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
			r, err := st.Recv()
			if err != nil || r.Seq != uint64(i) || r.Message != fmt.Sprint(i) {
				t.Fatalf("reply %d = %v, %v", i, r, err)
			}
			instances[r.Instance]++
		}
		st.CloseSend()
		if _, err := st.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("end of stream: %v, want EOF", err)
		}
		hdr, _ := st.Header()
		inst := first(hdr, "x-spillway-backend")
		if len(instances) != 1 || instances[inst] != n || first(st.Trailer(), "x-spillway-backend") != inst {
			t.Errorf("stream replies by instance %v, header %v, trailer %v; want all %d from the header's instance, named in the trailer", instances, hdr, st.Trailer(), n)
		}

		// A stream whose backend turns unhealthy is ended; one on the
		// other backend goes on.
		var streams []echopb.Echo_StreamClient
		var names []string
		for range 2 {
			s, err := client.Stream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s.Send(&echopb.EchoRequest{Message: "hi"})
			r, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			streams, names = append(streams, s), append(names, r.Instance)
		}
		if names[0] == names[1] {
			t.Fatalf("both streams on %s, want one per instance", names[0])
		}
		postAdmin(t, "http://"+grpcAdmin+"/admin/health?instance="+names[0]+"&healthy=false")
		t0 := time.Now()
		_, err = streams[0].Recv()
		took := time.Since(t0)
		if err == nil || took > 5*time.Second {
			t.Errorf("stream to %s after it turned unhealthy: %v after %v, want an error within 5s", names[0], err, took)
		}
		if err := streams[1].Send(&echopb.EchoRequest{Message: "still"}); err != nil {
			t.Fatal(err)
		}
		if r, err := streams[1].Recv(); err != nil || r.Instance != names[1] {
			t.Errorf("stream to healthy %s: %v, %v; want its echo", names[1], r, err)
		}
		t.Logf("gRPC stream to %s ended %v after it turned unhealthy; the stream to %s went on", names[0], took.Round(time.Millisecond), names[1])
		postAdmin(t, "http://"+grpcAdmin+"/admin/health?instance="+names[0]+"&healthy=true")
	})

	t.Run("websocket", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		type ws struct {
			c       *websocket.Conn
			backend string
		}
		open := func() ws {
			t.Helper()
			c, _, err := websocket.Dial(ctx, "ws://"+host+":8080/ws", nil)
			if err != nil {
				t.Fatalf("WebSocket dial: %v", err)
			}
			t.Cleanup(func() { c.CloseNow() })
			_, hello, err := c.Read(ctx)
			f := strings.Fields(string(hello))
			if err != nil || len(f) != 4 || f[0] != "hello" {
				t.Fatalf("WebSocket hello = %q, %v", hello, err)
			}
			return ws{c, f[1]}
		}
		echo := func(w ws, msg string) error {
			if err := w.c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				return err
			}
			_, got, err := w.c.Read(ctx)
			if err == nil && string(got) != msg {
				err = fmt.Errorf("echo %q, want %q", got, msg)
			}
			return err
		}
		var conns []ws
		by := map[string]int{}
		for range 4 {
			w := open()
			for i := range 10 {
				if err := echo(w, fmt.Sprintf("m%d", i)); err != nil {
					t.Fatalf("echo through %s: %v", w.backend, err)
				}
			}
			conns = append(conns, w)
			by[w.backend]++
		}
		if by["us-east-b-1"] != 2 || by["us-east-b-2"] != 2 {
			t.Fatalf("WebSockets by backend = %v, want 2 each", by)
		}

		// us-east-b-1 turns unhealthy: its two WebSockets are closed (the
		// clients reconnect, to us-east-b-2), the other two go on.
		if err := topology.SetHealthy(ctx, false, c.Spec.Addr(0, 0, 1)); err != nil {
			t.Fatal(err)
		}
		defer topology.SetHealthy(context.Background(), true, c.Spec.Addr(0, 0, 1))
		t0 := time.Now()
		closedAfter := map[int]time.Duration{}
		for i, w := range conns {
			if w.backend != "us-east-b-1" {
				continue
			}
			if _, _, err := w.c.Read(ctx); err == nil {
				t.Errorf("WebSocket to the unhealthy backend got a message, want it closed")
			}
			closedAfter[i] = time.Since(t0)
		}
		alive := 0
		for _, w := range conns {
			if w.backend == "us-east-b-2" && echo(w, "still there") == nil {
				alive++
			}
		}
		again := open()
		t.Logf("WebSockets to us-east-b-1 closed %v after it turned unhealthy; %d to us-east-b-2 alive; reconnected to %s", closedAfter, alive, again.backend)
		if len(closedAfter) != 2 || alive != 2 || again.backend != "us-east-b-2" {
			t.Errorf("%d WebSockets closed, %d alive, reconnect to %s; want 2, 2, us-east-b-2", len(closedAfter), alive, again.backend)
		}
		for _, d := range closedAfter {
			if d > 5*time.Second {
				t.Errorf("WebSocket closed %v after its backend turned unhealthy, want within 5s (health checks every 500ms, 2 failures)", d)
			}
		}
	})
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// TestListenerLimits checks an http listener's limits through the real gfe:
// oversized headers get 431 and an oversized body 413, and 200 slowloris
// clients are cut off at read_header_timeout while a normal client is
// served quickly.
func TestListenerLimits(t *testing.T) {
	spec := protoSpec(31)
	spec.EditConfig = func(y string) string {
		return y + `listeners:
  - name: guarded
    protocol: http
    port: 8081
    read_header_timeout: 1s
    max_header_bytes: 4096
    max_request_body_bytes: 1024
`
	}
	c := startCluster(t, spec)
	addr := c.GFEs[0].SourceIP + ":8081"

	t.Run("header and body size", func(t *testing.T) {
		tests := []struct {
			name   string
			header int
			body   int
			want   int
		}{
			{"small", 1 << 10, 512, 200},
			{"headers over max_header_bytes", 16 << 10, 0, http.StatusRequestHeaderFieldsTooLarge},
			{"body at max_request_body_bytes", 0, 1024, 200},
			{"body over max_request_body_bytes", 0, 4096, http.StatusRequestEntityTooLarge},
		}
		for _, tt := range tests {
			req := fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\nContent-Length: %d\r\n\r\n%s", strings.Repeat("p", tt.header), tt.body, strings.Repeat("b", tt.body))
			if got := rawStatus(t, addr, req); got != tt.want {
				t.Errorf("%s: status %d, want %d", tt.name, got, tt.want)
			}
		}
	})

	t.Run("slowloris", func(t *testing.T) {
		const slow = 200
		type result struct {
			lived    time.Duration
			answered string
		}
		results := make(chan result, slow)
		var wg sync.WaitGroup
		var connected atomic.Int32
		for i := range slow {
			wg.Go(func() {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.31.1.%d", 100+i%50))}}
				t0 := time.Now()
				conn, err := d.Dial("tcp", addr)
				if err != nil {
					results <- result{answered: "dial: " + err.Error()}
					return
				}
				defer conn.Close()
				connected.Add(1)
				conn.SetDeadline(t0.Add(20 * time.Second))
				go func() { // a byte every 100ms, never finishing the headers
					for _, b := range []byte("GET / HTTP/1.1\r\nHost: x\r\nUser-Agent: slowloris\r\nX-a: " + strings.Repeat("a", 100)) {
						if _, err := conn.Write([]byte{b}); err != nil {
							return
						}
						time.Sleep(100 * time.Millisecond) // the slow client's pace
					}
				}()
				got, _ := io.ReadAll(conn)
				results <- result{lived: time.Since(t0), answered: string(got)}
			})
		}
		// A normal client at 50 req/s on the same listener meanwhile.
		res, err := loadgen.Run(context.Background(), loadgen.Config{URL: "http://" + addr + "/", Rate: 50, Duration: 2 * time.Second, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(results)
		var minLived, maxLived time.Duration = time.Hour, 0
		closed, with400 := 0, 0
		for r := range results {
			switch {
			case r.answered == "":
				closed++
			case strings.HasPrefix(r.answered, "HTTP/1.1 400 "):
				closed++
				with400++
			default:
				t.Errorf("slow client got %q, want the connection closed, at most with a 400", r.answered)
				continue
			}
			minLived, maxLived = min(minLived, r.lived), max(maxLived, r.lived)
		}
		p99 := res.Percentile(99)
		t.Logf("%d of %d slow connections closed after %v..%v (%d answered 400); normal client: %d/%d OK, p99 %v",
			closed, slow, minLived.Round(time.Millisecond), maxLived.Round(time.Millisecond), with400, res.OK, res.Sent, p99)
		if closed != slow || minLived < time.Second || maxLived > 2500*time.Millisecond {
			t.Errorf("%d of %d slow connections closed after %v..%v, want all after read_header_timeout (1s) and before 2.5s", closed, slow, minLived, maxLived)
		}
		if res.OK != res.Sent || res.Sent < 90 || p99 > 200*time.Millisecond {
			t.Errorf("normal client during slowloris: %d of %d OK, p99 %v; want all of ≥ 90 OK, p99 < 200ms", res.OK, res.Sent, p99)
		}
	})
}

// rawStatus writes req on a new connection to addr and returns the status
// of the answer (0 for none).
func rawStatus(t *testing.T, addr, req string) int {
	t.Helper()
	code, _ := rawExchange(t, addr, req, false)
	return code
}

// rawExchange writes req on a new connection to addr and returns the
// answer's status, and its body when body is set (0 and nil when no
// answer came).
func rawExchange(t *testing.T, addr, req string, body bool) (int, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	go io.WriteString(conn, req) // the gfe may answer before reading it all
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	if !body {
		return resp.StatusCode, nil
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestSIGTERMDrain sends SIGTERM to a gfe with requests in flight: they all
// complete with 200, new connections are refused on every listener, and
// the gfe exits 0.
func TestSIGTERMDrain(t *testing.T) {
	spec := protoSpec(32)
	spec.ServiceTime = time.Second // every request holds its backend for 1s
	spec.GFEArgs = append(spec.GFEArgs, "--drain-timeout", "10s")
	spec.EditConfig = func(y string) string {
		return y + "listeners:\n  - {name: extra, protocol: http, port: 8081}\n"
	}
	c := startCluster(t, spec)
	gf := c.GFEs[0]
	listeners := []string{gf.SourceIP + ":8080", gf.SourceIP + ":8081"}

	const inflight = 40
	type answer struct {
		code int
		err  error
		at   time.Time
	}
	answers := make(chan answer, inflight)
	for i := range inflight {
		go func() {
			// Each request on its own connection, half on each listener.
			cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 15 * time.Second}
			resp, err := cl.Get("http://" + listeners[i%2] + "/")
			if err != nil {
				answers <- answer{err: err, at: time.Now()}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers <- answer{code: resp.StatusCode, at: time.Now()}
		}()
	}
	// Wait until every request holds a backend slot.
	err := topology.WaitFor(context.Background(), 10*time.Second, func() (bool, error) {
		n, err := regionInFlight(c, "us-east")
		if err != nil {
			return false, err
		}
		return n == inflight, fmt.Errorf("%d in flight", n)
	})
	if err != nil {
		t.Fatal(err)
	}

	sig := time.Now()
	if err := gf.Proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused on every listener from (nearly) the
	// moment of the signal on.
	refusedAt := map[string]time.Duration{}
	accepted := 0
	for _, l := range listeners {
		for time.Since(sig) < 5*time.Second {
			conn, err := net.DialTimeout("tcp", l, time.Second)
			if err == nil {
				conn.Close()
				accepted++
				continue
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				refusedAt[l] = time.Since(sig)
				break
			}
			if errors.Is(err, syscall.ECONNRESET) {
				// The listener closed while this connection waited in its
				// accept queue, so the kernel reset it: never served, and
				// the next dial finds the port closed.
				continue
			}
			t.Fatalf("dial %s during the drain: %v", l, err)
		}
	}
	acceptedAfter := 0
	for range 20 {
		for _, l := range listeners {
			if conn, err := net.Dial("tcp", l); err == nil {
				conn.Close()
				acceptedAfter++
			}
		}
	}

	ok := 0
	var last time.Time
	for range inflight {
		a := <-answers
		if a.err == nil && a.code == 200 {
			ok++
		} else {
			t.Logf("in-flight request: %d %v", a.code, a.err)
		}
		if a.at.After(last) {
			last = a.at
		}
	}
	select {
	case <-gf.Proc.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("gfe still running 15s after SIGTERM")
	}
	exited := time.Since(sig)
	exitErr := gf.Proc.Err()
	t.Logf("SIGTERM: %d/%d in-flight requests 200 (last %v after the signal); refused after %v (%d dials accepted before that, %d after); exit %v after %v",
		ok, inflight, last.Sub(sig).Round(time.Millisecond), refusedAt, accepted, acceptedAfter, exitErr, exited.Round(time.Millisecond))
	if ok != inflight {
		t.Errorf("%d of %d in-flight requests completed with 200, want all", ok, inflight)
	}
	if len(refusedAt) != len(listeners) || acceptedAfter != 0 {
		t.Errorf("refused after %v on %d of %d listeners, %d connections accepted afterwards; want every listener refusing, none accepted", refusedAt, len(refusedAt), len(listeners), acceptedAfter)
	}
	for l, d := range refusedAt {
		if d > time.Second {
			t.Errorf("%s refused new connections only %v after SIGTERM, want within 1s", l, d)
		}
	}
	if exitErr != nil {
		t.Errorf("gfe exit: %v, want exit status 0", exitErr)
	}
	if exited > 5*time.Second {
		t.Errorf("gfe exited %v after SIGTERM, want within 5s (requests take 1s)", exited)
	}
}
