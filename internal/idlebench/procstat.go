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

// scrape returns the gfe's metrics named in names off its admin /metrics,
// each summed over its labelled series. A counter without a series yet
// reads 0; a Go runtime gauge (go_*) missing is an error.
func scrape(client *http.Client, admin string, names ...string) (map[string]float64, error) {
	resp, err := client.Get(admin + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", admin, err)
	}
	defer resp.Body.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	got := map[string]float64{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		sp := strings.LastIndexByte(l, ' ')
		if sp < 0 || strings.HasPrefix(l, "#") {
			continue
		}
		name := l[:sp]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		if !want[name] {
			continue
		}
		v, err := strconv.ParseFloat(l[sp+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %q: %w", admin, l, err)
		}
		got[name] += v
		seen[name] = true
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", admin, err)
	}
	for _, n := range names {
		if !seen[n] && strings.HasPrefix(n, "go_") {
			return nil, fmt.Errorf("metrics of %s: no %s", admin, n)
		}
	}
	return got, nil
}

// counters are what phaseCounters reads before and after a steady load.
type counters struct {
	gcs    float64
	cpu    time.Duration
	probes int64
}

// phaseCounters reads the gfe's GC count (its /metrics at admin), its
// CPU time (process pid) and the host's TCP keep-alive probes.
func phaseCounters(client *http.Client, admin string, pid int) (counters, error) {
	m, err := scrape(client, admin, gcs)
	if err != nil {
		return counters{}, err
	}
	cpu, err := cpuTime(pid)
	if err != nil {
		return counters{}, err
	}
	probes, err := keepAliveProbes()
	if err != nil {
		return counters{}, err
	}
	return counters{gcs: m[gcs], cpu: cpu, probes: probes}, nil
}

// cost is what happened between b and c, over sent requests.
func (c counters) cost(b counters, sent int64) PhaseCost {
	pc := PhaseCost{GCs: c.gcs - b.gcs, KeepAliveProbes: c.probes - b.probes}
	if sent > 0 {
		pc.CPUPerRequest = float64(c.cpu-b.cpu) / float64(time.Microsecond) / float64(sent)
	}
	return pc
}

// keepAliveProbes returns the TCP keep-alive probes the host's kernel has
// sent (TcpExt TCPKeepAlive of /proc/net/netstat).
func keepAliveProbes() (int64, error) {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return 0, fmt.Errorf("keep-alive probes: %w", err)
	}
	return parseNetstat(b, "TcpExt:", "TCPKeepAlive")
}

// parseNetstat returns field name of the section whose lines start with
// prefix in /proc/net/netstat text b (a line of names, then one of values).
func parseNetstat(b []byte, prefix, name string) (int64, error) {
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != prefix || len(values) != len(names) || values[0] != prefix {
			continue
		}
		for j, n := range names {
			if n == name {
				return strconv.ParseInt(values[j], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("/proc/net/netstat: no %s %s", prefix, name)
}
