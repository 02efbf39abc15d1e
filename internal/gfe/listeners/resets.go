package listeners

import (
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway-lb/spillway/lb/clock"
)

// The HTTP/2 reset budget of a client address, over all its connections.
// The per-connection budget (protect.go) is cut by spreading the resets
// over connections: 99 resets on each of many connections were never cut.
// So every early reset (an HTTP/2 stream the client reset before its
// answer ended) of a connection whose resets are more than half its
// streams is also charged to its client's address. The charge decays
// exponentially, halving every ClientResetHalfLife (on the injected
// clock). An address whose charge passes MaxClientEarlyResets is over its
// budget: the connection that passed it is closed, and so is every HTTP/2
// connection of the address at its next stream, which is not served (no
// routing decision, no backend request), until the charge has decayed
// below half the budget. A legitimate client cancels a few streams among
// many and is never charged; an attacker gets about MaxClientEarlyResets/2
// streams through per half-life once over (100 every 30 s by default).

// Defaults of the client reset budget (Config.MaxClientEarlyResets,
// Config.ClientResetHalfLife).
const (
	DefaultMaxClientEarlyResets = 200
	DefaultClientResetHalfLife  = 30 * time.Second
)

// maxClientEarlyResets bounds Config.MaxClientEarlyResets.
const maxClientEarlyResets = 1_000_000

// maxTrackedClients bounds the addresses the client reset budget tracks
// (about 64 B each): when full, those decayed below one reset are dropped,
// and if none has, an arbitrary one.
const maxTrackedClients = 1 << 16

// clientResets is the reset budget of client addresses. Safe for
// concurrent use.
type clientResets struct {
	// Immutable after newClientResets.
	max      float64
	halfLife time.Duration
	clk      clock.Clock

	tracked atomic.Int64 // len(by), read without mu

	mu sync.Mutex
	by map[netip.Addr]*resetCharge // guarded by mu
}

// resetCharge is an address's decaying count of early resets.
type resetCharge struct {
	v    float64   // at at
	at   time.Time // when v was last brought up to date
	over bool      // over the budget, until v decays below max/2
}

func newClientResets(max int, halfLife time.Duration, clk clock.Clock) *clientResets {
	return &clientResets{max: float64(max), halfLife: halfLife, clk: clk, by: map[netip.Addr]*resetCharge{}}
}

// decay brings c up to now.
func (cr *clientResets) decay(c *resetCharge, now time.Time) {
	if dt := now.Sub(c.at); dt > 0 {
		c.v *= math.Exp2(-float64(dt) / float64(cr.halfLife))
		c.at = now
	}
	if c.over && c.v < cr.max/2 {
		c.over = false
	}
}

// blocked reports whether address a is over its budget now. It takes no
// lock while no address has been charged.
func (cr *clientResets) blocked(a netip.Addr) bool {
	if cr.tracked.Load() == 0 {
		return false
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	c := cr.by[a]
	if c == nil {
		return false
	}
	cr.decay(c, cr.clk.Now())
	return c.over
}

// charge counts one early reset of address a and reports whether a is
// over its budget now.
func (cr *clientResets) charge(a netip.Addr) bool {
	now := cr.clk.Now()
	cr.mu.Lock()
	defer cr.mu.Unlock()
	c := cr.by[a]
	if c == nil {
		if len(cr.by) >= maxTrackedClients {
			cr.pruneLocked(now)
		}
		c = &resetCharge{at: now}
		cr.by[a] = c
		cr.tracked.Store(int64(len(cr.by)))
	}
	cr.decay(c, now)
	c.v++
	if c.v > cr.max {
		c.over = true
	}
	return c.over
}

// pruneLocked drops the addresses decayed below one reset, or one
// arbitrary address when none has. Caller must hold cr.mu.
func (cr *clientResets) pruneLocked(now time.Time) {
	for a, c := range cr.by {
		if cr.decay(c, now); c.v < 1 && !c.over {
			delete(cr.by, a)
		}
	}
	if len(cr.by) >= maxTrackedClients {
		for a := range cr.by {
			delete(cr.by, a)
			break
		}
	}
	cr.tracked.Store(int64(len(cr.by)))
}
