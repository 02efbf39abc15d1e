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
	"unsafe"

	"golang.org/x/sys/unix"
)

// ExpireTick bounds how late a reader waiting in a Poller past its read
// deadline is woken (a Poller's timer fires at the earliest deadline; the
// bound is the runtime timer's lateness on a loaded machine).
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
	// timed holds the readers waiting with a deadline, earliest first
	// (a binary heap by waiter.due); guarded by mu.
	timed []*waiter
	// kick tells expireLoop that timed has a new earliest deadline.
	kick chan struct{}
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
	p := &Poller{g: g, epfd: epfd, file: os.NewFile(uintptr(epfd), "poller"), kick: make(chan struct{}, 1)}
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
	w := &waiter{p: p, fd: fd, ch: make(chan struct{}, 1), at: -1}
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
	pc := &Conn{Conn: c, w: w, rc: rc, drained: true}
	pc.readable = pc.peekReady
	return pc
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

// expireLoop wakes the readers waiting past their deadline, at the
// earliest deadline of those that wait (one timer per Poller, armed only
// while a reader waits with a deadline: an idle Poller runs none, and
// thousands of idle connections cost it nothing until the first of their
// deadlines), until the Group closes.
func (p *Poller) expireLoop() {
	clk := p.g.clk
	t := clk.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-p.g.stop:
			return
		case <-p.kick:
		case <-t.C():
		}
		if next, ok := p.expire(clk.Now()); ok {
			// Read the clock again: waking the expired readers takes
			// time, and the timer counts from when it is reset.
			t.Reset(max(time.Duration(next-clk.Now().UnixNano()), 0))
		} else {
			t.Stop()
		}
	}
}

// expire wakes and unlists the readers whose deadline is at or before
// now, and returns the earliest deadline of those still waiting (Unix ns;
// ok false when none waits with a deadline).
func (p *Poller) expire(now time.Time) (next int64, ok bool) {
	t := now.UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.timed) > 0 && p.timed[0].due <= t {
		w := p.timed[0]
		p.unlistLocked(w)
		w.wake()
	}
	if len(p.timed) == 0 {
		return 0, false
	}
	return p.timed[0].due, true
}

// enlist lists w, which waits until deadline due (Unix ns), among the
// timed readers, and tells expireLoop when it is now the earliest.
func (p *Poller) enlist(w *waiter, due int64) {
	p.mu.Lock()
	if w.at >= 0 {
		p.unlistLocked(w)
	}
	w.due, w.at = due, int32(len(p.timed))
	p.timed = append(p.timed, w)
	p.up(int(w.at))
	first := w.at == 0
	p.mu.Unlock()
	if first {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// unlist takes w off the timed readers, if it is on them. An earlier
// deadline stays armed in expireLoop's timer, which then finds nothing
// due and rearms for the next.
func (p *Poller) unlist(w *waiter) {
	p.mu.Lock()
	if w.at >= 0 {
		p.unlistLocked(w)
	}
	p.mu.Unlock()
}

// unlistLocked removes w (listed) from the heap. p.mu is held.
func (p *Poller) unlistLocked(w *waiter) {
	i, last := int(w.at), len(p.timed)-1
	if i != last {
		p.swap(i, last)
	}
	p.timed[last] = nil
	p.timed = p.timed[:last]
	w.at = -1
	if i != last {
		p.down(i)
		p.up(i)
	}
}

// up and down restore the heap order from index i; swap swaps two
// entries and their indices. p.mu is held.
func (p *Poller) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if p.timed[parent].due <= p.timed[i].due {
			return
		}
		p.swap(i, parent)
		i = parent
	}
}

func (p *Poller) down(i int) {
	n := len(p.timed)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && p.timed[r].due < p.timed[l].due {
			m = r
		}
		if p.timed[i].due <= p.timed[m].due {
			return
		}
		p.swap(i, m)
		i = m
	}
}

func (p *Poller) swap(i, j int) {
	p.timed[i], p.timed[j] = p.timed[j], p.timed[i]
	p.timed[i].at, p.timed[j].at = int32(i), int32(j)
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
	// idle says the reader waits in WaitReadable, or the connection is
	// parked (Park): turning the Group off leaves it registered here.
	idle atomic.Bool
	// parked is the function Park armed, run (once) by the first wake-up
	// that swaps it out; nil when none is armed.
	parked atomic.Pointer[func()]
	// at is w's index in its Poller's timed heap (-1: not on it), due
	// the deadline it is listed by; guarded by the Poller's mu.
	at  int32
	due int64

	mu    sync.Mutex
	added bool // guarded by mu: fd is in the epoll set
}

