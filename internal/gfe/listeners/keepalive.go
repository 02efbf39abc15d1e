package listeners

import (
	"context"
	"net"
	"time"

	"github.com/spillway-lb/spillway/config"
)

// TCP keep-alive of client connections.
//
// Go's listener turns TCP keep-alive on for every accepted connection,
// probing after 15 s of silence and every 15 s after: an idle keep-alive
// client costs one probe and its ACK per 15 s, in the kernel, for as long
// as its idle_timeout holds it open (90 s by default). 15,000 idle clients
// that connected in the same few seconds were 15,000 probes within about
// four seconds every 15 s, and the active requests' p99 beside them went
// up with them (BENCHMARKS.md §8, "15,000 idle connections"). The
// idle_timeout already closes a connection that stays silent, so the gfe
// probes only a connection silent longer than its listener's idle_timeout
// plus one probe interval (one waiting for a slow answer, whose client may
// have vanished), and never a kept-alive connection that idle_timeout
// closes first. nginx and HAProxy do not probe client connections at all
// by default.

// keepAliveInterval and keepAliveCount are the probes' interval and how
// many go unanswered before the kernel drops the connection (Go's
// defaults).
const (
	keepAliveInterval = 15 * time.Second
	keepAliveCount    = 9
)

// listenTCP binds addr with no keep-alive set on accepted connections:
// setKeepAlive sets it per connection, by its listener's idle_timeout.
func listenTCP(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	return lc.Listen(context.Background(), "tcp", addr)
}

// keepAliveFor returns the TCP keep-alive of a connection accepted for
// listener l: the first probe after l's idle_timeout and one interval of
// silence.
func keepAliveFor(l *config.Listener) net.KeepAliveConfig {
	return net.KeepAliveConfig{
		Enable:   true,
		Idle:     l.IdleTimeout + keepAliveInterval,
		Interval: keepAliveInterval,
		Count:    keepAliveCount,
	}
}

// setKeepAlive sets keepAliveFor(l) on c when it is a TCP connection
// (listenTCP accepts them without); an error leaves c without keep-alive,
// which idle_timeout covers.
func setKeepAlive(c net.Conn, l *config.Listener) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetKeepAliveConfig(keepAliveFor(l))
	}
}
