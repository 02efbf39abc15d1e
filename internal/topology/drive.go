package topology

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/spillway-lb/spillway/internal/autoscale/controller"
	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/proc"
)

// Drive sends rates[site] requests/s to the first gfe of every site named in
// rates, all sites at once and open loop, for d, and returns each site's
// result. Requests due in the first warmup of d are sent but not recorded
// (loadgen.Config.Warmup). Each site's requests come from 16 client
// addresses of its /24, from 127.N.s.100, kept alive.
func (c *Cluster) Drive(ctx context.Context, rates map[string]float64, warmup, d time.Duration) (map[string]*loadgen.Result, error) {
	return c.drive(ctx, rates, func(_ string, cfg *loadgen.Config) {
		cfg.Duration, cfg.Warmup = d, warmup
	})
}

// DriveRecorded is Drive with every measured request recorded
// (loadgen.Result.Records), for what the counts do not tell: the latency
// of the 2xx answers alone, or which refusals were the gfe's own.
func (c *Cluster) DriveRecorded(ctx context.Context, rates map[string]float64, warmup, d time.Duration) (map[string]*loadgen.Result, error) {
	return c.drive(ctx, rates, func(_ string, cfg *loadgen.Config) {
		cfg.Duration, cfg.Warmup, cfg.Records = d, warmup, true
	})
}

// Load is load started by StartLoad. Each site's Result.Start is when its
// generator started; its Record.At count from there.
type Load struct {
	cancel context.CancelFunc
	done   chan struct{}
	res    map[string]*loadgen.Result
	err    error
}

// StartLoad sends rates[site] requests/s to the first gfe of every site
// named in rates, as Drive does, until Stop (or for at most 10 minutes),
// recording every request, so that a test can wait for a condition under
// load and then measure a window of it (loadgen.Result.Window).
func (c *Cluster) StartLoad(rates map[string]float64) *Load {
	return c.StartLoadTo(rates, nil)
}

// StartLoadTo is StartLoad with each site's load sent to url(site) (a
// host name that resolves to several gfes, say) instead of to its first
// gfe; a nil url is StartLoad.
func (c *Cluster) StartLoadTo(rates map[string]float64, url func(site string) string) *Load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.res, l.err = c.drive(ctx, rates, func(site string, cfg *loadgen.Config) {
			cfg.Duration, cfg.Records = 10*time.Minute, true
			if url != nil {
				cfg.URL = url(site)
			}
		})
	}()
	return l
}

// Stop ends the load, waits for outstanding requests and returns each
// site's result.
func (l *Load) Stop() (map[string]*loadgen.Result, error) {
	l.cancel()
	<-l.done
	return l.res, l.err
}

// drive runs one generator per site in rates with the config set(site, cfg)
// finishes, in a process of its own when the cluster has the loadgen
// binary (Options.Bins), and returns each site's result.
func (c *Cluster) drive(ctx context.Context, rates map[string]float64, set func(site string, cfg *loadgen.Config)) (map[string]*loadgen.Result, error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		out  = map[string]*loadgen.Result{}
		errs []error
	)
	for si, s := range c.Spec.Sites {
		rate, gf := rates[s.Name], c.GFE(s.Name)
		if rate <= 0 || gf == nil {
			continue
		}
		cfg := loadgen.Config{
			URL: gf.URL + "/", Rate: rate,
			Sources: loadgen.Sources(c.Spec.ClientIP(si), 16), Timeout: 5 * time.Second,
		}
		set(s.Name, &cfg)
		wg.Go(func() {
			res, err := c.RunLoadAt(ctx, s.Name, cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("load at %s: %w", s.Name, err))
				return
			}
			out[s.Name] = res
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// RunLoad runs one load generator: in a process of its own
// (loadgen.Exec) when the cluster has the loadgen binary, else in this
// process (loadgen.Run).
func (c *Cluster) RunLoad(ctx context.Context, cfg loadgen.Config) (*loadgen.Result, error) {
	return c.RunLoadAt(ctx, "", cfg)
}

// RunLoadAt runs one load generator as RunLoad does, named "loadgen-"+site
// for Options.Wrap: with a wrapper, it runs where the wrapper puts it (the
// lab's client host of the site), and it needs the loadgen binary.
func (c *Cluster) RunLoadAt(ctx context.Context, site string, cfg loadgen.Config) (*loadgen.Result, error) {
	bin := c.Bins["loadgen"]
	if bin == "" {
		if c.opts.Wrap != nil {
			return nil, errors.New("topology: RunLoadAt with Options.Wrap needs the loadgen binary")
		}
		return loadgen.Run(ctx, cfg)
	}
	bin, args := c.opts.command("loadgen-"+site, bin, nil)
	return loadgen.Exec(ctx, bin, cfg, args...)
}

// SetHealthy makes every instance in addrs pass or fail its health checks.
func SetHealthy(ctx context.Context, healthy bool, addrs ...string) error {
	for _, a := range addrs {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://%s/admin/health?healthy=%t", a, healthy), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("set health of %s: %w", a, err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("set health of %s: status %d", a, resp.StatusCode)
		}
	}
	return nil
}

// Status fetches a gfe's /status with http.DefaultClient.
func Status(ctx context.Context, gf *GFE) (*status.Status, error) {
	return StatusWith(ctx, http.DefaultClient, gf)
}

// Client returns the HTTP client the cluster's processes are reached with
// (Options.Client, or http.DefaultClient).
func (c *Cluster) Client() *http.Client { return c.opts.client() }

// Status fetches a gfe's /status with Options.Client.
func (c *Cluster) Status(ctx context.Context, gf *GFE) (*status.Status, error) {
	return StatusWith(ctx, c.opts.client(), gf)
}

// StatusWith fetches a gfe's /status with client.
func StatusWith(ctx context.Context, client *http.Client, gf *GFE) (*status.Status, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gf.Admin+"/status", nil)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st status.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("decode %s/status: %w", gf.Admin, err)
	}
	return &st, nil
}

// Autoscaler returns control plane k's (from 0) autoscaler status of
// group, from its /status with Options.Client: the zero GroupStatus but
// for Group when that replica does not run the group.
func (c *Cluster) Autoscaler(ctx context.Context, k int, group string) (controller.GroupStatus, error) {
	url := c.Spec.ControlPlaneAdmin(k) + "/status"
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.opts.client().Do(req)
	if err != nil {
		return controller.GroupStatus{}, err
	}
	defer resp.Body.Close()
	var st struct {
		Autoscaler []controller.GroupStatus `json:"autoscaler"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return controller.GroupStatus{}, fmt.Errorf("decode %s: %w", url, err)
	}
	for _, g := range st.Autoscaler {
		if g.Group == group {
			return g, nil
		}
	}
	return controller.GroupStatus{Group: group}, nil
}

// WaitFor polls cond every 100ms until it returns true or the timeout
// passes; it returns the last error cond gave.
func WaitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("condition not met within %v (last: %v)", timeout, last)
		case <-t.C:
		}
	}
}

// waitHTTP polls url with Options.Client until it answers 200, for at
// most d.
func (c *Cluster) waitHTTP(ctx context.Context, d time.Duration, url string) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if c.opts.Client == nil {
		return proc.WaitHTTP(ctx, url)
	}
	return WaitFor(ctx, d, func() (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.opts.Client.Do(req)
		if err != nil {
			return false, fmt.Errorf("waiting for %s: %w", url, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("waiting for %s: status %d", url, resp.StatusCode)
		}
		return true, nil
	})
}
