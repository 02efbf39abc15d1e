package quotabench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Consumer is one consumer of the benchmark: its project, API key and
// limit per minute.
type Consumer struct {
	Project, Key string
	Limit        int64
}

// Consumers returns n consumers (n >= 2) whose limits run from 60 to
// 6,000 a minute, limit_i = 60 · 100^((i/(n-1))^8): most are small and a
// few large, so that ten times every limit stays a load one machine can
// offer (for n = 100: 28,959 a minute in all, 4,826 requests/s offered at
// 10×).
func Consumers(n int) []Consumer {
	out := make([]Consumer, n)
	for i := range out {
		x := float64(i) / float64(n-1)
		out[i] = Consumer{
			Project: fmt.Sprintf("c%03d", i),
			Key:     fmt.Sprintf("bench-key-%03d", i),
			Limit:   int64(math.Round(60 * math.Pow(100, math.Pow(x, 8)))),
		}
	}
	return out
}

// Tally is what one consumer got in one window.
type Tally struct {
	Admitted, Limited, Other int64
}

// load sends each consumer's requests to every gfe at once, open loop at
// rate[consumer]/len(gfes) per gfe, and tallies the answers per consumer
// and Unix-minute window (of the midpoint of each request).
type load struct {
	mu     sync.Mutex
	tally  map[string]map[int64]*Tally // project → window → tally
	lat    []time.Duration             // latencies of admitted requests since the last take
	sent   int64
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// startLoad starts the load: for every consumer and gfe URL, enough
// senders for perGFE[i] requests/s each.
func startLoad(client *http.Client, urls []string, consumers []Consumer, perSecond func(Consumer) float64) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{tally: map[string]map[int64]*Tally{}, cancel: cancel}
	for _, c := range consumers {
		l.tally[c.Project] = map[int64]*Tally{}
		rate := perSecond(c) / float64(len(urls))
		// One sender per 100 requests/s: each waits for its answers.
		senders := int(math.Ceil(rate / 100))
		for _, u := range urls {
			for s := range senders {
				l.done.Add(1)
				go l.send(ctx, client, u, c, rate/float64(senders), time.Duration(s)*time.Millisecond)
			}
		}
	}
	return l
}

// send sends c's requests to url at rate per second until ctx ends; late
// requests are sent at once (catching up), so the offered count holds.
func (l *load) send(ctx context.Context, client *http.Client, url string, c Consumer, rate float64, offset time.Duration) {
	defer l.done.Done()
	gap := time.Duration(float64(time.Second) / rate)
	next := time.Now().Add(offset)
	for {
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			return
		}
		next = next.Add(gap)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/x", nil)
		req.Header.Set("X-Api-Key", c.Key)
		start := time.Now()
		code := 0
		var date string
		if resp, err := client.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			code, date = resp.StatusCode, resp.Header.Get("Date")
		} else if ctx.Err() != nil {
			return
		}
		end := time.Now()
		// The window the request was decided in: its answer's Date (to
		// the second, stamped by the gfe for a 429 and by the backend
		// right after admission for a 200), not the client's clock, which
		// a queue at a busy gfe would shift by its wait.
		w := start.Add(end.Sub(start)/2).Unix() / 60
		if t, err := http.ParseTime(date); err == nil {
			w = t.Unix() / 60
		}
		l.mu.Lock()
		l.sent++
		t := l.tally[c.Project][w]
		if t == nil {
			t = &Tally{}
			l.tally[c.Project][w] = t
		}
		switch code {
		case http.StatusOK:
			t.Admitted++
			l.lat = append(l.lat, end.Sub(start))
		case http.StatusTooManyRequests:
			t.Limited++
		default:
			t.Other++
		}
		l.mu.Unlock()
	}
}

// stop ends the load and waits for its senders.
func (l *load) stop() {
	l.cancel()
	l.done.Wait()
}

// takeLatencies returns the latencies of admitted requests since the last
// call, sorted, and forgets them.
func (l *load) takeLatencies() []time.Duration {
	l.mu.Lock()
	lat := l.lat
	l.lat = nil
	l.mu.Unlock()
	slices.Sort(lat)
	return lat
}

// others returns how many answers were neither 200 nor 429 so far.
func (l *load) others() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, ws := range l.tally {
		for _, t := range ws {
			n += t.Other
		}
	}
	return n
}

// window returns project's tally in window w.
func (l *load) window(project string, w int64) Tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.tally[project][w]; t != nil {
		return *t
	}
	return Tally{}
}
