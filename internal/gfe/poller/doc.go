// Package poller wakes goroutines waiting to read their sockets in the
// order the kernel saw the sockets become readable: first ready, first
// woken.
//
// # Why
//
// Go's network poller hands out the goroutines of one poll newest first
// (runtime.netpoll pushes each onto the head of a list, and the scheduler
// runs the list from its head). A proxy at saturation polls rarely, so one
// poll returns most of its connections, and the request whose bytes came
// first in it is served last: the tail of its latency widens for nothing
// (BENCHMARKS.md §4, "Where the p99 goes"; bench/netpoll-order.sh measures
// the same gfe on a runtime that keeps the kernel's order). The order
// belongs to the runtime, so this package keeps an epoll instance of its
// own beside it, for the sockets of the gfe's HTTP/1.1 fast path.
//
// # How
//
// A Poller is one epoll instance and one goroutine. Wrap registers a
// socket with a Poller, edge-triggered (EPOLLIN), and returns a Conn whose
// Read, when the previous read found the socket drained (it returned less
// than asked), first waits on a channel of its own for the Poller to
// report an arrival, then reads through the net.Conn as before. The
// Poller's goroutine parks in Go's poller on the epoll descriptor itself,
// so it takes no thread while idle; when that descriptor turns readable it
// collects the ready sockets in the kernel's order and wakes their readers
// in that order (Go's scheduler runs the goroutine woken last first, so it
// wakes the first one last). A report that comes while nobody waits stays
// in the channel for the next wait. A reader that waits first never reads
// a drained socket only to find nothing: the two reads per request that
// returned EAGAIN through net are gone, and no system call takes their
// place (the registration stays for the connection's life).
//
// # Only when it pays
//
// Waking a reader from a Poller's goroutine costs a goroutine switch that
// Go's poller does not, and when a P is idle, a thread woken to look for
// work: at low load on several cores that is more CPU per request and a
// slower answer, for an order that does not matter (a poll then returns
// one socket or two). So a Group turns its Pollers on only while the
// process's goroutines queue for a P: every SampleEvery it reads the
// runtime's /sched/latencies:seconds, and it turns on when at least half
// of the interval's goroutines waited 50 µs or more from runnable to
// running, off when fewer than half waited 10 µs (Busy). While off, reads
// wait in Go's poller and no socket is in a Poller's epoll set (turning
// off takes each out, and wakes its waiting reader to wait in Go's
// poller instead); turning on puts each back, and registering reports the
// bytes already there. The gfe exports the state as spillway_gfe_poller_on.
//
// # Guarantees
//
//   - No wake-up is lost: every arrival after a read drained the socket is
//     reported, and registering reports bytes already there. An end of
//     file (or error) is reported once, possibly together with the last
//     bytes; from then on reads do not wait in the Poller. A wake-up may
//     be spurious (a report for bytes an earlier read took, a socket closed
//     and its slot reused): the read that follows then finds nothing and
//     waits in Go's poller, exactly as without this package.
//   - Deadlines hold as on the net.Conn: SetDeadline and SetReadDeadline
//     wake a waiting reader, whose read then fails or waits as net decides;
//     a deadline that passes while a reader waits here wakes it within
//     ExpireTick (the read that follows reports the timeout). The readers
//     waiting with a deadline are on a heap by deadline, and one timer per
//     Poller fires at the earliest: thousands of idle keep-alive
//     connections cost no CPU until their first deadline.
//   - WaitReadable waits as Read would, without a buffer, so that an
//     owner can give its buffer back while a connection idles. Park waits
//     so without a goroutine either: it arms a function that runs, in a
//     worker goroutine, exactly once, at the first of an arrival, an end
//     of file, the deadline or Close, however they race; the socket stays
//     registered, the Group on or off. Workers that finish wait for the
//     next parked connection (at most 64 do), keeping their grown stacks.
//   - Close wakes a waiting reader and removes the socket from the epoll
//     instance before the descriptor closes, so a reused descriptor number
//     never inherits the registration.
//   - Writes, and sockets that are not TCP or Unix sockets, are not
//     touched. Outside Linux, Wrap returns the connection as it is.
//
// A Conn's Read is for one goroutine at a time, as bufio.Reader uses it;
// its other methods are safe from any goroutine.
package poller
