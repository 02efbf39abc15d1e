package statuspage

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/spillway-lb/spillway/internal/testkit"
)

// hostile is a value /status could carry from a config or a peer: the page
// must show it as text.
const hostile = `<img src=x onerror="window.pwned=1">`

// gfeDoc is a gfe's /status: site lon, regions listed by name (asia-east,
// eu-west, us-east) but nearest first eu-west, us-east; asia-east unused.
const gfeDoc = `{"node": "` + `\u003cimg src=x onerror=\"window.pwned=1\"\u003e` + `", "site": "lon", "ready": true,
 "services": [{"name": "web", "policy": "waterfall", "demand_rps": 100,
  "regions": [
   {"name": "asia-east", "capacity_rps": 300, "load_rps": 50, "utilization": 0.1667, "declared_rps": 320, "effective_rps": 320, "instances": 8, "healthy": 8, "health": 1, "keep": 1},
   {"name": "eu-west", "capacity_rps": 114, "load_rps": 75, "utilization": 0.66, "declared_rps": 120, "effective_rps": 120, "instances": 8, "healthy": 3, "health": 0.375, "keep": 0.75},
   {"name": "us-east", "capacity_rps": 300, "load_rps": 225, "utilization": 0.75, "declared_rps": 320, "effective_rps": 300, "instances": 8, "healthy": 8, "health": 1, "keep": 1}],
  "sites": [
   {"name": "lon", "demand_rps": 100, "rtt_ms": {"eu-west": 8, "us-east": 35, "asia-east": 80},
    "flows": [{"region": "eu-west", "load_rps": 75, "share": 0.75, "reason": "nearest"}, {"region": "us-east", "load_rps": 25, "share": 0.25, "reason": "spill_health"}]},
   {"name": "nyc", "demand_rps": 200, "rtt_ms": {"us-east": 8}, "flows": [{"region": "us-east", "load_rps": 200, "share": 1, "reason": "nearest"}]}],
  "groups": [{"name": "eu-west-b-web", "region": "eu-west", "zone": "eu-west-b", "instances": 4, "healthy": 3, "in_flight": 7,
   "backends": [{"address": "127.0.0.1:1", "in_flight": 7, "max_concurrency": 0, "ejected": true}]}],
  "decisions": {"nearest": 10, "spill_health": 3}}],
 "control_plane": {"connected": "cp-1:7000", "serving": "v1", "pushes": 4, "acks": 1, "nacks": 3, "nacks_in_a_row": 3, "refusing": true,
  "last_nack": "snapshot.config_yaml: cp.yaml: listeners[0].fast_path: unknown field"},
 "snapshot_unknown_fields": ["tracing"]}`

// cpDoc is a control plane's /status with a quota section, as the status
// page (docs/design.md §4, §7) leaves room for.
const cpDoc = `{"node": "cp-1", "ready": true, "control_planes": ["cp-1"], "owned_groups": ["g1"],
 "health": [{"group": "g1", "address": "127.0.0.1:1", "status": "healthy"}, {"group": "g1", "address": "127.0.0.1:2", "status": "unhealthy", "detail": "` + `\u003cb\u003eboom\u003c/b\u003e` + `"}],
 "gfes": [{"id": "gfe-1", "site": "lon", "build_version": "v0.2.0 (rev 0cc1780a12b4)", "streams": 1, "acks": 2, "nacks": 0, "nacks_in_a_row": 0},
  {"id": "gfe-2", "site": "lon", "build_version": "(devel) (rev 9b376d3fdc2e)", "streams": 1, "acks": 1, "nacks": 2, "nacks_in_a_row": 2, "lagging": true,
   "dropped_fields": ["listeners[0].zero_rtt"], "last_nack": {"version": "abc-1", "error": "cp.yaml: listeners[0].fast_path: unknown field"}}],
 "lagging_gfes": ["gfe-2"],
 "quota": [{"consumer": "project:alpha", "metric": "requests", "limit": 600, "used": 42}]}`

