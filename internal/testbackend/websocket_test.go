package testbackend

import (
	"context"
	"net/http"
	"testing"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
)

// readMessage reads one WebSocket message or fails the test.
func readMessage(ctx context.Context, t *testing.T, c *websocket.Conn) (websocket.MessageType, string) {
	t.Helper()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("websocket read: %v", err)
	}
	return typ, string(b)
}

// TestWebSocket checks the echo at /ws over http and over h2's TLS: the
// hello naming the instance, echoes of text and binary messages, identity
// headers on the handshake, and the counters.
func TestWebSocket(t *testing.T) {
	h2 := testInstance("s", DefaultCapacity())
	h2.Proto = ProtoH2
	s := startServer(t, Config{Instances: []InstanceConfig{testInstance("p", DefaultCapacity()), h2}}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	tests := []struct {
		name     string
		instance string
		url      string
		client   *http.Client
	}{
		{name: "http", instance: "p", url: "ws://" + s.Addr("p") + "/ws", client: newClient(t, "")},
		// A WebSocket over TLS negotiates http/1.1 by ALPN.
		{name: "h2 instance over TLS", instance: "s", url: "wss://" + s.Addr("s") + "/ws", client: tlsClient(t, s.Certificate("s"), "http/1.1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, resp, err := websocket.Dial(ctx, tt.url, &websocket.DialOptions{HTTPClient: tt.client})
			if err != nil {
				t.Fatalf("Dial %s: %v", tt.url, err)
			}
			defer func() { _ = c.CloseNow() }()
			if got := resp.Header.Get(HeaderBackend); got != tt.instance {
				t.Errorf("handshake header %s = %q, want %q", HeaderBackend, got, tt.instance)
			}
			if typ, msg := readMessage(ctx, t, c); typ != websocket.MessageText || msg != "hello "+tt.instance+" us-east us-east-b" {
				t.Errorf("first message = %v %q, want text %q", typ, msg, "hello "+tt.instance+" us-east us-east-b")
			}
			for _, m := range []struct {
				typ websocket.MessageType
				msg string
			}{{websocket.MessageText, "ping"}, {websocket.MessageBinary, "\x00\x01\x02"}} {
				if err := c.Write(ctx, m.typ, []byte(m.msg)); err != nil {
					t.Fatal(err)
				}
				if typ, msg := readMessage(ctx, t, c); typ != m.typ || msg != m.msg {
					t.Errorf("echo of %v %q = %v %q", m.typ, m.msg, typ, msg)
				}
			}
			st, _ := s.Stats(tt.instance)
			if st.InFlight != 1 || st.Streams != 1 || st.Messages != 2 {
				t.Errorf("while open: in_flight %d streams %d messages %d; want 1, 1, 2", st.InFlight, st.Streams, st.Messages)
			}
			if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
				t.Errorf("Close: %v", err)
			}
			in := s.find(tt.instance)
			if err := in.lim.waitFor(ctx, func(inFlight, _ int) bool { return inFlight == 0 }); err != nil {
				t.Errorf("the WebSocket's slot was not given back: %v", err)
			}
		})
	}
}

// TestWebSocketRejected checks that a handshake finding the queue full is
// answered 503 with X-Spillway-Reject, like a normal request.
func TestWebSocketRejected(t *testing.T) {
	s := startServer(t, Config{Instances: []InstanceConfig{testInstance("p", Capacity{MaxConcurrency: 1, Queue: 0})}}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	url := "ws://" + s.Addr("p") + "/ws"
	first, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: newClient(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.CloseNow() }()
	readMessage(ctx, t, first) // the hello: the stream is counted
	_, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: newClient(t, "")})
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(HeaderReject) != "queue-full" {
		t.Fatalf("second Dial while the only slot is held: resp %v, err %v; want 503 queue-full", resp, err)
	}
	st, _ := s.Stats("p")
	want := SourceStats{Rejected: 1, Streams: 1}
	if diff := cmp.Diff(want, st.BySource["127.0.0.0/24"]); diff != "" || st.Rejected != 1 {
		t.Errorf("stats: rejected %d, by_source mismatch (-want +got):\n%s", st.Rejected, diff)
	}
}
