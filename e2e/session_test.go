package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/testbackend"
	"github.com/spillway-lb/spillway/internal/topology"
	"github.com/spillway-lb/spillway/lb/affinity"
)

// The session tests: session affinity, retries and outlier detection through
// real gfe, control plane and test backend processes.

const (
	sessCookie = "SPILLWAY_AFFINITY"
	sessSecret = "e2e-session-secret-0123456789abcdef"
)

// sessClient returns an HTTP/1.1 client whose connections come from the
// local address src, keeping up to conns connections alive.
func sessClient(t *testing.T, src string, conns int) *http.Client {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: conns}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// sessReply is what a test looks at in an answer.
type sessReply struct {
	status  int
	backend string // X-Spillway-Backend
	cookie  string // the affinity cookie set, "" if none
	at      time.Time
}

// sessGet sends GET url with Host host ("" to keep the URL's) and the
// affinity cookie value cookie ("" for none).
func sessGet(cl *http.Client, url, host, cookie string) (sessReply, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return sessReply{}, err
	}
	if host != "" {
		req.Host = host
	}
	if cookie != "" {
		req.Header.Set("Cookie", sessCookie+"="+cookie)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return sessReply{}, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	r := sessReply{status: resp.StatusCode, backend: resp.Header.Get(testbackend.HeaderBackend), at: time.Now()}
	for _, c := range resp.Cookies() {
		if c.Name == sessCookie {
			r.cookie = c.Value
		}
	}
	return r, nil
}

