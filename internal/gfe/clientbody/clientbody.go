// Package clientbody guards the body of a client's request on its way
// through the gfe, and tells the client's failures from a backend's.
//
// A request body is read by the transport that forwards it to a backend.
// When that read fails — malformed chunked framing, a body cut short, a
// client that stops sending, a body over the listener's limit — the
// forwarding fails too, and without this package the proxy could not tell
// such a failure from one of the backend's: it answered 502 or 504 and
// counted it against the backend, so that twenty bad requests ejected a
// healthy backend (the first security review, finding 3). Body tags every read error as an
// *Error, the client's; the proxy answers it with the Error's status
// (400, 408 or 413) and never counts it against a backend.
//
// Guarantees:
//
//   - Every error Read returns, other than io.EOF, is an *Error (errors.As),
//     with Status 413 for a body over a limit set under it
//     (http.MaxBytesReader), 408 for a pause longer than Limits.IdleTimeout,
//     and 400 otherwise.
//   - The idle timeout runs only while a Read waits for the client: a
//     backend that reads the body slowly (back-pressure) never makes the
//     client's pause look long. It is timed on the injected clock.
//   - A route timeout that passes while the gfe is busy with the client's
//     body is the client's failure too (a 408 Error, ErrRouteTimeout):
//     when it passes during a Read that waits for the client, or less than
//     BetweenReads after a Read returned part of a body not yet read to
//     its end (the gfe was handing that part on, and would have come
//     back for more). WatchRoute ties a Body to its request's route
//     context: at the timeout the Read waiting then is interrupted, and
//     every later Read fails at once, so that the answer comes at the
//     route timeout and not at the client's next byte (net/http's
//     Transport does not return from a canceled RoundTrip while its
//     writer is in a Read of the body). A body read to its end, or one
//     the backend stopped taking (the gfe blocked writing it for longer
//     than BetweenReads), is not the client's: the timeout is then the
//     backend's.
//   - Waiting reports whether a Read is waiting for the client now.
package clientbody

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway-lb/spillway/lb/clock"
)

// Error is a failure of the client's side of a request body. The proxy
// answers it with Status and closes the connection; it never counts
// against a backend.
type Error struct {
	// Status is the answer: 400 Bad Request (malformed framing, a body cut
	// short or a client gone), 408 Request Timeout (the client paused
	// longer than Limits.IdleTimeout) or 413 Content Too Large (over the
	// listener's max_request_body_bytes, http.MaxBytesError).
	Status int
	// Err is what reading the client's body returned.
	Err error
}

func (e *Error) Error() string { return "client request body: " + e.Err.Error() }

// Unwrap returns the read error.
func (e *Error) Unwrap() error { return e.Err }

// ErrIdle is the Err of a 408 Error: the client sent no byte of its body
// for Limits.IdleTimeout while the gfe waited for one.
var ErrIdle = errors.New("client paused its request body longer than the idle timeout")

// ErrRouteTimeout is the Err of the 408 Error of a body still being sent
// when the route timeout passed (RouteTimedOut).
var ErrRouteTimeout = errors.New("route timeout passed while the gfe waited for the client's request body")

// BetweenReads is how long after a Read of the client's body returned the
// gfe still counts as busy with that body (a route timeout then is the
// client's). Handing a chunk to a backend that takes it costs
// microseconds, then the transport reads again; 20 ms leaves room for a
// loaded machine's scheduling, and a backend that holds a write up longer
// than that is the one that makes the request slow.
const BetweenReads = 20 * time.Millisecond

// Limits bound a request body.
type Limits struct {
	// IdleTimeout is the longest the gfe waits for the next byte of a body
	// the client is sending; zero means no limit. It does not bound the
	// whole upload, only a pause in it.
	IdleTimeout time.Duration
}

// Body is a client's request body under Limits. Read is called by one
// goroutine at a time (the transport's); Waiting and Close may be called
// from any. Must not be copied.
type Body struct {
	// Immutable after Wrap.
	rc    io.ReadCloser
	ctl   *http.ResponseController
	idle  time.Duration
	timer clock.Timer // fires expire; armed only while a Read waits

	// routeAt is when the route timeout passes (zero: none); set by
	// WatchRoute before the body is forwarded.
	routeAt time.Time

	// Accessed atomically. waiting is set while a Read waits for the
	// client; routeDone once RouteTimedOut was called; eof once a Read
	// returned io.EOF; lastRead is when the last Read returned (Unix
	// nanoseconds on the real clock, as the route timeout's context
	// deadline is; 0 before the first).
	waiting   atomic.Bool
	routeDone atomic.Bool
	eof       atomic.Bool
	lastRead  atomic.Int64
	// failed is the first *Error Read returned: a read error of the
	// client's connection also cancels the request's context, so the
	// forwarding may fail with context.Canceled instead of it.
	failed atomic.Pointer[Error]

	mu sync.Mutex
	// Guarded by mu.
	expired  bool // the idle timer fired during the current Read
	routeHit bool // RouteTimedOut interrupted the current Read
	closed   bool
}

// aLongTimeAgo is a read deadline in the past: it makes a blocked read
// return at once.
var aLongTimeAgo = time.Unix(1, 0)

