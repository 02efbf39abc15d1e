//go:build linux

package poller

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ExpireTick bounds how late a reader waiting in a Poller past its read
// deadline is woken.
const ExpireTick = 10 * time.Millisecond

// maxEvents is the most ready sockets one epoll_wait returns; more are
// collected by the next, in the same round.
const maxEvents = 256

// Poller is one epoll instance and the goroutine that wakes the readers
// of its ready sockets, in the kernel's order.
type Poller struct {
	g    *Group
	epfd int
	file *os.File // owns epfd; registered with Go's poller
	rc   syscall.RawConn
	poll func(uintptr) bool // p.pollReady, made once

	// Used by the goroutine in rc.Read only.
	events [maxEvents]unix.EpollEvent
	woken  []*waiter

	mu    sync.Mutex
	slots []*waiter // guarded by mu: by slot, the epoll events' data
	free  []int32   // guarded by mu: empty slots

	expiring atomic.Bool // expireLoop runs
}

func newPoller(g *Group) (*Poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("poller: epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("poller: set non-blocking: %w", err)
	}
	p := &Poller{g: g, epfd: epfd, file: os.NewFile(uintptr(epfd), "poller")}
	// A file Go's poller cannot watch has no deadlines: then rc.Read
	// would fail instead of waiting.
	if err := p.file.SetReadDeadline(time.Time{}); err != nil {
		p.file.Close()
		return nil, fmt.Errorf("poller: epoll descriptor not pollable: %w", err)
	}
	if p.rc, err = p.file.SyscallConn(); err != nil {
		p.file.Close()
		return nil, fmt.Errorf("poller: %w", err)
	}
	p.poll = p.pollReady
	return p, nil
}

// run parks in Go's poller on the epoll descriptor and wakes the readers
// of each round of ready sockets, until the Poller is closed.
func (p *Poller) run() {
	for p.rc.Read(p.poll) == nil {
	}
}

// pollReady collects every ready socket and wakes their readers; it
// returns false so that rc.Read waits for the epoll descriptor to turn
// readable again. The readiness Go's poller reported was reset before
// this ran, so a socket ready after the last epoll_wait here is not lost.
func (p *Poller) pollReady(uintptr) bool {
	for {
		ws, full := p.ready()
		wake(ws)
		if !full {
			return false
		}
	}
}

// ready returns the readers of the sockets ready now, in the order the
// kernel reported them (epoll's ready list is first in, first out), at
// most maxEvents; full says epoll_wait returned that many, so more may be
// ready. The slice is p.woken, valid until the next call.
func (p *Poller) ready() (ws []*waiter, full bool) {
	clear(p.woken)
	p.woken = p.woken[:0]
	var n int
	for {
		var err error
		n, err = unix.EpollWait(p.epfd, p.events[:], 0)
		if err != unix.EINTR {
			break
		}
	}
	if n <= 0 {
		return nil, false
	}
	p.mu.Lock()
	for i := range n {
		if s := int(p.events[i].Fd); s < len(p.slots) && p.slots[s] != nil {
			w := p.slots[s]
			if p.events[i].Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				// An end of file or error waits behind the bytes a read
				// may still take: no later arrival will report it.
				w.ended.Store(true)
			}
			p.woken = append(p.woken, w)
		}
	}
	p.mu.Unlock()
	return p.woken, n == maxEvents
}

// wake wakes ws's readers so that Go's scheduler runs them in ws's
// order: it runs the goroutine woken last first (runnext) and the others
// in the order they were woken, so ws[0] is woken last.
func wake(ws []*waiter) {
	if len(ws) == 0 {
		return
	}
	for _, w := range ws[1:] {
		w.wake()
	}
	ws[0].wake()
}

// wrap registers c's socket with p. It looks through wrappers that have
// Unwrap() net.Conn for the socket, and wraps c itself.
func (p *Poller) wrap(c net.Conn) net.Conn {
	if pc, ok := c.(*Conn); ok {
		return pc // once is enough
	}
	inner := c
	for {
		u, ok := inner.(interface{ Unwrap() net.Conn })
		if !ok {
			break
		}
		inner = u.Unwrap()
	}
	sc, ok := inner.(syscall.Conn)
	if !ok {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	fd := -1
	if rc.Control(func(s uintptr) { fd = int(s) }) != nil || fd < 0 {
		return c
	}
	w := &waiter{p: p, fd: fd, ch: make(chan struct{}, 1)}
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		w.slot = p.free[n-1]
		p.free = p.free[:n-1]
		p.slots[w.slot] = w
	} else {
		w.slot = int32(len(p.slots))
		p.slots = append(p.slots, w)
	}
	p.mu.Unlock()
	if p.g.on.Load() {
		w.register()
	} // else setOn registers it when the Group turns on
	return &Conn{Conn: c, w: w, drained: true}
}

// live returns p's waiters.
func (p *Poller) live() []*waiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	ws := make([]*waiter, 0, len(p.slots))
	for _, w := range p.slots {
		if w != nil {
			ws = append(ws, w)
		}
	}
	return ws
}

// startExpiry makes sure expireLoop runs.
func (p *Poller) startExpiry() {
	if !p.expiring.Load() && p.expiring.CompareAndSwap(false, true) {
		go p.expireLoop()
	}
}

