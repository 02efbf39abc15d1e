//go:build linux

package poller

// Park arranges for fn to run, in a goroutine of its own, once c has
// what WaitReadable waits for (an arrival after the last read drained the
// socket, an end of file or error, the read deadline passing, or Close or
// Release), and returns at once: while it waits, no goroutine holds c,
// only its registration in a Poller (its deadline on the Poller's heap,
// under the one timer). It reports false, and arms nothing, when it finds
// the wait over already (a wake-up left since the last read, and a peek
// finds bytes; the deadline passed; an end of file or Close seen), or
// cannot wait (the socket could not be registered): then the caller reads
// at once, as after WaitReadable. Bytes already there whose report has
// not come run fn at once instead.
//
// fn runs exactly once for each Park that reported true, however many of
// those events race (bytes arriving while Close runs, two arrivals); its
// goroutine may start before Park returns. The Read that follows in fn
// reads without waiting again (after a spurious wake-up it waits in Go's
// poller, as any read does), and then fails if the deadline passed or c
// was closed. Park must not be called while a Read or another wait of c
// is under way, nor again before its fn ran.
//
// A parked connection is registered whether the Group is on or off
// (registering it if the Group is off reports bytes already there), and
// stays so after fn runs: parking again costs no system call. fn runs
// on a spare worker goroutine if one waits (at most maxSpare do), else on
// a new one.
func (c *Conn) Park(fn *func()) bool {
	w := c.w
	if !c.drained || w.gone.Load() || w.ended.Load() {
		return false
	}
	// From here the Read that follows, in fn or after a false, reads
	// first, as after WaitReadable: a wake-up taken below is not waited
	// for again.
	c.drained = false
	w.idle.Store(true)
	if !w.register() {
		w.idle.Store(false)
		return false
	}
	// A wake-up left since the last wait is an arrival that the last
	// read may have taken already (two segments, one read): a peek says.
	if w.takeWake() && c.peekNow() {
		w.parkDone()
		return false
	}
	dl := w.deadline.Load()
	if dl != 0 {
		if w.p.g.clk.Now().UnixNano() >= dl {
			w.parkDone()
			return false
		}
		w.p.enlist(w, dl)
	}
	w.parked.Store(fn)
	// What came between the peek and arming left a wake-up (wake swaps
	// the armed function out first, then leaves one, then looks again):
	// take the function back and read now, unless a wake-up took it.
	if w.takeWake() || w.gone.Load() {
		if w.parked.CompareAndSwap(fn, nil) {
			w.parkDone()
			return false
		}
	}
	return true
}

// takeWake takes the wake-up left in w's channel and reports whether
// there was one.
func (w *waiter) takeWake() bool {
	select {
	case <-w.ch:
		return true
	default:
		return false
	}
}

// resume runs fn, which Park armed and a wake-up took, after undoing the
// park: w off the deadline heap, not idle, and no wake-up left (the Read
// fn makes first sees the bytes it stood for).
func (w *waiter) resume(fn func()) {
	w.parkDone()
	w.takeWake()
	fn()
}

// parkDone undoes what Park did to w. The socket stays in the epoll set,
// the Group on or off: a keep-alive connection parks again after each
// answer, and taking it out and putting it back each time were two
// system calls per request with the Group off. Turning the Group off
// takes it out while it is served; Close does.
func (w *waiter) parkDone() {
	w.p.unlist(w)
	w.idle.Store(false)
}

// job is a parked connection's function to run, and its waiter.
type job struct {
	w  *waiter
	fn func()
}

// maxSpare bounds the workers that wait for a job when none is to run.
// A worker that runs one job after another keeps its stack, grown by the
// first (a new goroutine's grows from 2 KiB, copied at each doubling:
// 7% of a gfe's CPU at 500 requests/s over parked connections); the spare
// ones hold at most maxSpare such stacks.
const maxSpare = 64

// dispatch runs w.resume(fn) on a spare worker if one waits, else on a
// new one; it never blocks (expire calls it under the Poller's lock). A
// worker woken or started last runs first, as wake's order wants (Go's
// scheduler puts both in the P's next slot).
func (g *Group) dispatch(w *waiter, fn func()) {
	select {
	case g.work <- job{w, fn}:
	default:
		g.started.Add(1)
		go g.worker(job{w, fn})
	}
}

// worker runs j, then waits for the next job while fewer than maxSpare
// workers wait, until the Group closes.
func (g *Group) worker(j job) {
	for {
		j.w.resume(j.fn)
		if g.spare.Add(1) > maxSpare {
			g.spare.Add(-1)
			return
		}
		select {
		case j = <-g.work:
			g.spare.Add(-1)
		case <-g.stop:
			g.spare.Add(-1)
			return
		}
	}
}

// peekNow reports whether a peek at c's socket finds bytes, an end of
// file or an error (what the next Read would return without waiting).
func (c *Conn) peekNow() bool {
	ready := true
	if c.rc.Control(func(fd uintptr) { ready = c.peekReady(fd) }) != nil {
		return true // closed: the read reports it
	}
	return ready
}
