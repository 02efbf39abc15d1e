package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/spillway-lb/spillway/internal/testkit"
	"github.com/spillway-lb/spillway/internal/topology"
)

// pageRegion is one row of the status page's waterfall as the browser
// shows it.
type pageRegion struct {
	Region string `json:"region"`
	Share  string `json:"share"`  // "75.0%"
	Reason string `json:"reason"` // "nearest", "spill: health", ... or "no traffic"
	Health string `json:"health"` // "3/8"
}

// readWaterfall is the script that reads the waterfall rows of the first
// service from the DOM, in the order the page shows them.
const readWaterfall = `[...document.querySelectorAll('section.waterfall tbody tr[data-region]')].map(r => ({
	region: r.dataset.region,
	share: r.querySelector('td.share').textContent,
	reason: r.querySelector('td.reason').textContent,
	health: r.querySelector('td.health .count').textContent,
}))`

// percent parses the page's "75.0%" as 0.75.
func percent(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	return v / 100, err
}

// waitPage polls the page of tab ctx until check accepts the waterfall it
// shows, or timeout passes; it returns how long that took.
func waitPage(ctx context.Context, timeout time.Duration, check func([]pageRegion) error) (time.Duration, error) {
	start := time.Now()
	err := topology.WaitFor(ctx, timeout, func() (bool, error) {
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]pageRegion](readWaterfall))
		if err == nil {
			err = check(rows)
		}
		if err != nil {
			return false, fmt.Errorf("%w (page shows %+v)", err, rows)
		}
		return true, nil
	})
	return time.Since(start), err
}

// row returns the row of region, or an error.
func row(rows []pageRegion, region string) (pageRegion, error) {
	for _, r := range rows {
		if r.Region == region {
			return r, nil
		}
	}
	return pageRegion{}, fmt.Errorf("no row for %s", region)
}

// spillTimeout bounds how long the page may take to show a change of
// health: the control plane needs two failed checks 500 ms apart, the gfe
// a snapshot push and a plan (250 ms), and the page a poll (1 s), about
// 3 s on a quiet machine. The bound is generous for a busy one.
const spillTimeout = 20 * time.Second

