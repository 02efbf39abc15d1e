package proc

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestStartOutputAndStop(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	var tee bytes.Buffer
	p, err := Start("echoer", sh, Options{Tee: &syncBuffer{b: &tee}}, "-c", "echo hello; exec sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.Output(), "hello") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := p.Output(); got != "hello\n" {
		t.Fatalf("Output() = %q, want %q", got, "hello\n")
	}
	if err := p.Stop(5 * time.Second); err == nil {
		t.Fatal("Stop of a process killed by SIGTERM returned nil, want its exit error")
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
}

func TestWaitHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := WaitHTTP(ctx, srv.URL); err != nil {
		t.Fatalf("WaitHTTP(up server) = %v", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if err := WaitHTTP(short, "http://127.0.0.1:1/"); err == nil {
		t.Fatal("WaitHTTP(closed port) = nil, want error")
	}
}

type syncBuffer struct{ b *bytes.Buffer }

func (s *syncBuffer) Write(p []byte) (int, error) { return s.b.Write(p) }
