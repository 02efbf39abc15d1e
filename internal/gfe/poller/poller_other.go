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

// SetMode does nothing.
func (g *Group) SetMode(Mode) {}

// On reports false.
func (g *Group) On() bool { return false }

// Turns returns 0.
func (g *Group) Turns() uint64 { return 0 }

// Close does nothing.
func (g *Group) Close() error { return nil }

// Conn is never made outside Linux.
type Conn struct{ net.Conn }

// Release returns the connection c wraps.
func (c *Conn) Release() net.Conn { return c.Conn }

// WaitReadable returns nil: a Read waits as it always does.
func (c *Conn) WaitReadable() error { return nil }

// Park reports false: the caller reads at once.
func (c *Conn) Park(*func()) bool { return false }