// TestStatusPageInBrowser loads the status page of the demo deployment's
// lon gfe in a real headless Chromium, makes 5 of eu-west's 8 instances
// fail their health checks, and checks that the page, without being
// reloaded, shows lon's waterfall change from all in eu-west (nearest) to
// 75% there and 25% spilled to us-east for health (rule 5: h = 3/8 keeps
// 2h); that the control plane's page shows the five unhealthy instances;
// and that lon's page shows all in eu-west again once they recover.
func TestStatusPageInBrowser(t *testing.T) {
	c := startCluster(t, topology.Demo(73))
	ctx := testkit.Browser(t)
	consoleErrors := testkit.ConsoleErrors(ctx)
	lon := c.GFE("lon")

	l := c.StartLoad(map[string]float64{"nyc": 120, "lon": 80, "tokyo": 60})
	defer l.Stop()

	resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(lon.Admin+"/"))
	if err != nil {
		t.Fatalf("load %s/: %v", lon.Admin, err)
	}
	if csp, _ := resp.Headers["Content-Security-Policy"].(string); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("page's Content-Security-Policy = %q, want script-src 'self'", csp)
	}
	// A mark that a reload would wipe: the page must update in place.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.spillwayMark = 'loaded once'`)); err != nil {
		t.Fatal(err)
	}

	took, err := waitPage(ctx, convergeTimeout, allInEUWest)
	if err != nil {
		t.Fatalf("page never showed lon all in eu-west: %v", err)
	}
	t.Logf("page showed lon all in eu-west after %v", took.Round(time.Millisecond))

	if err := topology.SetHealthy(context.Background(), false, c.Instances["eu-west"][:5]...); err != nil {
		t.Fatal(err)
	}
	took, err = waitPage(ctx, spillTimeout, func(rows []pageRegion) error {
		eu, err := row(rows, "eu-west")
		if err != nil {
			return err
		}
		us, err := row(rows, "us-east")
		if err != nil {
			return err
		}
		euShare, err1 := percent(eu.Share)
		usShare, err2 := percent(us.Share)
		switch {
		case err1 != nil || err2 != nil:
			return fmt.Errorf("shares not numbers: %v, %v", err1, err2)
		case eu.Health != "3/8":
			return fmt.Errorf("eu-west health %s, want 3/8", eu.Health)
		case !within(euShare, 0.75, 0.02) || eu.Reason != "nearest":
			return fmt.Errorf("eu-west %.3f (%s), want 0.75 ±0.02 nearest", euShare, eu.Reason)
		case !within(usShare, 0.25, 0.02) || us.Reason != "spill: health":
			return fmt.Errorf("us-east %.3f (%s), want 0.25 ±0.02 spill: health", usShare, us.Reason)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("page did not show the spill within %v: %v", spillTimeout, err)
	}
	t.Logf("page showed lon's 25%% spill for health %v after the instances failed", took.Round(time.Millisecond))

	mark, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.spillwayMark || ''`))
	if err != nil || mark != "loaded once" {
		t.Errorf("page was reloaded (mark %q, %v): it must update in place", mark, err)
	}
	// The global plan shows every site's row: lon's cell for us-east
	// carries the same 25% ±2.
	cell, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('section.plan tr[data-site="lon"] td[data-region="us-east"] small').textContent`))
	if sh, perr := percent(strings.Trim(cell, "()")); err != nil || perr != nil || !within(sh, 0.25, 0.02) {
		t.Errorf("global plan cell lon → us-east = %q (%v, %v), want (25.0%%) ±2", cell, err, perr)
	}
	screenshot(t, ctx, "status-page-gfe-lon.png")

	// The control plane's page shows the five failing instances.
	if err := chromedp.Do(ctx, chromedp.Navigate(c.Spec.ControlPlaneAdmin(0)+"/")); err != nil {
		t.Fatal(err)
	}
	const unhealthy = `[...document.querySelectorAll('section.groups tbody tr[data-group^="eu-west"]')].reduce((n, r) => n + Number(r.children[2].textContent), 0)`
	if err := topology.WaitFor(ctx, 10*time.Second, func() (bool, error) {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](unhealthy))
		return n == 5, err
	}); err != nil {
		n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](unhealthy))
		t.Errorf("control plane page shows %d unhealthy eu-west instances, want 5: %v", n, err)
	}
	screenshot(t, ctx, "status-page-controlplane.png")

	// Healthy again: lon's page shows all its traffic back in eu-west.
	if err := topology.SetHealthy(context.Background(), true, c.Instances["eu-west"][:5]...); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(lon.Admin+"/")); err != nil {
		t.Fatal(err)
	}
	if took, err = waitPage(ctx, spillTimeout, allInEUWest); err != nil {
		t.Errorf("page did not show lon back in eu-west within %v: %v", spillTimeout, err)
	}
	t.Logf("page showed lon back in eu-west %v after the instances recovered", took.Round(time.Millisecond))
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("the pages reported %d errors (CSP violations, exceptions): %q", len(errs), errs)
	}
}

// allInEUWest accepts lon's waterfall when it sends all its traffic to
// eu-west, its nearest region, with all 8 instances healthy.
func allInEUWest(rows []pageRegion) error {
	if len(rows) != 3 || rows[0].Region != "eu-west" {
		return fmt.Errorf("want 3 regions, eu-west (8 ms) first")
	}
	r := rows[0]
	if sh, err := percent(r.Share); err != nil || sh < 0.99 || r.Reason != "nearest" || r.Health != "8/8" {
		return fmt.Errorf("eu-west: want ≥ 99%% nearest with 8/8 healthy")
	}
	return nil
}

// screenshot saves a PNG of the whole page of tab ctx as name in the
// test's artifact directory (kept with go test -artifacts) and logs where.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (kept with go test -artifacts)", path)
}
