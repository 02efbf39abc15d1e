package probe

import (
	"context"
	"net"

	"github.com/spillway-lb/spillway/lb/health"
)

// TCP passes when a TCP connection to the target opens; it closes the
// connection at once without sending anything. TCP is immutable and safe for
// concurrent use.
type TCP struct {
	dialer *net.Dialer
}

var _ health.Prober = (*TCP)(nil)

// NewTCP returns a TCP prober.
func NewTCP(opts Options) *TCP {
	d := opts.Dialer
	if d == nil {
		d = &net.Dialer{}
	}
	return &TCP{dialer: d}
}

// Probe connects to t and closes the connection.
func (p *TCP) Probe(ctx context.Context, t health.Target) health.Result {
	conn, err := p.dialer.DialContext(ctx, "tcp", t.Addr)
	if err != nil {
		return failure(ctx, "tcp", t, err)
	}
	conn.Close()
	return health.Result{}
}
