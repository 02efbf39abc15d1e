package clientbody

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/clock"
)

// errReader fails every Read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestReadErrorsAreTheClients(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"malformed chunked", errors.New("http: malformed chunked encoding"), http.StatusBadRequest},
		{"cut short", io.ErrUnexpectedEOF, http.StatusBadRequest},
		{"over the limit", &http.MaxBytesError{Limit: 10}, http.StatusRequestEntityTooLarge},
		{"read deadline", fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded), http.StatusRequestTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", io.NopCloser(errReader{tt.err}))
			b := Wrap(httptest.NewRecorder(), r, Limits{}, nil)
			_, err := b.Read(make([]byte, 8))
			var ce *Error
			if !errors.As(err, &ce) || ce.Status != tt.want || !errors.Is(err, tt.err) {
				t.Fatalf("Read = %v, want an *Error with status %d wrapping %v", err, tt.want, tt.err)
			}
			// The forwarding may fail with the request's cancellation
			// instead: Tag still finds the body's failure.
			if got := b.Tag(errors.New("context canceled"), false); got != ce {
				t.Errorf("Tag(other error) = %v, want the body's %v", got, ce)
			}
		})
	}
	t.Run("EOF is not an error", func(t *testing.T) {
		r := httptest.NewRequest("POST", "/", strings.NewReader("abc"))
		b := Wrap(httptest.NewRecorder(), r, Limits{IdleTimeout: time.Second}, clock.NewFake(time.Unix(0, 0)))
		if got, err := io.ReadAll(b); string(got) != "abc" || err != nil {
			t.Errorf("ReadAll = %q, %v", got, err)
		}
		if ce := b.Tag(errors.New("backend reset"), true); ce != nil {
			t.Errorf("Tag after a whole body = %v, want nil (the backend's failure)", ce)
		}
	})
}

// blockingReader blocks each Read until a chunk arrives on ch.
type blockingReader struct{ ch chan string }

func (r blockingReader) Read(p []byte) (int, error) {
	s, ok := <-r.ch
	if !ok {
		return 0, io.EOF
	}
	return copy(p, s), nil
}

// TestIdleTimerRunsOnlyWhileWaiting: time that passes between reads (a
// backend slow to take the body) is not a client's pause; Waiting is true
// only during a Read, and a deadline that passes then is the client's.
func TestIdleTimerRunsOnlyWhileWaiting(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	ch := make(chan string)
	r := httptest.NewRequest("POST", "/", io.NopCloser(blockingReader{ch}))
	b := Wrap(httptest.NewRecorder(), r, Limits{IdleTimeout: 10 * time.Second}, clk)
	clk.Advance(time.Hour) // no Read in progress: back-pressure, not a pause
	done := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 8))
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !b.Waiting() {
		if time.Now().After(deadline) {
			t.Fatal("Read never started waiting")
		}
		time.Sleep(time.Millisecond) // polling a condition
	}
	if ce := b.Tag(errors.New("context deadline exceeded"), true); ce == nil || ce.Status != http.StatusRequestTimeout {
		t.Errorf("Tag(deadline) while waiting for the client = %v, want 408", ce)
	}
	ch <- "data"
	if err := <-done; err != nil {
		t.Errorf("Read after an hour of back-pressure = %v, want data", err)
	}
	if b.Waiting() {
		t.Error("Waiting after the Read returned")
	}
}

// countingReader serves s and counts its Reads.
type countingReader struct {
	s     *strings.Reader
	reads int
}

func (r *countingReader) Read(p []byte) (int, error) {
	r.reads++
	return r.s.Read(p)
}

// TestRouteTimeoutIsTheClients: a route timeout that passes while the gfe
// is busy with the client's body is a 408 of the client's; one that
// passes once the body is read to its end, or long after the gfe last
// read it, is not.
func TestRouteTimeoutIsTheClients(t *testing.T) {
	t.Run("a Read after the timeout fails at once", func(t *testing.T) {
		cr := &countingReader{s: strings.NewReader("0123456789")}
		r := httptest.NewRequest("POST", "/", io.NopCloser(cr))
		b := Wrap(httptest.NewRecorder(), r, Limits{}, nil)
		if n, err := b.Read(make([]byte, 4)); n != 4 || err != nil {
			t.Fatalf("first Read = %d, %v", n, err)
		}
		b.RouteTimedOut()
		_, err := b.Read(make([]byte, 4))
		var ce *Error
		if !errors.As(err, &ce) || ce.Status != http.StatusRequestTimeout || !errors.Is(err, ErrRouteTimeout) {
			t.Fatalf("Read after RouteTimedOut = %v, want a 408 *Error wrapping ErrRouteTimeout", err)
		}
		if cr.reads != 1 {
			t.Errorf("the client's body was read %d times, want 1 (none after the timeout)", cr.reads)
		}
		if got := b.Tag(context.DeadlineExceeded, true); got != ce {
			t.Errorf("Tag(deadline) = %v, want the Read's %v", got, ce)
		}
	})

	tests := []struct {
		name     string
		body     string
		readAll  bool          // read the body to its end
		routeIn  time.Duration // the route deadline, from just before the Read
		want408  bool
		deadline bool // Tag's deadline argument
	}{
		{name: "deadline just after a Read, body not at its end", body: "0123456789", routeIn: BetweenReads / 4, want408: true, deadline: true},
		{name: "deadline before the Read returned", body: "0123456789", routeIn: -time.Second, want408: true, deadline: true},
		{name: "deadline long after the last Read: the backend held it", body: "0123456789", routeIn: time.Hour, deadline: true},
		{name: "body read to its end", body: "0123456789", readAll: true, routeIn: BetweenReads / 4, deadline: true},
		{name: "no deadline", body: "0123456789", routeIn: BetweenReads / 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", io.NopCloser(strings.NewReader(tt.body)))
			b := Wrap(httptest.NewRecorder(), r, Limits{}, nil)
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(tt.routeIn))
			defer cancel()
			defer b.WatchRoute(ctx)()
			if tt.readAll {
				if _, err := io.ReadAll(b); err != nil {
					t.Fatal(err)
				}
			} else if _, err := b.Read(make([]byte, 4)); err != nil {
				t.Fatal(err)
			}
			ce := b.Tag(context.DeadlineExceeded, tt.deadline)
			if got := ce != nil && ce.Status == http.StatusRequestTimeout && errors.Is(ce, ErrRouteTimeout); got != tt.want408 || (ce != nil) != tt.want408 {
				t.Errorf("Tag(deadline %v) = %v, want a 408 of the route timeout: %v", tt.deadline, ce, tt.want408)
			}
		})
	}
}
