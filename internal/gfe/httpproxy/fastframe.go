package httpproxy

// The fast path's (fast.go) reading of a backend's response: its head, the
// interim answers before the final one, and its body by the framing the
// head says (Content-Length, chunked, until close).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/spillway-lb/spillway/internal/gfe/h1"
)

// readResponseHead reads the next response head on bc into bc.resp and
// returns its length; 1xx heads are returned like others.
func readResponseHead(bc *backendConn, head bool) (int, error) {
	for {
		buf, _ := bc.br.Peek(bc.br.Buffered())
		n, err := h1.ParseResponse(buf, head, &bc.resp)
		if err != h1.ErrIncomplete {
			return n, err
		}
		if len(buf) == fastReadBuffer {
			bc.resp.Why = "response head larger than the read buffer"
			return 0, h1.ErrBadResponse
		}
		if _, err := bc.br.Peek(len(buf) + 1); err != nil {
			if err == io.EOF && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
	}
}

// maxInterim is how many interim (1xx) responses the gfe relays from an
// attempt ahead of its final one; one more is the backend's failure (502,
// and another attempt when retry.go allows one). A request that asks
// to continue gets one 100 at most, and a backend sends a 103 Early Hints
// or two besides; a bound far above that costs nothing, where none let a
// backend keep a client reading interim answers for ever (net/http's
// Transport relays every one to a ReverseProxy, which set no bound).
const maxInterim = 8

// errInterim is finalHead's refusal of a backend's interim answers: a 101
// nobody asked for (upgrades go to net/http), or more than maxInterim.
var errInterim = errors.New("interim responses refused")

// finalHead moves bc past the interim (1xx) heads at the start of its
// buffer — the first, n bytes, already parsed into bc.resp — handing each
// to interim, and returns the length of the final head after them, parsed
// into bc.resp. Its errors are errInterim (wrapped), or readResponseHead's.
func finalHead(bc *backendConn, n int, head bool, interim func(buf []byte)) (int, error) {
	for i := 0; bc.resp.Status < 200; i++ {
		switch {
		case bc.resp.Status == http.StatusSwitchingProtocols:
			return 0, fmt.Errorf("%w: 101 Switching Protocols to a request that asked for no upgrade", errInterim)
		case i == maxInterim:
			return 0, fmt.Errorf("%w: more than %d", errInterim, maxInterim)
		}
		buf, _ := bc.br.Peek(n)
		interim(buf)
		bc.br.Discard(n)
		var err error
		if n, err = readResponseHead(bc, head); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// copyBody copies the body of the response whose head (parsed into
// bc.resp) bc.br has just passed to w, to the end its framing says: as it
// came, or with its chunks decoded (dechunk). keep reports whether the
// backend keeps the connection open after it: the framing ends the body
// and the response does not say close.
func copyBody(w *bufio.Writer, bc *backendConn, dechunk bool) (keep bool, err error) {
	r := &bc.resp
	keep = !r.Close
	switch r.Framing {
	case h1.Length:
		err = copyN(w, bc.br, r.ContentLength)
	case h1.Chunked:
		err = copyChunked(w, bc.br, !dechunk)
	case h1.UntilClose:
		err = copyN(w, bc.br, -1)
		keep = false
	}
	return keep && err == nil, err
}

// reusable reports, for bc after copyBody, whether it may go back to the
// pool (the first half of the reuse rule, fastpool.go): the backend keeps
// it (keep) and nothing followed the response in its buffer. stray says
// something did.
func reusable(bc *backendConn, keep bool) (reuse, stray bool) {
	if !keep {
		return false, false
	}
	if bc.br.Buffered() > 0 {
		return false, true
	}
	return true, false
}

// copyN copies n bytes (n < 0: until EOF) from r to w, flushing w whenever
// r has nothing more buffered so that a slow body streams.
func copyN(w *bufio.Writer, r *bufio.Reader, n int64) error {
	for n != 0 {
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
			if _, err := r.Peek(1); err != nil {
				if n < 0 && err == io.EOF {
					return nil
				}
				return err
			}
		}
		m := r.Buffered()
		if n > 0 && int64(m) > n {
			m = int(n)
		}
		b, _ := r.Peek(m)
		if _, err := w.Write(b); err != nil {
			return err
		}
		r.Discard(m)
		if n > 0 {
			n -= int64(m)
		}
	}
	return nil
}

// errBadChunk is a malformed chunked body from a backend.
var errBadChunk = errors.New("malformed chunked response body")

// copyChunked copies a chunked body, validated, from r to w: verbatim with
// its trailers when raw, else only the data (trailers dropped).
func copyChunked(w *bufio.Writer, r *bufio.Reader, raw bool) error {
	for {
		line, err := readLine(r)
		if err != nil {
			return err
		}
		size, ok := h1.ParseChunkSize(line[:len(line)-2])
		if !ok {
			return errBadChunk
		}
		if raw {
			w.Write(line)
		}
		if size == 0 {
			break
		}
		if err := copyN(w, r, size); err != nil {
			return err
		}
		crlf, err := r.Peek(2)
		if err != nil {
			return err
		}
		if crlf[0] != '\r' || crlf[1] != '\n' {
			return errBadChunk
		}
		if raw {
			w.Write(crlf)
		}
		r.Discard(2)
	}
	for {
		line, err := readLine(r)
		if err != nil {
			return err
		}
		if len(line) == 2 {
			if raw {
				w.Write(line)
			}
			return nil
		}
		if _, ok := h1.ParseTrailer(line[:len(line)-2]); !ok {
			return errBadChunk
		}
		if raw {
			w.Write(line)
		}
	}
}

// readLine returns the next line of r with its CRLF (a bare LF, or a line
// longer than r's buffer, is an error). The slice is valid until r's next
// read.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err == bufio.ErrBufferFull {
			err = errBadChunk
		}
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, errBadChunk
	}
	return line, nil
}
