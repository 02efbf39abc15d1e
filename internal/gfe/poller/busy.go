package poller

// schedLatencies is the runtime metric Busy reads.
const schedLatencies = "/sched/latencies:seconds"

// The median scheduling latency at which a Group turns on, and below
// which it turns off again.
const (
	busyOn  = 50e-6
	busyOff = 10e-6
)

// Busy reports whether goroutines queued for a P in the interval between
// two readings of /sched/latencies:seconds (bucket counts prev and cur
// over buckets): fewer than half of the interval's goroutines went from
// runnable to running in less than busyOn, or, when was (the Pollers are
// on), in less than busyOff. An interval with too few samples keeps was.
func Busy(prev, cur []uint64, buckets []float64, was bool) bool {
	if len(prev) != len(cur) || len(buckets) != len(cur)+1 {
		return was
	}
	var total uint64
	for i := range cur {
		total += cur[i] - prev[i]
	}
	if total < 16 {
		return was
	}
	limit := busyOn
	if was {
		limit = busyOff
	}
	var below uint64
	for i := range cur {
		if buckets[i+1] > limit {
			break
		}
		below += cur[i] - prev[i]
	}
	return 2*below < total
}
