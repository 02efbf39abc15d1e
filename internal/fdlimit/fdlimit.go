// Package fdlimit keeps a gfe from running out of file descriptors (the first
// security review, finding 4: SECURITY.md): it reads the process's
// RLIMIT_NOFILE (raising the soft limit to the hard one, as most servers do)
// and turns it into a Budget of descriptors that proxied client connections
// may use, leaving a reserve for everything else the process needs to keep
// working — the admin listener (/status, /metrics), gossip, the control-plane
// stream, RTT probes, log files.
//
// Client connections take from the budget when they are accepted and give
// back when they close: a tcp listener refuses (resets) a connection the
// budget cannot cover, an http listener stops accepting until the budget
// has room again, so that connections wait in the kernel's
// backlog instead of failing the whole process with EMFILE.
package fdlimit

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sync/semaphore"
)

// Limits is the process's RLIMIT_NOFILE.
type Limits struct {
	Soft, Hard uint64
}

// Raise raises the soft RLIMIT_NOFILE of the process to its hard limit
// (the Go runtime does this too at start on Linux; Raise makes it explicit
// and reports the result) and returns the limits in force afterwards.
func Raise() (Limits, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return Limits{}, fmt.Errorf("getrlimit(RLIMIT_NOFILE): %w", err)
	}
	if rl.Cur < rl.Max {
		raised := rl
		raised.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			rl = raised
		}
	}
	return Limits{Soft: rl.Cur, Hard: rl.Max}, nil
}

// DefaultReserve returns the descriptors kept out of the budget for a
// soft limit: a tenth of it, at least 256, and never more than half.
func DefaultReserve(soft uint64) uint64 {
	return min(max(soft/10, 256), soft/2)
}

// Budget counts the file descriptors client connections hold, against a
// size fixed at NewBudget. A nil *Budget is unlimited. Safe for concurrent
// use.
type Budget struct {
	size int64
	sem  *semaphore.Weighted
	used atomic.Int64
}

// NewBudget returns a Budget of size descriptors; size <= 0 returns nil
// (unlimited).
func NewBudget(size int64) *Budget {
	if size <= 0 {
		return nil
	}
	return &Budget{size: size, sem: semaphore.NewWeighted(size)}
}

// FromLimit returns the Budget of a process whose soft limit is soft,
// keeping reserve descriptors out of it (0: DefaultReserve). It returns nil
// (unlimited) when the limit is infinite.
func FromLimit(soft, reserve uint64) *Budget {
	if soft == 0 || soft >= 1<<62 {
		return nil
	}
	if reserve == 0 {
		reserve = DefaultReserve(soft)
	}
	if reserve >= soft {
		reserve = soft - 1
	}
	return NewBudget(int64(soft - reserve))
}

// Size returns the budget's size; 0 for nil (unlimited).
func (b *Budget) Size() int64 {
	if b == nil {
		return 0
	}
	return b.size
}

// Used returns the descriptors held now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// TryAcquire takes n descriptors if the budget has them, without waiting.
func (b *Budget) TryAcquire(n int64) bool {
	if b == nil {
		return true
	}
	if !b.sem.TryAcquire(n) {
		return false
	}
	b.used.Add(n)
	return true
}

// Acquire takes n descriptors, waiting for room until ctx ends.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	if b == nil {
		return nil
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		return err
	}
	b.used.Add(n)
	return nil
}

// Release gives back n descriptors taken by TryAcquire or Acquire.
func (b *Budget) Release(n int64) {
	if b == nil {
		return
	}
	b.used.Add(-n)
	b.sem.Release(n)
}

// Conn returns c holding n descriptors of b, which Close gives back (once).
// The caller took them (TryAcquire, Acquire) before it accepted c.
func Conn(c net.Conn, b *Budget, n int64) net.Conn {
	if b == nil {
		return c
	}
	return ReleaseOnClose(c, func() { b.Release(n) })
}

// ReleaseOnClose returns c calling release on its first Close, for what a
// connection holds while it is open (its descriptors, its place under a
// per-client cap). The result has Unwrap() net.Conn.
func ReleaseOnClose(c net.Conn, release func()) net.Conn {
	return &budgetConn{Conn: c, release: release}
}

// budgetConn calls release (gives its descriptors back) on its first Close.
type budgetConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *budgetConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Unwrap returns the connection under c.
func (c *budgetConn) Unwrap() net.Conn { return c.Conn }
