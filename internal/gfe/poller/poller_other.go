//go:build !linux

package poller

import "net"

// Group is a set of Pollers; outside Linux there are none and Wrap
// returns connections as they are.
type Group struct{}

// Shared returns nil: outside Linux nothing is wrapped.
func Shared() (*Group, error) { return nil, nil }

// Wrap returns c.
func (g *Group) Wrap(c net.Conn) net.Conn { return c }

// Close does nothing.
func (g *Group) Close() error { return nil }

// Conn is never made outside Linux.
type Conn struct{ net.Conn }

// Release returns the connection c wraps.
func (c *Conn) Release() net.Conn { return c.Conn }
