package priority

// DefaultOverprovisioning is Envoy's default overprovisioning factor, in
// percent (1.4): a level counts as fully healthy while at least 100/1.4 ≈
// 71.4% of its hosts are healthy.
const DefaultOverprovisioning = 140

// Level is one priority level's host counts.
type Level struct {
	// Healthy is the number of hosts that may take traffic; Total the
	// number of hosts of the level, healthy or not. 0 <= Healthy <= Total
	// is expected; Healthy is clamped to Total.
	Healthy, Total int
}

// Health returns l's health score in percent, in [0, 100]:
// min(100, overprovisioning × Healthy / Total) with integer division, 0 for
// a level without hosts. overprovisioning is in percent (140 for Envoy's
// 1.4); a value below 100 is taken as 100 (no overprovisioning).
func Health(l Level, overprovisioning int) int {
	if l.Total <= 0 || l.Healthy <= 0 {
		return 0
	}
	overprovisioning = max(overprovisioning, 100)
	h := min(l.Healthy, l.Total)
	return int(min(100, int64(overprovisioning)*int64(h)/int64(l.Total)))
}

// Loads returns the percent of traffic each level receives by Envoy's
// priority-load rule (package doc): levels in priority order, 0 first.
// The loads are in [0, 100] and add up to 100, or are all 0 when no level
// has a healthy host. A level of health 0 receives 0. Loads allocates only
// its result.
func Loads(levels []Level, overprovisioning int) []int {
	out := make([]int, len(levels))
	total := 0
	for i, l := range levels {
		out[i] = Health(l, overprovisioning)
		total += out[i]
	}
	total = min(total, 100)
	if total == 0 {
		return out
	}
	remaining, first := 100, -1
	for i, h := range out {
		if first < 0 && h > 0 {
			first = i
		}
		out[i] = min(remaining, h*100/total)
		remaining -= out[i]
	}
	out[first] += remaining
	return out
}
