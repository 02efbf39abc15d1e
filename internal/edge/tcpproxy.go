package edge

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/spillway-lb/spillway/config"
)

// tcpProxy is the state the TCP proxy listeners of one Edge share.
type tcpProxy struct {
	e    *Edge
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

func newTCPProxy(e *Edge, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *tcpProxy {
	return &tcpProxy{e: e, dial: dial}
}

// serveTCP accepts connections on ln, a tcp listener l, until ctx ends or ln
// is closed, then returns nil. (Work in progress: connections are closed.)
func (e *Edge) serveTCP(ctx context.Context, ln net.Listener, l *config.Listener) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		c.Close()
	}
}

// observe replaces, in demand and load, the figures of every service a tcp
// listener of cs serves: in CONNECTION mode they count open connections, not
// requests per second. Called only from the planner goroutine. (Work in
// progress: no-op.)
func (x *tcpProxy) observe(now time.Time, cs *ControlState, demand map[string]float64, load map[string]map[string]float64) {
}
