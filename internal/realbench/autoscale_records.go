package realbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spillway-lb/spillway/internal/topology"
)

// InstanceSpan is one instance the process provider ran: from its
// "started" record to its "stopped", "killed" or "exited by itself" one.
type InstanceSpan struct {
	Name string `json:"name"`
	// Start and Stop are since the start of the load, s; Stop is -1 while
	// the instance still ran when the deployment was stopped.
	Start float64 `json:"start_s"`
	Stop  float64 `json:"stop_s"`
}

// providerLog reads the control planes' output as topology.Options.Tee
// hands it over ("cp-N | " and a JSON log line) and keeps the process
// provider's start and stop records, each timed when its line arrives:
// the provider writes the line as it starts a process and once it has
// reaped one, and the control plane's own timestamps have whole seconds
// only. Safe for concurrent use (every process writes to the Tee).
type providerLog struct {
	now  func() time.Time
	next io.Writer // nil: none

	mu    sync.Mutex
	buf   []byte
	spans map[string]*span // by instance name
	order []string
}

type span struct{ start, stop time.Time }

func newProviderLog(next io.Writer) *providerLog {
	return &providerLog{now: time.Now, next: next, spans: map[string]*span{}}
}

// Write takes whole or partial lines; it never fails on a line it cannot
// read (those are other processes' output).
func (l *providerLog) Write(b []byte) (int, error) {
	at := l.now()
	l.mu.Lock()
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.line(at, l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	l.mu.Unlock()
	if l.next != nil {
		return l.next.Write(b)
	}
	return len(b), nil
}

// providerRecord is the part of a provider log line the spans need. The
// line carries "component" twice (the autoscaler's logger, then the
// provider's); encoding/json keeps the last.
type providerRecord struct {
	Component string `json:"component"`
	Provider  string `json:"provider"`
	Instance  string `json:"instance"`
	Message   string `json:"message"`
}

// line records one line of output (under mu).
func (l *providerLog) line(at time.Time, b []byte) {
	name, rest, ok := strings.Cut(string(b), " | ")
	if !ok || !strings.HasPrefix(name, "cp-") || !strings.HasPrefix(rest, "{") {
		return
	}
	var r providerRecord
	if json.Unmarshal([]byte(rest), &r) != nil || r.Component != "provider" || r.Provider != "process" || r.Instance == "" {
		return
	}
	switch r.Message {
	case "started":
		if l.spans[r.Instance] == nil {
			l.order = append(l.order, r.Instance)
		}
		l.spans[r.Instance] = &span{start: at}
	case "stopped", "killed", "exited by itself":
		if s := l.spans[r.Instance]; s != nil && s.stop.IsZero() {
			s.stop = at
		}
	}
}

// Spans returns the instances in the order they started, timed since
// origin.
func (l *providerLog) Spans(origin time.Time) []InstanceSpan {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]InstanceSpan, 0, len(l.order))
	for _, n := range l.order {
		s := l.spans[n]
		sp := InstanceSpan{Name: n, Start: s.start.Sub(origin).Seconds(), Stop: -1}
		if !s.stop.IsZero() {
			sp.Stop = s.stop.Sub(origin).Seconds()
		}
		out = append(out, sp)
	}
	return out
}

// GroupSample is one reading of the near group's state: the gfe's view
// (/status) and the control plane's (its autoscaler status).
type GroupSample struct {
	// T is since the start of the load, s.
	T float64 `json:"t_s"`
	// Healthy is the group's healthy active instances at the gfe and
	// CapacityRPS what its plan fills the group up to.
	Healthy     int     `json:"healthy"`
	CapacityRPS float64 `json:"capacity_rps"`
	// Factor and Signal are the plan's effective-capacity factor for the
	// group and the local signal that last shrank the gfe's own.
	Factor float64 `json:"factor"`
	Signal string  `json:"signal,omitempty"`
	// Recommended, Active and Demoted are the control plane's.
	Recommended int `json:"recommended"`
	Active      int `json:"active"`
	Demoted     int `json:"demoted"`
}

// groupSampler reads the group's state every period until its context
// ends; a reading that fails is skipped.
type groupSampler struct {
	mu      sync.Mutex
	samples []groupReading
}

type groupReading struct {
	at time.Time
	s  GroupSample
}

func (g *groupSampler) run(ctx context.Context, c *topology.Cluster, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	gf := c.GFE(autoscaleSite)
	for {
		var s GroupSample
		ok := false
		if st, err := c.Status(ctx, gf); err == nil {
			for _, svc := range st.Services {
				for _, gr := range svc.Groups {
					if gr.Name == autoscaleGroup {
						s.Healthy, s.CapacityRPS, s.Factor, s.Signal, ok = gr.Healthy, gr.CapacityRPS, gr.Factor, gr.Signal, true
					}
				}
			}
		}
		if as, err := c.Autoscaler(ctx, 0, autoscaleGroup); err == nil && ok {
			s.Recommended, s.Active, s.Demoted = as.Recommended, as.Active, as.Demoted
			g.mu.Lock()
			g.samples = append(g.samples, groupReading{at: time.Now(), s: s})
			g.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Samples returns the readings timed since origin.
func (g *groupSampler) Samples(origin time.Time) []GroupSample {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]GroupSample, len(g.samples))
	for i, r := range g.samples {
		out[i] = r.s
		out[i].T = r.at.Sub(origin).Seconds()
	}
	return out
}

// pendingWaits returns the requests the gfe at admin has put in its
// pending queue so far, whatever their outcome: the samples of
// spillway_gfe_pending_wait_seconds (its _count series) over every label.
func pendingWaits(ctx context.Context, client *http.Client, admin string) (int64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s/metrics: %w", admin, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("scrape %s/metrics: %w", admin, err)
	}
	n, err := sumSeries(string(b), "spillway_gfe_pending_wait_seconds_count")
	if err != nil {
		return 0, fmt.Errorf("%s/metrics: %w", admin, err)
	}
	return int64(n), nil
}

// sumSeries returns the sum of the samples of metric (every label set) on
// a Prometheus text page.
func sumSeries(page, metric string) (float64, error) {
	var sum float64
	for line := range strings.Lines(page) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), metric)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue // another metric with this prefix, or a comment
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			return 0, fmt.Errorf("%s: no value in %q", metric, line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", metric, err)
		}
		sum += v
	}
	return sum, nil
}
