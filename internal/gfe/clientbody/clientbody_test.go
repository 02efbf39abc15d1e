package clientbody

import (
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