// TestPageInBrowser loads the page over fake /status documents in a real
// headless Chromium and checks what it draws: regions in the site's RTT
// order with their shares and reasons, values from /status shown as text
// and never run, the quota section only when /status has one, and the
// "stale" marker when /status stops answering.
func TestPageInBrowser(t *testing.T) {
	var doc atomic.Pointer[string]
	var failing atomic.Bool
	mux := http.NewServeMux()
	Mount(mux)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(*doc.Load()))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx := testkit.Browser(t)
	consoleErrors := testkit.ConsoleErrors(ctx)

	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	// waitFor polls expr in the page on every DOM change until it is true.
	waitFor := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			t.Fatalf("page never showed %s (%s): %v", what, expr, err)
		}
	}

	s := gfeDoc
	doc.Store(&s)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor("the waterfall", `document.querySelectorAll('section.waterfall tbody tr').length === 3`)

	rows := eval(`[...document.querySelectorAll('section.waterfall tbody tr')].map(r =>
		[r.dataset.region, r.querySelector('.share').textContent, r.querySelector('.reason').textContent, r.querySelector('.health .count').textContent, r.querySelector('.keep').textContent].join(' ')).join('; ')`)
	if want := "eu-west 75.0% nearest 3/8 75.0%; us-east 25.0% spill: health 8/8 100.0%; asia-east 0.0% no traffic 8/8 100.0%"; rows != want {
		t.Errorf("waterfall rows = %q, want %q", rows, want)
	}
	if got, want := eval(`document.getElementById('title').textContent`), "gfe "+hostile; got != want {
		t.Errorf("title = %q, want %q shown as text", got, want)
	}
	if n := eval(`String(document.querySelectorAll('img').length) + ' ' + String(window.pwned)`); n != "0 undefined" {
		t.Errorf("images, window.pwned = %s: a value from /status became markup", n)
	}
	if got := eval(`document.querySelector('section.plan tr[data-site="nyc"] td[data-region="us-east"]').textContent`); got != "200/s (100.0%)" {
		t.Errorf("global plan nyc → us-east = %q, want 200/s (100.0%%)", got)
	}
	if got := eval(`document.querySelector('tr[data-group="eu-west-b-web"]').textContent`); !strings.Contains(got, "3/4") || !strings.Contains(got, "eu-west-b") {
		t.Errorf("group row = %q, want 3/4 healthy in eu-west-b", got)
	}
	if got := eval(`String(document.querySelectorAll('section[data-section="quota"]').length)`); got != "0" {
		t.Errorf("%s quota sections without quota in /status, want 0", got)
	}
	// A gfe refusing snapshots says so first, in red, with the error.
	if got := eval(`[document.querySelector('main > section').className, document.querySelector('section.stream [data-state]').textContent,
		getComputedStyle(document.querySelector('section.stream [data-state]')).backgroundColor,
		document.querySelector('section.stream [data-last-nack]').textContent, document.querySelector('section.stream [data-unknown]').textContent].join(' | ')`); got !=
		"card stream alarm | refusing snapshots: 3 in a row | rgb(209, 56, 61) | snapshot.config_yaml: cp.yaml: listeners[0].fast_path: unknown field | applied without 1 fields this build does not know (a newer control plane): tracing" {
		t.Errorf("stream card = %q, want it first, red, refusing 3 in a row with the error and the ignored field", got)
	}

	// A control plane's document: health and quota, and live: no reload.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.mark = 1`)); err != nil {
		t.Fatal(err)
	}
	s2 := cpDoc
	doc.Store(&s2)
	waitFor("the control plane's quota", `document.querySelectorAll('section[data-section="quota"] tbody tr').length === 1`)
	if got := eval(`document.querySelector('section[data-section="quota"] tbody tr').textContent`); got != "project:alpharequests60042" {
		t.Errorf("quota row = %q, want project:alpha requests 600 42", got)
	}
	if got := eval(`document.querySelector('tr[data-group="g1"]').textContent`); !strings.HasPrefix(got, "g1"+"1/2"+"1"+"0") {
		t.Errorf("health row = %q, want g1, 1/2 healthy, 1 unhealthy, 0 unknown", got)
	}
	if got := eval(`[...document.querySelectorAll('section.groups td.detail')].map(e => e.textContent).join('|')`); got != "|<b>boom</b>" {
		t.Errorf("detail = %q, want the markup shown as text", got)
	}
	// Which gfe runs which release, and the lagging one named in red at
	// the top.
	if got := eval(`[...document.querySelectorAll('section.gfes tbody tr')].map(r => [r.dataset.gfe, r.className, r.querySelector('.build').textContent,
		r.querySelector('.inarow').textContent, r.querySelector('.dropped').textContent].join(' ')).join('; ')`); got !=
		"gfe-1  v0.2.0 (rev 0cc1780a12b4) 0 ; gfe-2 lagging (devel) (rev 9b376d3fdc2e) 2 listeners[0].zero_rtt" {
		t.Errorf("gfe rows = %q", got)
	}
	if got := eval(`document.querySelector('main > section').className + ' | ' + document.querySelector('main > section').textContent`); got !=
		"card alarm lagging | 1 lagging gfes refusing the current snapshot (not following health changes): gfe-2" {
		t.Errorf("first section = %q, want the lagging gfes", got)
	}
	if got := eval(`String(window.mark)`); got != "1" {
		t.Errorf("window.mark = %s after the update: the page reloaded", got)
	}

	failing.Store(true)
	waitFor("the stale marker", `document.getElementById('live').classList.contains('stale')`)
	if got := eval(`document.getElementById('live').textContent`); !strings.Contains(got, "/status answered 503") {
		t.Errorf("live marker = %q, want it to say /status answered 503", got)
	}
	// The 503s are the failures this test provoked; anything else (a CSP
	// violation, an exception) is a fault of the page.
	for _, e := range consoleErrors() {
		if !strings.Contains(e, "503") {
			t.Errorf("page error: %s", e)
		}
	}
}
