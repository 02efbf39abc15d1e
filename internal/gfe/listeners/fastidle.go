package listeners

import "github.com/spillway-lb/spillway/internal/gfe/poller"

// waitResult is how waitRequest's wait ended.
type waitResult uint8

const (
	// waitReady: the next request's first byte is in fc.fr.Client.
	waitReady waitResult = iota
	// waitFailed: the connection must close (read error, idle_timeout,
	// closed).
	waitFailed
	// waitParked: fc is parked in the poller; resume serves it on.
	waitParked
)

// waitRequest waits for the first byte of fc's next request (its first
// one: first is set). A connection in the poller (cleartext) waits
// holding no request buffers and no goroutine: its FastRequest, with its
// bufio.Reader (max_header_bytes + 4 KiB) and bufio.Writer, goes back to
// the pool, and the connection parks in the poller (poller.Conn.Park),
// its goroutine returning (waitParked). When bytes come, the peer closes,
// its read deadline (idle_timeout, or read_header_timeout before the
// first request) passes, or the drain or the fd budget's reclaim closes
// it, the poller starts resume in a new goroutine, exactly once: an idle
// keep-alive connection holds its socket and its registration alone, as
// nginx and HAProxy hold no buffer for one, and where net/http's server
// holds a goroutine (its grown stack, 8 KiB) and a 4 KiB bufio.Reader.
// Bytes already there (pipelined, or come before the park) are read at
// once, in this goroutine. A TLS connection (tls.Conn may hold a record
// the socket no longer shows) waits in its reader as before.
func (fs *fastServer) waitRequest(fc *fastConn, first bool) waitResult {
	pc, ok := fc.c.(*poller.Conn)
	if !ok || fc.fr.TLS {
		if _, err := fc.fr.Client.Peek(1); err != nil {
			return waitFailed
		}
		return waitReady
	}
	fs.mu.Lock()
	fr := fc.fr
	fc.fr = nil
	fs.mu.Unlock()
	fs.putRequest(fr)
	if fc.wake == nil {
		fc.wake = func() { fs.resume(fc) }
	}
	fc.parkedFirst = first
	if pc.Park(&fc.wake) {
		return waitParked // resume may be running already: fc is not ours
	}
	return fs.readable(fc)
}

// readable gives fc, whose wait ended, a FastRequest again and reads its
// next request's first byte.
func (fs *fastServer) readable(fc *fastConn) waitResult {
	fr := fs.getRequest(fc.c)
	fs.mu.Lock()
	fc.fr = fr
	fs.mu.Unlock()
	if _, err := fr.Client.Peek(1); err != nil {
		return waitFailed
	}
	return waitReady
}

// resume serves fc, parked by waitRequest, once the poller hands it back
// (in a goroutine of its own): its request if one came, else it ends (a
// closed connection, an end of file, a deadline passed all fail the
// read).
func (fs *fastServer) resume(fc *fastConn) {
	e := endClose
	if fs.readable(fc) == waitReady {
		e = fs.requests(fc, fc.c, fc.parkedFirst)
	}
	fs.end(fc, e)
}