// register puts w's socket in its epoll set, edge-triggered: a report for
// every arrival, and one at once for bytes already there, so nothing is
// armed before each wait.
// It reports whether the socket is in the set.
func (w *waiter) register() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.added || w.gone.Load() {
		return w.added
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: w.slot}
	w.added = unix.EpollCtl(w.p.epfd, unix.EPOLL_CTL_ADD, w.fd, &ev) == nil
	return w.added
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

// unregisterIfOff takes w's socket out of its epoll set when the Group
// is off. Under w.mu, so that a Group turning on meanwhile (it stores on,
// then registers each socket under its mu) registers it again after.
func (w *waiter) unregisterIfOff() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.added && !w.p.g.on.Load() {
		unix.EpollCtl(w.p.epfd, unix.EPOLL_CTL_DEL, w.fd, nil)
		w.added = false
	}
}

// wake runs the function Park armed, if any, in a goroutine of its own
// (Park); else it wakes w's reader, if any, or leaves a wake-up for its
// next wait. Of wake-ups that race (an arrival, the deadline, Close),
// exactly one takes an armed function.
func (w *waiter) wake() {
	if fn := w.parked.Swap(nil); fn != nil {
		w.p.g.dispatch(w, *fn)
		return
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
	// Park may have armed a function between the swap above and the
	// wake-up left: it looks for the wake-up after arming, but it may
	// have looked before the send. Take it here then; of the two, one
	// gets it.
	if fn := w.parked.Swap(nil); fn != nil {
		w.p.g.dispatch(w, *fn)
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
	dl := w.deadline.Load()
	if dl != 0 {
		if w.p.g.clk.Now().UnixNano() >= dl {
			return
		}
		w.p.enlist(w, dl)
	}
	<-w.ch
	if dl != 0 {
		w.p.unlist(w)
	}
}

// setDeadline records t, the socket's new read deadline, and wakes a
// waiting reader so that its read sees it.
func (w *waiter) setDeadline(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = max(t.UnixNano(), 1)
	}
	w.deadline.Store(ns)
	if w.waiting.Load() || w.parked.Load() != nil {
		w.wake()
	}
}

// release takes w's socket out of the epoll set, before it closes, and
// wakes a waiting reader or runs what Park armed. Further waits return at
// once.
func (w *waiter) release() {
	if w.gone.CompareAndSwap(false, true) {
		w.unregister()
		w.p.release(w.slot)
	}
	if w.waiting.Load() || w.parked.Load() != nil {
		w.wake()
	}
}

// Conn is a connection whose reads, after one found its socket drained,
// wait in a Poller for it to turn readable before they read.
type Conn struct {
	net.Conn
	w  *waiter
	rc syscall.RawConn // the socket's, for WaitReadable in Go's poller
	// readable is c.peekReady, made once (WaitReadable allocates nothing).
	readable func(uintptr) bool
	// drained says the last read returned less than asked. Read's
	// goroutine only.
	drained bool
}

// WaitReadable waits, holding no buffer, for what Read would wait for
// before reading: when the last read drained the socket, an arrival, an
// end of file or error, the read deadline, or Close; otherwise it returns
// at once. The Read that follows reads without waiting again (and, after
// a spurious wake-up, waits in Go's poller as any read does). The error is
// what ended the wait instead (a deadline passed, the connection closed):
// the Read that follows would fail with it too.
//
// A connection's owner that waits for a client's next request here can
// give its read buffer back while it waits, and take one only when bytes
// come: nginx and HAProxy hold no buffer for an idle keep-alive
// connection, net/http's server holds its 4 KiB bufio.Reader. In the
// Poller it is the wait Read makes, and costs no system call; in Go's
// poller (the Group off: the process is not busy) it peeks at the socket
// before and after the wait, one system call more than Read.
func (c *Conn) WaitReadable() error {
	if !c.drained {
		return nil
	}
	c.drained = false
	if c.w.p.g.on.Load() {
		w := c.w
		w.idle.Store(true)
		w.wait()
		w.idle.Store(false)
		if w.p.g.on.Load() {
			return nil
		}
		// The Group turned off: setOn left the socket registered, and
		// w waiting, if it saw w idle. Out of the epoll set, and what
		// woke w (bytes, most likely) is for the peek to see.
		w.unregisterIfOff()
	}
	return c.rc.Read(c.readable)
}

// peekReady is WaitReadable's RawConn.Read callback: ready when a peek
// finds bytes, an end of file or an error, which the next Read reports.
// Its first call must peek too: RawConn.Read clears the readiness Go's
// poller recorded before it calls it, so an arrival since the last read
// shows only in the socket.
func (c *Conn) peekReady(fd uintptr) bool {
	var b [1]byte
	for {
		// recvfrom(2) itself: unix.Recvfrom's address buffer escapes,
		// one allocation per call.
		_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		if errno != unix.EINTR {
			return errno != unix.EAGAIN
		}
	}
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
