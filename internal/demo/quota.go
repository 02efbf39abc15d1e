package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spillway-lb/spillway/internal/topology"
)

// QuotaLimit is the demo consumers' limit, requests a minute.
const QuotaLimit = 60

// QuotaConfig is the quota section the demo adds to its config: requests
// under /api/ charge "calls", QuotaLimit a minute for each consumer.
// The story's load goes to "/", which nothing charges.
const QuotaConfig = `quota:
  metrics: [{name: calls, default_limit: 60}]
  charges: [{service: web, path_prefix: /api/, metric: calls}]
  consumers:
    - {api_key: greedy-demo-key, project: greedy}
    - {api_key: polite-demo-key, project: polite}
`

// QuotaConsumer is one consumer of the quota phase: its offered rate and
// what it got.
type QuotaConsumer struct {
	Project, Key string
	Rate         float64 // requests/s offered
	Sent, OK     int
	Limited      int // 429
	Other        int
	// Used, Limit and Source are what control plane 1's /status says.
	Used, Limit int64
	Source      string
}

// QuotaConsumers returns the phase's consumers: greedy offers 20
// requests/s (20 times its limit), polite one every two seconds.
func QuotaConsumers() []QuotaConsumer {
	return []QuotaConsumer{
		{Project: "greedy", Key: "greedy-demo-key", Rate: 20},
		{Project: "polite", Key: "polite-demo-key", Rate: 0.5},
	}
}

// RunQuota sends every consumer's requests to the first gfe for d, then
// reads control plane 1's /status.
func RunQuota(ctx context.Context, c *topology.Cluster, d time.Duration) ([]QuotaConsumer, error) {
	cs := QuotaConsumers()
	url := c.GFEs[0].URL + "/api/demo"
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range cs {
		wg.Go(func() {
			gap := time.Duration(float64(time.Second) / cs[i].Rate)
			t := time.NewTicker(gap)
			defer t.Stop()
			for end := time.Now().Add(d); time.Now().Before(end); {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				req.Header.Set("X-Api-Key", cs[i].Key)
				code := 0
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				cs[i].Sent++
				switch code {
				case http.StatusOK:
					cs[i].OK++
				case http.StatusTooManyRequests:
					cs[i].Limited++
				default:
					cs[i].Other++
				}
				mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	resp, err := http.Get("http://" + c.Spec.ControlPlaneIP(0) + ":7100/status")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st struct {
		Quota []struct {
			Consumer, Source string
			Limit, Used      int64
		} `json:"quota"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("control plane /status: %w", err)
	}
	for _, q := range st.Quota {
		for i := range cs {
			if cs[i].Project == q.Consumer {
				cs[i].Used, cs[i].Limit, cs[i].Source = q.Used, q.Limit, q.Source
			}
		}
	}
	return cs, nil
}

// PrintQuota writes the quota phase's table.
func PrintQuota(w io.Writer, i, n int, cs []QuotaConsumer, d time.Duration) {
	fmt.Fprintf(w, "\n== phase %d/%d: quota, %v\n   expect: greedy (20 req/s against %d a minute) gets 429s once its minute's quota is spent; polite (1 every 2 s) is untouched\n", i, n, d, QuotaLimit)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "consumer\toffered\tsent\tadmitted\t429\tother\tlimit/min\tcharged (cp /status)\tsource\t\n")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%.1f/s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", c.Project, c.Rate, c.Sent, c.OK, c.Limited, c.Other, c.Limit, c.Used, c.Source)
	}
	tw.Flush()
}

// CheckQuota reports the phase's expectations that failed: greedy was
// refused with 429 and admitted at most its limit in each of the (at most
// two) windows the phase spans, plus one request of credit per window;
// polite got every request through; nothing else was answered.
func CheckQuota(cs []QuotaConsumer) error {
	var errs []error
	for _, c := range cs {
		switch {
		case c.Other > 0:
			errs = append(errs, fmt.Errorf("quota: %s: %d answers neither 200 nor 429", c.Project, c.Other))
		case c.Project == "greedy" && (c.Limited == 0 || c.OK > 2*(QuotaLimit+1)):
			errs = append(errs, fmt.Errorf("quota: greedy: %d admitted, %d refused; want 429s and at most %d admitted", c.OK, c.Limited, 2*(QuotaLimit+1)))
		case c.Project == "polite" && c.OK != c.Sent:
			errs = append(errs, fmt.Errorf("quota: polite: %d of %d admitted, want all", c.OK, c.Sent))
		}
	}
	return errors.Join(errs...)
}
