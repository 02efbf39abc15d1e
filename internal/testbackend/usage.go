package testbackend

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// CPUTimeFunc returns the CPU time (user plus system) the process has used
// since it started. It must be monotonic and safe for concurrent use.
type CPUTimeFunc func() time.Duration

// ProcessCPUTime is the default CPUTimeFunc: getrusage(RUSAGE_SELF), the
// user and system time of every thread of the process. It returns 0 if the
// call fails (it does not on Linux).
func ProcessCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// usageWindow is the span that CPU cores and concurrency are averaged over.
const usageWindow = time.Second

// usageSamples is how many readings a usageMeter keeps. Readings are at
// least usageGap apart, so the ring spans at least
// (usageSamples-1)*usageGap = 1.1s, which always holds a reading at least
// usageWindow old when the instance was read at least every usageGap.
const (
	usageGap     = 100 * time.Millisecond
	usageSamples = 12
)

// usageSample is one reading of the cumulative counters the averages are
// differences of.
type usageSample struct {
	at   time.Time
	cpu  time.Duration // process CPU time
	busy float64       // concurrency integral, request-seconds (limiter.busy)
}

// usageMeter turns cumulative counters (process CPU time, the limiter's
// concurrency integral) into averages over the last second, without a
// goroutine or a timer: every reading (each load report, each admission,
// each /admin/stats) is also a sample, kept if the newest kept one is at
// least usageGap older. An average is taken between now and the reference
// sample: the newest one at least usageWindow old, or, when there is none
// (the first second, or an instance read less often than every usageGap),
// the oldest kept. So at a steady request rate the window is between 1s
// and 1.1s; after a silence it is the span since the last reading before
// the silence, over which the averages are still exact (both counters are
// cumulative). It is safe for concurrent use.
type usageMeter struct {
	cpuTime CPUTimeFunc
	busy    func(now time.Time) float64

	mu      sync.Mutex
	samples [usageSamples]usageSample // ring, samples[next-1] the newest
	next    int
	n       int // samples kept, at most usageSamples
}

// usage is what a usageMeter reading returns.
type usage struct {
	// CPUCores is the process CPU time over the window divided by the
	// window: cores in use on average.
	CPUCores float64
	// Concurrency is the average number of requests holding a slot over
	// the window.
	Concurrency float64
}

// read returns the averages at now and keeps now as a sample if due.
func (m *usageMeter) read(now time.Time) usage {
	cur := usageSample{at: now, cpu: m.cpuTime(), busy: m.busy(now)}
	m.mu.Lock()
	defer m.mu.Unlock()
	var u usage
	if m.n > 0 {
		ref := m.referenceLocked(now)
		if span := now.Sub(ref.at).Seconds(); span > 0 {
			u.CPUCores = max(cur.cpu-ref.cpu, 0).Seconds() / span
			u.Concurrency = max(cur.busy-ref.busy, 0) / span
		}
	}
	if m.n == 0 || now.Sub(m.samples[(m.next+usageSamples-1)%usageSamples].at) >= usageGap {
		m.samples[m.next] = cur
		m.next = (m.next + 1) % usageSamples
		m.n = min(m.n+1, usageSamples)
	}
	return u
}

// sample keeps now as a sample if one is due, reading the counters only
// then: what an admission does, so that a busy instance has a sample every
// usageGap without paying for a reading per request.
func (m *usageMeter) sample(now time.Time) {
	m.mu.Lock()
	due := m.n == 0 || now.Sub(m.samples[(m.next+usageSamples-1)%usageSamples].at) >= usageGap
	m.mu.Unlock()
	if due {
		m.read(now)
	}
}

// referenceLocked returns the sample an average at now starts from (see
// usageMeter). Caller must hold m.mu and m.n > 0.
func (m *usageMeter) referenceLocked(now time.Time) usageSample {
	oldest := m.samples[(m.next+usageSamples-m.n)%usageSamples]
	for k := 1; k <= m.n; k++ { // newest first
		s := m.samples[(m.next+usageSamples-k)%usageSamples]
		if now.Sub(s.at) >= usageWindow {
			return s
		}
	}
	return oldest
}

// burnCPU keeps the calling goroutine busy on one OS thread until that
// thread has used d of CPU time (CLOCK_THREAD_CPUTIME_ID), so a request
// costs d of CPU whatever else competes for the cores; under contention it
// takes longer than d of wall time. d <= 0 returns at once.
func burnCPU(d time.Duration) {
	if d <= 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	x := spinSink.Load()
	defer func() { spinSink.Store(x) }()
	start, ok := threadCPUTime()
	if !ok { // no thread clock: wall time instead
		for end := time.Now().Add(d); time.Now().Before(end); {
			x = spin(x)
		}
		return
	}
	for {
		x = spin(x)
		if now, _ := threadCPUTime(); now-start >= d {
			return
		}
	}
}

// threadCPUTime returns the CPU time of the calling OS thread.
func threadCPUTime() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

// spinSink keeps spin's results, so that its loop is not optimized away.
var spinSink atomic.Uint64

// spin does about a microsecond of arithmetic on x.
func spin(x uint64) uint64 {
	for i := range uint64(1000) {
		x = x*6364136223846793005 + i
	}
	return x
}
