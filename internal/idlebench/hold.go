package idlebench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// HoldConfig is what the holder process is told on its first stdin line.
type HoldConfig struct {
	// Addr is the gfe's listener, host:port.
	Addr string `json:"addr"`
	// Sources are the client addresses, used in turn.
	Sources []netip.Addr `json:"sources"`
	// Conns is how many connections to open.
	Conns int `json:"conns"`
	// Parallel bounds the dials and requests in flight at once.
	Parallel int `json:"parallel"`
	// KeepAlive is the connections' TCP keep-alive idle time, as
	// net.Dialer.KeepAlive: 0 Go's default (15s), negative none.
	KeepAlive time.Duration `json:"keepalive,omitempty"`
}

// HoldReport is a holder's answer: after opening (Opened, Failed) and
// after each "check" (Served, Failed).
type HoldReport struct {
	Opened int    `json:"opened,omitempty"`
	Served int    `json:"served,omitempty"`
	Failed int    `json:"failed"`
	Error  string `json:"error,omitempty"` // the first failure
}

// holdRequest is the one request each held connection makes.
const holdRequest = "GET /idle HTTP/1.1\r\nHost: web\r\n\r\n"

// Hold is the load generator of the idle connections, run as a process of
// its own (cmd/idlebench hold): it reads a HoldConfig line from stdin,
// opens that many keep-alive connections, each making one request (200
// expected), and writes a HoldReport line. Then, for each "check" line, it
// makes one more request on every connection it holds and reports how
// many were served. At the end of stdin it closes them all and returns.
func Hold(stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewScanner(stdin)
	if !in.Scan() {
		return errors.New("hold: no config on stdin")
	}
	var cfg HoldConfig
	if err := json.Unmarshal(in.Bytes(), &cfg); err != nil {
		return fmt.Errorf("hold: config: %w", err)
	}
	if cfg.Conns <= 0 || cfg.Addr == "" {
		return fmt.Errorf("hold: config needs addr and conns > 0, got %+v", cfg)
	}
	cfg.Parallel = max(cfg.Parallel, 1)
	conns := make([]net.Conn, cfg.Conns)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	enc := json.NewEncoder(stdout)
	rep := each(cfg.Conns, cfg.Parallel, func(i int) error {
		d := net.Dialer{Timeout: 10 * time.Second, KeepAlive: cfg.KeepAlive}
		if len(cfg.Sources) > 0 {
			d.LocalAddr = &net.TCPAddr{IP: cfg.Sources[i%len(cfg.Sources)].AsSlice()}
		}
		c, err := d.Dial("tcp", cfg.Addr)
		if err != nil {
			return err
		}
		conns[i] = c
		return roundTrip(c)
	})
	rep.Opened, rep.Served = rep.Served, 0
	if err := enc.Encode(rep); err != nil {
		return err
	}
	for in.Scan() {
		if in.Text() != "check" {
			return fmt.Errorf("hold: unknown command %q", in.Text())
		}
		rep := each(cfg.Conns, cfg.Parallel, func(i int) error {
			if conns[i] == nil {
				return errors.New("never opened")
			}
			return roundTrip(conns[i])
		})
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
	return in.Err()
}

// each runs f(0..n-1), at most parallel at once, and counts the calls
// that returned nil (Served) and the others (Failed, the first one's
// error in Error).
func each(n, parallel int, f func(i int) error) HoldReport {
	var (
		next, ok, failed atomic.Int64
		mu               sync.Mutex
		first            string
		wg               sync.WaitGroup
	)
	for range min(parallel, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := f(i); err != nil {
					failed.Add(1)
					mu.Lock()
					if first == "" {
						first = fmt.Sprintf("connection %d: %v", i, err)
					}
					mu.Unlock()
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return HoldReport{Served: int(ok.Load()), Failed: int(failed.Load()), Error: first}
}

// roundTrip makes one request on c and reads its whole answer, which must
// be a 200 that keeps the connection open. It keeps no buffer afterwards.
func roundTrip(c net.Conn) error {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, holdRequest); err != nil {
		return err
	}
	// The answer is read byte-exactly (no read past its body), so the
	// small reader can be dropped with nothing of the connection in it.
	br := bufio.NewReaderSize(c, 512)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || resp.Close {
		return fmt.Errorf("answer %d (close %v)", resp.StatusCode, resp.Close)
	}
	if br.Buffered() > 0 {
		return fmt.Errorf("%d bytes after the answer", br.Buffered())
	}
	return nil
}