// expireLoop wakes, every ExpireTick, the readers waiting past their
// deadline; it stops when no reader waits with a deadline (the next one
// starts it again), so an idle Poller runs no timer.
func (p *Poller) expireLoop() {
	t := time.NewTicker(ExpireTick)
	defer t.Stop()
	for range t.C {
		if p.expire(time.Now()) {
			continue
		}
		p.expiring.Store(false)
		// A reader that began waiting after expire looked saw the loop
		// running and did not start another: look once more.
		if !p.expire(time.Now()) || !p.expiring.CompareAndSwap(false, true) {
			return
		}
	}
}

// expire wakes the readers waiting with a deadline at or before now, and
// reports whether any reader waits with a deadline.
func (p *Poller) expire(now time.Time) bool {
	t := now.UnixNano()
	any := false
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.slots {
		if w == nil || !w.waiting.Load() {
			continue
		}
		dl := w.deadline.Load()
		if dl == 0 {
			continue
		}
		any = true
		if t >= dl {
			w.wake()
		}
	}
	return any
}

// release empties slot s.
func (p *Poller) release(s int32) {
	p.mu.Lock()
	p.slots[s] = nil
	p.free = append(p.free, s)
	p.mu.Unlock()
}

// waiter is one socket's registration with a Poller.
type waiter struct {
	p    *Poller
	fd   int
	slot int32
	// ch holds a wake-up: the socket had an arrival (or its deadline
	// changed, or it is released) since the last wait took one.
	ch chan struct{}

	waiting  atomic.Bool  // a reader waits on ch
	deadline atomic.Int64 // the socket's read deadline, Unix ns; 0: none
	gone     atomic.Bool  // released
	ended    atomic.Bool  // the peer closed its side, or the socket failed

	mu    sync.Mutex
	added bool // guarded by mu: fd is in the epoll set
}

// register puts w's socket in its epoll set, edge-triggered: a report for
// every arrival, and one at once for bytes already there, so nothing is
// armed before each wait.
func (w *waiter) register() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.added || w.gone.Load() {
		return
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: w.slot}
	w.added = unix.EpollCtl(w.p.epfd, unix.EPOLL_CTL_ADD, w.fd, &ev) == nil
}

// unregister takes w's socket out of its epoll set.
func (w *waiter) unregister() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.added {
		unix.EpollCtl(w.p.epfd, unix.EPOLL_CTL_DEL, w.fd, nil)
		w.added = false
	}
}

// wake wakes w's reader, if any, or leaves a wake-up for its next wait.
func (w *waiter) wake() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// wait waits until w's socket had an arrival since the last wait, its
// deadline passes, or w is released, its deadline changed or its Group
// turned off. It returns at once when the deadline has passed, w was
// released, the peer closed its side (the next read finds the end of
// file, and nothing would report it again) or the Group is off.
func (w *waiter) wait() {
	w.waiting.Store(true)
	defer w.waiting.Store(false)
	if w.gone.Load() || w.ended.Load() || !w.p.g.on.Load() {
		return
	}
	if dl := w.deadline.Load(); dl != 0 {
		if time.Now().UnixNano() >= dl {
			return
		}
		w.p.startExpiry()
	}
	<-w.ch
}

// setDeadline records t, the socket's new read deadline, and wakes a
// waiting reader so that its read sees it.
func (w *waiter) setDeadline(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = max(t.UnixNano(), 1)
	}
	w.deadline.Store(ns)
	if w.waiting.Load() {
		w.wake()
	}
}

// release takes w's socket out of the epoll set, before it closes, and
// wakes a waiting reader. Further waits return at once.
func (w *waiter) release() {
	if w.gone.CompareAndSwap(false, true) {
		w.unregister()
		w.p.release(w.slot)
	}
	if w.waiting.Load() {
		w.wake()
	}
}

// Conn is a connection whose reads, after one found its socket drained,
// wait in a Poller for it to turn readable before they read.
type Conn struct {
	net.Conn
	w *waiter
	// drained says the last read returned less than asked. Read's
	// goroutine only.
	drained bool
}

// Read reads into b, first waiting in the Poller when the last read
// drained the socket.
func (c *Conn) Read(b []byte) (int, error) {
	if c.drained && len(b) > 0 && c.w.p.g.on.Load() {
		c.w.wait()
	}
	n, err := c.Conn.Read(b)
	c.drained = err == nil && n < len(b)
	return n, err
}

// SetDeadline sets the connection's deadlines; a reader waiting in the
// Poller wakes and reads under the new one.
func (c *Conn) SetDeadline(t time.Time) error {
	err := c.Conn.SetDeadline(t)
	c.w.setDeadline(t)
	return err
}

// SetReadDeadline sets the read deadline as SetDeadline does.
func (c *Conn) SetReadDeadline(t time.Time) error {
	err := c.Conn.SetReadDeadline(t)
	c.w.setDeadline(t)
	return err
}

// Close takes the socket out of its Poller, waking a waiting reader, and
// closes the connection.
func (c *Conn) Close() error {
	c.w.release()
	return c.Conn.Close()
}

// Release takes the socket out of its Poller and returns the connection
// c wraps, for an owner that reads it without c.
func (c *Conn) Release() net.Conn {
	c.w.release()
	return c.Conn
}

// Unwrap returns the connection c wraps.
func (c *Conn) Unwrap() net.Conn { return c.Conn }
