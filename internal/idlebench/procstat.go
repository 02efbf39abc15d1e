package idlebench

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's utime and stime: 100
// on every Linux architecture Go runs on (the kernel fixes it for user
// space whatever its own HZ).
const clockTicks = 100

// rssBytes returns process pid's resident set (VmRSS of /proc/PID/status).
func rssBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("rss of %d: %w", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("rss of %d: VmRSS %q: %w", pid, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("rss of %d: no VmRSS in /proc/%d/status", pid, pid)
}

// cpuTime returns the CPU time process pid has used (utime + stime of
// /proc/PID/stat, every thread), to 1/clockTicks s.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu of %d: %w", pid, err)
	}
	return parseStat(b)
}

// parseStat returns utime + stime from the text of a /proc/PID/stat. The
// command name (field 2) is in parentheses and may hold spaces: fields
// are counted from its closing one.
func parseStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat %q: no command name", b)
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the name, want 13 or more", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] { // fields 14 and 15: utime, stime
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %q: %w", s, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// goStats are the Go runtime's figures a gfe's /metrics exports.
type goStats struct {
	Goroutines, HeapInuse, StackInuse float64
}

// scrapeGo reads the Go collector's gauges off a gfe's admin /metrics.
func scrapeGo(client *http.Client, admin string) (goStats, error) {
	resp, err := client.Get(admin + "/metrics")
	if err != nil {
		return goStats{}, fmt.Errorf("metrics of %s: %w", admin, err)
	}
	defer resp.Body.Close()
	var s goStats
	want := map[string]*float64{
		"go_goroutines":                 &s.Goroutines,
		"go_memstats_heap_inuse_bytes":  &s.HeapInuse,
		"go_memstats_stack_inuse_bytes": &s.StackInuse,
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	found := 0
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if p, hit := want[name]; ok && hit {
			if *p, err = strconv.ParseFloat(val, 64); err != nil {
				return goStats{}, fmt.Errorf("metrics of %s: %s %q: %w", admin, name, val, err)
			}
			found++
		}
	}
	if err := sc.Err(); err != nil {
		return goStats{}, fmt.Errorf("metrics of %s: %w", admin, err)
	}
	if found != len(want) {
		return goStats{}, fmt.Errorf("metrics of %s: %d of the Go runtime's %d gauges", admin, found, len(want))
	}
	return s, nil
}
