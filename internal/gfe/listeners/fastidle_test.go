package listeners

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/httpproxy"
)

// currentFast returns the fast path of m's current "web" generation (nil:
// none).
func currentFast(m *Manager) *fastServer {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.ports {
		if g := p.cur.Load(); g != nil && g.fast != nil && g.spec.Name == "web" {
			return g.fast
		}
	}
	return nil
}

// conns returns how many connections fs serves (parked ones included).
func (fs *fastServer) connCount() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.conns)
}

// idleClients dials n connections to addr and makes one request on each,
// which the fast path answers; they then idle, kept alive.
func idleClients(t *testing.T, addr string, n int) ([]net.Conn, []*bufio.Reader) {
	t.Helper()
	cs, brs := make([]net.Conn, n), make([]*bufio.Reader, n)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[i], brs[i] = c, bufio.NewReader(c)
		if _, body := roundTrip(t, c, brs[i], "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"); body != "fast" {
			t.Fatalf("body %q, want fast", body)
		}
	}
	return cs, brs
}

// TestFastPathIdleHoldsNoGoroutine: 200 idle keep-alive connections on
// the fast path hold no goroutine of the gfe's (they are parked in the
// poller: fewer than 20 goroutines more than before they opened, where a
// goroutine each made 200 more), and each is served again, pipelined
// requests included, when its bytes come; one that then idles past
// idle_timeout is closed, parked as it is.
func TestFastPathIdleHoldsNoGoroutine(t *testing.T) {
	fast := &fakeFast{}
	l := fastListener()
	l.IdleTimeout = time.Hour
	m, addr := fastManager(t, fast, l)
	before := runtime.NumGoroutine()
	const n = 200
	cs, brs := idleClients(t, addr, n)
	waitFor(t, "the idle connections parked", func() bool {
		fs := currentFast(m)
		fs.mu.Lock()
		defer fs.mu.Unlock()
		idle := 0
		for fc := range fs.conns {
			if fc.idle && fc.fr == nil {
				idle++
			}
		}
		return idle == n
	})
	// The last request's goroutine may still be on its way out.
	waitFor(t, "the idle connections' goroutines gone", func() bool { return runtime.NumGoroutine()-before < n/10 })
	for i, c := range cs {
		if _, body := roundTrip(t, c, brs[i], "GET /b HTTP/1.1\r\nHost: x\r\n\r\n"); body != "fast" {
			t.Fatalf("after idling: body %q, want fast", body)
		}
	}
	// Two requests in one write: the second is served without a park.
	c, br := cs[0], brs[0]
	io.WriteString(c, "GET /p1 HTTP/1.1\r\nHost: x\r\n\r\nGET /p2 HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []string{"/p1", "/p2"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("pipelined %s: %v", want, err)
		}
		io.Copy(io.Discard, resp.Body)
		if got := resp.Header.Get("X-Target"); got != want {
			t.Fatalf("pipelined answer for %q, want %q", got, want)
		}
	}
	if got, want := fast.served.Load(), int64(2*n+2); got != want {
		t.Errorf("%d requests served, want %d", got, want)
	}
}

// TestFastPathIdleTimeoutParked: a parked connection is closed at
// idle_timeout (its deadline on the poller's heap), and its fd budget
// given back: the fast path serves no connection after.
func TestFastPathIdleTimeoutParked(t *testing.T) {
	fast := &fakeFast{}
	l := fastListener()
	l.IdleTimeout = 300 * time.Millisecond
	m, addr := fastManager(t, fast, l)
	cs, _ := idleClients(t, addr, 20)
	for i, c := range cs {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("connection %d idle past idle_timeout: Read = %d, %v; want 0, EOF (closed by the gfe)", i, n, err)
		}
	}
	waitFor(t, "the closed connections forgotten", func() bool { return currentFast(m).connCount() == 0 })
}

// TestFastPathDrainRacesParked: the drain (a settings change retires the
// generation) closes 100 parked connections while each one's next
// request arrives: each client gets its answer or a closed connection,
// never a hang, and every connection of the old generation ends (its
// count reaches zero, so its drain returns). Run it with -race.
func TestFastPathDrainRacesParked(t *testing.T) {
	fast := &fakeFast{}
	l := fastListener()
	l.IdleTimeout = time.Hour
	m, addr := fastManager(t, fast, l)
	const n = 100
	cs, brs := idleClients(t, addr, n)
	old := currentFast(m)
	waitFor(t, "the idle connections parked", func() bool {
		old.mu.Lock()
		defer old.mu.Unlock()
		idle := 0
		for fc := range old.conns {
			if fc.idle && fc.fr == nil {
				idle++
			}
		}
		return idle == n
	})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[i]
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, "GET /race HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				return // closed by the drain already
			}
			resp, err := http.ReadResponse(brs[i], nil)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				errs <- err
			}
		}()
	}
	l2 := l
	l2.IdleTimeout = 30 * time.Minute // a new generation
	l2.Name, l2.Port = "web", m.DefaultAddr().(*net.TCPAddr).Port
	if err := m.Apply([]config.Listener{l2}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a client raced by the drain hung: %v", err)
	}
	waitFor(t, "every old connection ended", func() bool { return old.connCount() == 0 })
	old.wg.Wait()
}

// TestFastPathBusyList: the sweep's list holds the connections being
// served and no idle one: with 50 idle connections and one request held,
// it holds that one, and none once it is answered.
func TestFastPathBusyList(t *testing.T) {
	fast := &holdHeld{hold: make(chan struct{}), began: make(chan struct{}, 1)}
	m, addr := startManager(t, fastListener(), Options{Fast: fast})
	cs, brs := idleClients(t, addr, 50)
	fs := currentFast(m)
	busy := func() (n int, all bool) {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		for b := fs.busy.head; b != nil; b = b.next {
			n++
		}
		return n, len(fs.conns) == len(cs)
	}
	waitFor(t, "the answered requests off the busy list", func() bool { n, all := busy(); return n == 0 && all })
	io.WriteString(cs[7], "GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
	<-fast.began
	if n, _ := busy(); n != 1 {
		t.Fatalf("%d connections on the busy list with one request served, want 1", n)
	}
	close(fast.hold)
	if resp, err := http.ReadResponse(brs[7], nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("held request: %v, %v", resp, err)
	}
	waitFor(t, "the answered request off the busy list", func() bool { n, _ := busy(); return n == 0 })
}

// holdHeld is fakeFast, but it holds the requests for /held alone, on
// hold, telling began.
type holdHeld struct {
	fakeFast
	hold, began chan struct{}
}

func (f *holdHeld) ServeFast(fr *httpproxy.FastRequest) bool {
	if string(fr.Head.Target) == "/held" {
		f.began <- struct{}{}
		<-f.hold
	}
	return f.fakeFast.ServeFast(fr)
}