// Wrap returns r's body under lim, timed on clk (nil: the real clock); w is
// r's ResponseWriter, whose connection's read deadline interrupts a read
// that waited too long (http.ResponseController.SetReadDeadline, HTTP/1.x
// and HTTP/2). The caller sets r.Body to the result.
func Wrap(w http.ResponseWriter, r *http.Request, lim Limits, clk clock.Clock) *Body {
	b := &Body{rc: r.Body, idle: lim.IdleTimeout, ctl: http.NewResponseController(w)}
	if b.idle > 0 {
		b.timer = clock.OrReal(clk).AfterFunc(b.idle, b.expire)
		b.timer.Stop()
	}
	return b
}

// expire interrupts the Read that waits for the client.
func (b *Body) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || !b.waiting.Load() {
		return
	}
	b.expired = true
	b.ctl.SetReadDeadline(aLongTimeAgo)
}

// WatchRoute ties b to ctx, the context of its request that the route
// timeout ends (context.WithTimeout): when ctx ends past its deadline,
// RouteTimedOut is called. It returns the function that stops watching
// (context.AfterFunc's stop), to be called when the request ends. It must
// be called at most once, before the body is forwarded.
func (b *Body) WatchRoute(ctx context.Context) (stop func() bool) {
	b.routeAt, _ = ctx.Deadline()
	return context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			b.RouteTimedOut()
		}
	})
}

// RouteTimedOut says that the request's route timeout passed: a Read
// waiting for the client now is interrupted, and every later Read fails at
// once, with a 408 Error (ErrRouteTimeout). Safe to call from any
// goroutine, more than once; it does nothing after Close.
func (b *Body) RouteTimedOut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	// routeDone before waiting is looked at, and Read sets waiting before
	// it looks at routeDone: a Read either sees routeDone or is seen
	// waiting here.
	b.routeDone.Store(true)
	if b.closed || !b.waiting.Load() {
		return
	}
	b.routeHit = true
	b.ctl.SetReadDeadline(aLongTimeAgo)
}

// Read reads the client's body; see the package doc for its errors.
func (b *Body) Read(p []byte) (int, error) {
	b.waiting.Store(true)
	if b.routeDone.Load() {
		b.waiting.Store(false)
		return 0, b.fail(&Error{Status: http.StatusRequestTimeout, Err: ErrRouteTimeout})
	}
	if b.timer != nil {
		b.timer.Reset(b.idle)
	}
	n, err := b.rc.Read(p)
	if !b.routeAt.IsZero() {
		// Only justRead reads these, and only under a watched route
		// timeout: an unwatched body pays no clock read per Read.
		b.lastRead.Store(time.Now().UnixNano())
		if err == io.EOF {
			b.eof.Store(true)
		}
	}
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.waiting.Store(false)
	expired, routeHit := b.expired, b.routeHit
	b.expired, b.routeHit = false, false
	if expired && err == nil && !routeHit {
		// The idle timer fired as data came in: the pause was not too
		// long after all, but the deadline is set. Clear it. (After the
		// route timeout it stays: the next Read fails anyway.)
		b.ctl.SetReadDeadline(time.Time{})
		expired = false
	}
	b.mu.Unlock()
	if err == nil || err == io.EOF {
		return n, err
	}
	if routeHit {
		return n, b.fail(&Error{Status: http.StatusRequestTimeout, Err: errors.Join(ErrRouteTimeout, err)})
	}
	return n, b.fail(classify(err, expired))
}

// fail records ce as the body's failure unless one came first, and
// returns ce.
func (b *Body) fail(ce *Error) *Error {
	b.failed.CompareAndSwap(nil, ce)
	return ce
}

// classify returns the *Error of a failed read of a client's body; expired
// is whether the idle timer interrupted it.
func classify(err error, expired bool) *Error {
	var ce *Error
	if errors.As(err, &ce) {
		return ce
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &Error{Status: http.StatusRequestEntityTooLarge, Err: err}
	case expired || errors.Is(err, os.ErrDeadlineExceeded):
		return &Error{Status: http.StatusRequestTimeout, Err: errors.Join(ErrIdle, err)}
	}
	return &Error{Status: http.StatusBadRequest, Err: err}
}

// Close stops the idle timer and closes the body.
func (b *Body) Close() error {
	b.mu.Lock()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	return b.rc.Close()
}

// Waiting reports whether a Read is waiting for the client now.
func (b *Body) Waiting() bool { return b.waiting.Load() }

// Tag returns the *Error of a forwarding that failed with err: the one a
// Read of the client's body reported (in err, or earlier: the read error
// may have cancelled the request, and err be that), or, when deadline (the
// route timeout passed) while the gfe was busy with the client's body (a
// Read waiting now, or one that returned less than BetweenReads before the
// route timeout of WatchRoute, the body not at its end), a 408 — the gfe
// was waiting for the client, not for the backend. Otherwise it returns
// nil. b may be nil.
func (b *Body) Tag(err error, deadline bool) *Error {
	var ce *Error
	if errors.As(err, &ce) {
		return ce
	}
	if b == nil {
		return nil
	}
	if ce := b.failed.Load(); ce != nil {
		return ce
	}
	if deadline && (b.Waiting() || b.justRead()) {
		return &Error{Status: http.StatusRequestTimeout, Err: errors.Join(ErrRouteTimeout, err)}
	}
	return nil
}

// justRead reports whether a Read of a body not at its end returned less
// than BetweenReads before the route timeout (or after it).
func (b *Body) justRead() bool {
	last := b.lastRead.Load()
	if b.routeAt.IsZero() || last == 0 || b.eof.Load() {
		return false
	}
	return b.routeAt.UnixNano()-last < int64(BetweenReads)
}
