package testbackend

import (
	"context"
	"net/http"

	"github.com/coder/websocket"
)

// maxWebSocketMessage is the largest WebSocket message echoed, in bytes; a
// larger one closes the connection with StatusMessageTooBig.
const maxWebSocketMessage = 1 << 20

// serveWebSocket serves GET /ws of the http and h2 protocols: a WebSocket
// echo stream (see the package doc). The handshake is delayed and admitted
// like a normal request and the connection then holds its slot until it
// ends. It sends in.hello() first, then echoes each message with the same
// type after the emulated RTT plus the service time, and closes with
// StatusGoingAway when the instance stops.
func (in *instance) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	if !in.sessions.enter() {
		http.Error(w, "instance stopping", http.StatusServiceUnavailable)
		return
	}
	defer in.sessions.leave()
	ctx := r.Context()
	src := source(r)
	rtt := in.delays.Lookup(src)
	if sleep(ctx, in.clock, rtt) != nil {
		in.canceled.Add(1)
		return
	}
	if !in.admitHTTP(w, r, src) {
		return
	}
	defer in.lim.release()
	in.setLoadHeader(w) // on the 101 answer, counting this stream in flight
	// Any origin may connect: the backend is a test tool.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept answered the failed handshake
	}
	defer func() { _ = c.CloseNow() }()
	in.startStream(src)
	c.SetReadLimit(maxWebSocketMessage)

	closed := make(chan struct{})
	stopWatching := context.AfterFunc(in.stopCtx, func() {
		defer close(closed)
		_ = c.Close(websocket.StatusGoingAway, "instance stopping")
	})
	defer func() {
		if !stopWatching() {
			<-closed // the close handshake began: let it finish
		}
	}()

	if err := c.Write(ctx, websocket.MessageText, []byte(in.hello())); err != nil {
		return
	}
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			return // closed by either side, or the connection failed
		}
		if err := sleep(ctx, in.clock, rtt+in.cfg.Capacity.ServiceTime); err != nil {
			return
		}
		in.messages.Add(1) // before the write, so that a reader sees it counted
		if err := c.Write(ctx, typ, msg); err != nil {
			return
		}
	}
}