// sessMany sends n requests with sessGet from workers goroutines and returns
// the answers by backend, how many came with a new cookie, and the statuses.
func sessMany(t *testing.T, cl *http.Client, url, host, cookie string, n, workers int) (byBackend map[string]int, cookies int, statuses map[int]int) {
	t.Helper()
	var mu sync.Mutex
	byBackend, statuses = map[string]int{}, map[int]int{}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				r, err := sessGet(cl, url, host, cookie)
				mu.Lock()
				if err != nil {
					statuses[-1]++
				} else {
					statuses[r.status]++
					byBackend[r.backend]++
					if r.cookie != "" {
						cookies++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return byBackend, cookies, statuses
}

// sessAddrs maps every instance name of spec to its address.
func sessAddrs(spec topology.Spec) map[string]string {
	out := map[string]string{}
	for ri, r := range spec.Regions {
		for zi, z := range r.Zones {
			for i := 1; i <= r.Instances; i++ {
				out[fmt.Sprintf("%s-%s-%d", r.Name, z, i)] = spec.Addr(ri, zi, i)
			}
		}
	}
	return out
}

// sessWaitHealthy waits until gf sees want healthy instances in service.
func sessWaitHealthy(t *testing.T, gf *topology.GFE, service string, want int) {
	t.Helper()
	ctx := context.Background()
	err := topology.WaitFor(ctx, 15*time.Second, func() (bool, error) {
		st, err := topology.Status(ctx, gf)
		if err != nil {
			return false, err
		}
		for _, s := range st.Services {
			if s.Name != service {
				continue
			}
			n := 0
			for _, g := range s.Groups {
				n += g.Healthy
			}
			return n == want, fmt.Errorf("%s sees %d healthy instances of %s, want %d", gf.Name, n, service, want)
		}
		return false, fmt.Errorf("%s has no service %s", gf.Name, service)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sessDecisions returns gf's count of decisions of service for reason.
func sessDecisions(t *testing.T, gf *topology.GFE, service, reason string) int64 {
	t.Helper()
	st, err := topology.Status(context.Background(), gf)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Services {
		if s.Name == service {
			return s.Decisions[reason]
		}
	}
	t.Fatalf("%s has no service %s", gf.Name, service)
	return 0
}

// sessKeyring is the keyring of service web's generated cookies, derived
// from the secret as config.SessionAffinity.CookieSecret documents.
func sessKeyring(t *testing.T, secret string) *affinity.Keyring {
	t.Helper()
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("spillway affinity cookie key v1\x00web"))
	kr, err := affinity.NewKeyring(m.Sum(nil))
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// sessAffinityConfig gives service web generated-cookie affinity and adds a
// copy of it, web-ip, with client-IP affinity, routed from host ip.test.
func sessAffinityConfig(y string) string {
	i, j := strings.Index(y, "  - name: web\n"), strings.Index(y, "routes:\n")
	web := y[i:j]
	cookie := web + "    session_affinity: {type: generated_cookie, cookie_name: " + sessCookie + ", cookie_ttl: 10m, cookie_secret: " + sessSecret + "}\n"
	ip := strings.Replace(web, "name: web\n", "name: web-ip\n", 1) + "    session_affinity: {type: client_ip}\n"
	routes := "routes:\n  - {host: ip.test, path_prefix: /, service: web-ip}\n" + y[j+len("routes:\n"):]
	return y[:i] + cookie + ip + routes
}

// TestSessionAffinityEndToEnd: one gfe in front of six instances (two zones
// of three), service web with generated-cookie affinity and web-ip with
// client-IP affinity. A cookie keeps 1,000 requests on one backend; forged,
// tampered and expired cookies are ignored and replaced; the cookie's
// backend turning unhealthy moves the client once (new cookie), another
// instance turning unhealthy does not; one client address keeps 1,000
// requests on one backend while 30 others spread.
func TestSessionAffinityEndToEnd(t *testing.T) {
	spec := topology.Spec{
		Net:        41,
		Regions:    []topology.Region{{Name: "us-east", Zones: []string{"b", "c"}, Instances: 3, Rate: 5000}},
		Sites:      []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": time.Millisecond}}},
		EditConfig: sessAffinityConfig,
	}
	c := startCluster(t, spec)
	gf := c.GFEs[0]
	url := gf.URL + "/"
	addrs := sessAddrs(c.Spec)
	ctx := context.Background()
	cl := sessClient(t, "127.41.1.10", 8)

	first, err := sessGet(cl, url, "", "")
	if err != nil || first.status != 200 || first.cookie == "" || addrs[first.backend] == "" {
		t.Fatalf("first request: %+v, %v; want 200 from an instance with a %s cookie", first, err, sessCookie)
	}
	pinned, cookie := first.backend, first.cookie

	t.Run("generated cookie keeps 1,000 requests on one backend", func(t *testing.T) {
		before := sessDecisions(t, gf, "web", "affinity")
		got, cookies, statuses := sessMany(t, cl, url, "", cookie, 1000, 8)
		if got[pinned] != 1000 || len(got) != 1 || statuses[200] != 1000 || cookies != 0 {
			t.Errorf("1,000 requests with the cookie: backends %v, statuses %v, new cookies %d; want all 1,000 on %s with 200 and no new cookie", got, statuses, cookies, pinned)
		}
		if d := sessDecisions(t, gf, "web", "affinity") - before; d != 1000 {
			t.Errorf("affinity decisions grew by %d, want 1000", d)
		}
		// Without a cookie the policy spreads and every answer pins.
		got, cookies, _ = sessMany(t, sessClient(t, "127.41.1.11", 8), url, "", "", 60, 4)
		if len(got) < 4 || cookies != 60 {
			t.Errorf("60 requests without a cookie went to %v with %d cookies set, want ≥ 4 backends and 60 cookies", got, cookies)
		}
	})

	t.Run("forged, tampered and expired cookies are ignored and replaced", func(t *testing.T) {
		kr := sessKeyring(t, sessSecret)
		target := "us-east-c-2"
		if target == pinned {
			target = "us-east-c-3"
		}
		id := affinity.BackendID(addrs[target])
		// A cookie signed as documented pins its backend on the gfe.
		good := kr.Encode(affinity.Cookie{Backend: id, Expires: time.Now().Add(time.Hour)})
		if got, _, _ := sessMany(t, cl, url, "", good, 30, 2); got[target] != 30 {
			t.Fatalf("a cookie signed with the documented key for %s: backends %v, want all 30 there", target, got)
		}
		forgedKR := sessKeyring(t, "not-the-secret-0123456789abcdef-xyz")
		tampered := []byte(cookie)
		tampered[len(tampered)-2] ^= 1 // a signature byte, still valid base64url
		bad := map[string]string{
			"forged":   forgedKR.Encode(affinity.Cookie{Backend: id, Expires: time.Now().Add(time.Hour)}),
			"tampered": string(tampered),
			"expired":  kr.Encode(affinity.Cookie{Backend: id, Expires: time.Now().Add(-time.Minute)}),
		}
		for name, v := range bad {
			before := sessDecisions(t, gf, "web", "affinity")
			got, cookies, statuses := sessMany(t, cl, url, "", v, 30, 2)
			if len(got) < 2 || cookies != 30 || statuses[200] != 30 {
				t.Errorf("%s cookie: backends %v, new cookies %d, statuses %v; want the policy's spread (≥ 2 backends), 30 new cookies, 30×200", name, got, cookies, statuses)
			}
			if d := sessDecisions(t, gf, "web", "affinity") - before; d != 0 {
				t.Errorf("%s cookie: %d requests counted as affinity, want 0", name, d)
			}
		}
		// A replacement cookie pins.
		r, err := sessGet(cl, url, "", bad["forged"])
		if err != nil || r.cookie == "" {
			t.Fatalf("forged cookie: %+v, %v; want a new cookie", r, err)
		}
		if got, cookies, _ := sessMany(t, cl, url, "", r.cookie, 50, 2); got[r.backend] != 50 || cookies != 0 {
			t.Errorf("replacement cookie: backends %v, new cookies %d; want 50 on %s and none", got, cookies, r.backend)
		}
	})

	t.Run("affinity breaks only when its backend turns unhealthy", func(t *testing.T) {
		other := "us-east-b-1"
		if other == pinned {
			other = "us-east-b-2"
		}
		if err := topology.SetHealthy(ctx, false, addrs[other]); err != nil {
			t.Fatal(err)
		}
		sessWaitHealthy(t, gf, "web", 5)
		if got, cookies, _ := sessMany(t, cl, url, "", cookie, 200, 4); got[pinned] != 200 || cookies != 0 {
			t.Errorf("with %s unhealthy: backends %v, new cookies %d; want 200 on %s, none", other, got, cookies, pinned)
		}
		if err := topology.SetHealthy(ctx, true, addrs[other]); err != nil {
			t.Fatal(err)
		}
		sessWaitHealthy(t, gf, "web", 6)

		if err := topology.SetHealthy(ctx, false, addrs[pinned]); err != nil {
			t.Fatal(err)
		}
		sessWaitHealthy(t, gf, "web", 5)
		moved, err := sessGet(cl, url, "", cookie)
		if err != nil || moved.status != 200 || moved.backend == pinned || moved.cookie == "" {
			t.Fatalf("with %s unhealthy: %+v, %v; want 200 from another backend with a new cookie", pinned, moved, err)
		}
		if got, cookies, _ := sessMany(t, cl, url, "", moved.cookie, 200, 4); got[moved.backend] != 200 || cookies != 0 {
			t.Errorf("re-issued cookie: backends %v, new cookies %d; want 200 on %s, none", got, cookies, moved.backend)
		}
		if err := topology.SetHealthy(ctx, true, addrs[pinned]); err != nil {
			t.Fatal(err)
		}
		sessWaitHealthy(t, gf, "web", 6)
		if got, _, _ := sessMany(t, cl, url, "", moved.cookie, 200, 4); got[moved.backend] != 200 {
			t.Errorf("after %s is back: re-issued cookie went to %v, want 200 on %s (the client does not move back)", pinned, got, moved.backend)
		}
	})

	t.Run("client IP keeps 1,000 requests on one backend, other addresses spread", func(t *testing.T) {
		before := sessDecisions(t, gf, "web-ip", "affinity")
		got, cookies, statuses := sessMany(t, sessClient(t, "127.41.1.50", 8), url, "ip.test", "", 1000, 8)
		if len(got) != 1 || statuses[200] != 1000 || cookies != 0 {
			t.Fatalf("1,000 requests from 127.41.1.50: backends %v, statuses %v, cookies %d; want one backend, 1,000×200, no cookie", got, statuses, cookies)
		}
		if d := sessDecisions(t, gf, "web-ip", "affinity") - before; d != 1000 {
			t.Errorf("web-ip affinity decisions grew by %d, want 1000", d)
		}
		var home string
		for b := range got {
			home = b
		}
		spread := map[string]int{}
		for i := range 30 {
			src := fmt.Sprintf("127.41.1.%d", 60+i)
			got, _, _ := sessMany(t, sessClient(t, src, 2), url, "ip.test", "", 10, 2)
			if len(got) != 1 {
				t.Errorf("client %s went to %v, want one backend", src, got)
			}
			for b := range got {
				spread[b]++
			}
		}
		if len(spread) < 4 {
			t.Errorf("30 client addresses went to %v, want ≥ 4 of the 6 backends", spread)
		}

		// Its backend turns unhealthy: the address moves, and stays.
		if err := topology.SetHealthy(ctx, false, addrs[home]); err != nil {
			t.Fatal(err)
		}
		sessWaitHealthy(t, gf, "web-ip", 5)
		got, _, _ = sessMany(t, sessClient(t, "127.41.1.50", 4), url, "ip.test", "", 200, 4)
		if len(got) != 1 || got[home] != 0 {
			t.Errorf("with %s unhealthy, 127.41.1.50 went to %v; want one other backend", home, got)
		}
		if err := topology.SetHealthy(ctx, true, addrs[home]); err != nil {
			t.Fatal(err)
		}
	})
}

// sessExtra is the address and name of the instance of the retry test
// that runs in a process of its own, so that the test can kill it.
const (
	sessExtraAddr = "127.42.101.1:9099"
	sessExtraName = "us-east-b-9"
)

// TestRetriesEndToEnd: one gfe in front of two zones of two instances plus a
// fifth instance in a process of its own, every instance holding the
// requests it admits (testbackend /admin/hold). 2,000 GETs are sent at once;
// once every one of them is in flight, hundreds at the fifth instance, its
// process is killed and the others' hold lifted. None is lost: every one
// gets a 200, those at the killed instance (reset) retried on another
// backend.
func TestRetriesEndToEnd(t *testing.T) {
	const n = 2000
	spec := topology.Spec{
		Net:     42,
		Regions: []topology.Region{{Name: "us-east", Zones: []string{"b", "c"}, Instances: 2, Rate: 40000}},
		Sites:   []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": time.Millisecond}}},
		Queue:   n,
		EditConfig: func(y string) string {
			y = strings.Replace(y, "          - name: us-east-b-web\n            instances:\n",
				"          - name: us-east-b-web\n            instances:\n              - address: "+sessExtraAddr+"\n", 1)
			// The requests wait for the hold to be lifted, however long
			// a loaded machine takes to send them all.
			return strings.Replace(y, "service: web}", "service: web, timeout: 5m}", 1)
		},
	}
	extra, err := proc.Start("backend-extra", bins["testbackend"], proc.Options{},
		"--instance", "name="+sessExtraName+",addr="+sessExtraAddr+",region=us-east,zone=us-east-b",
		"--max-concurrency", "0", "--max-rps", "1000000", "--burst", "100000", "--queue", "100000",
		"--delay", "127.42.1.0/24=1ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(extra.Kill)
	{
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := proc.WaitHTTP(ctx, "http://"+sessExtraAddr+"/healthz")
		cancel()
		if err != nil {
			t.Fatalf("extra backend: %v\n%s", err, extra.Output())
		}
	}
	c := startCluster(t, spec)
	gf := c.GFEs[0]
	url := gf.URL + "/"
	instances := append(slices.Clone(c.Instances["us-east"]), sessExtraAddr)
	for _, a := range instances {
		postAdmin(t, "http://"+a+"/admin/hold?on=true")
	}

	var clients []*http.Client
	for i := range 8 {
		cl := sessClient(t, fmt.Sprintf("127.42.1.%d", 100+i), n/8)
		cl.Timeout = 5 * time.Minute
		clients = append(clients, cl)
	}
	retriesBefore := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_retries_total", "service=web")
	statuses := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			r, err := sessGet(clients[i%len(clients)], url, "", "")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				statuses[-1]++
				return
			}
			statuses[r.status]++
		})
	}
	// Kill the fifth instance once all 2,000 are held in flight.
	var total, atExtra int
	err = topology.WaitFor(context.Background(), 2*time.Minute, func() (bool, error) {
		total, atExtra = 0, 0
		for _, a := range instances {
			st, err := instanceStats(a)
			if err != nil {
				return false, err
			}
			total += st.InFlight
			if a == sessExtraAddr {
				atExtra = st.InFlight
			}
		}
		return total == n, fmt.Errorf("%d requests in flight at the instances (%d at the fifth)", total, atExtra)
	})
	if err != nil {
		t.Fatal(err)
	}
	extra.Kill()
	killedAt := time.Since(start)
	for _, a := range instances[:len(instances)-1] {
		postAdmin(t, "http://"+a+"/admin/hold?on=false")
	}
	wg.Wait()
	took := time.Since(start)
	retries := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_retries_total", "service=web") - retriesBefore
	t.Logf("%d GETs: statuses %v; killed the fifth instance at %v with %d in flight there, %d in all; %v retries; done in %v", n, statuses, killedAt, atExtra, total, retries, took)
	if statuses[200] != n {
		t.Errorf("statuses %v, want all %d 200", statuses, n)
	}
	if atExtra < n/10 {
		t.Errorf("%d requests in flight at the killed instance, want ≥ %d (it takes a fifth of them)", atExtra, n/10)
	}
	if retries < float64(atExtra) {
		t.Errorf("%v retries, want at least the %d requests in flight at the killed instance", retries, atExtra)
	}
}

// TestOutlierEjectionEndToEnd: one gfe in front of two zones of two
// instances, outlier detection with consecutive_5xx 3 and
// base_ejection_time 2 s. An instance answering 500 (still passing its
// health checks) is ejected after 3 of them — at most 3 + the other
// workers' requests in flight reach the clients — gets no traffic for 2 s,
// then gets traffic again (and, still failing, is ejected again for 4 s).
func TestOutlierEjectionEndToEnd(t *testing.T) {
	spec := topology.Spec{
		Net:     43,
		Regions: []topology.Region{{Name: "us-east", Zones: []string{"b", "c"}, Instances: 2, Rate: 20000}},
		Sites:   []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": time.Millisecond}}},
		EditConfig: func(y string) string {
			return strings.Replace(y, "routes:\n",
				"    outlier_detection: {consecutive_5xx: 3, base_ejection_time: 2s, max_ejection_time: 10s, max_ejection_percent: 50}\nroutes:\n", 1)
		},
	}
	c := startCluster(t, spec)
	gf := c.GFEs[0]
	url := gf.URL + "/"
	addrs := sessAddrs(c.Spec)
	bad := "us-east-c-1"
	postAdmin(t, "http://"+addrs[bad]+"/admin/fault?status=500")
	ejBefore := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_outlier_ejections_total", "service=web")

	const workers = 4
	var mu sync.Mutex
	var fails []time.Time // arrival of every 5xx
	var ok, other atomic.Int64
	cl := sessClient(t, "127.43.1.120", workers)
	stop := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				r, err := sessGet(cl, url, "", "")
				switch {
				case err != nil:
					other.Add(1)
				case r.status == 500 && r.backend == bad:
					mu.Lock()
					fails = append(fails, r.at)
					mu.Unlock()
				case r.status == 200:
					ok.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	slices.SortFunc(fails, func(a, b time.Time) int { return a.Compare(b) })
	// Bursts: runs of 5xx less than 1 s apart.
	var bursts [][]time.Time
	for i, f := range fails {
		if i == 0 || f.Sub(fails[i-1]) > time.Second {
			bursts = append(bursts, nil)
		}
		bursts[len(bursts)-1] = append(bursts[len(bursts)-1], f)
	}
	var sizes []int
	var gaps []time.Duration
	for i, b := range bursts {
		sizes = append(sizes, len(b))
		if i > 0 {
			gaps = append(gaps, b[0].Sub(bursts[i-1][len(bursts[i-1])-1]))
		}
	}
	st, err := instanceStats(addrs[bad])
	ejections := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_outlier_ejections_total", "service=web") - ejBefore
	t.Logf("5 s with %d workers: %d ok, %d other; 5xx bursts %v, gaps %v; instance faulted %d (%v); %v ejections", workers, ok.Load(), other.Load(), sizes, gaps, st.Faulted, err, ejections)
	// Ejected at the 3rd 5xx for 2 s, then for 4 s (its second ejection):
	// two bursts in 5 s, 2 s apart.
	if len(bursts) != 2 {
		t.Fatalf("5xx bursts %v, want 2 (ejected after 3, back after 2 s, ejected again for 4 s)", sizes)
	}
	for i, s := range sizes {
		if s < 3 || s > 3+workers-1 {
			t.Errorf("burst %d: %d 5xx reached clients, want 3 (consecutive_5xx) to %d (+ requests in flight)", i, s, 3+workers-1)
		}
	}
	if gaps[0] < 1900*time.Millisecond || gaps[0] > 3*time.Second {
		t.Errorf("the instance came back %v after its ejection, want 2 s (base_ejection_time) to 3 s", gaps[0])
	}
	if err != nil || int(st.Faulted) != len(fails) {
		t.Errorf("the instance answered %d faults (%v), clients saw %d 5xx; want equal (5xx are not retried)", st.Faulted, err, len(fails))
	}
	if other.Load() != 0 || ok.Load() < 1000 {
		t.Errorf("%d ok and %d other answers, want ≥ 1000 ok and no other", ok.Load(), other.Load())
	}
	if ejections != 2 {
		t.Errorf("%v ejections counted, want 2", ejections)
	}
}
