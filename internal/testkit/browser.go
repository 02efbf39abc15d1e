package testkit

import (
	"context"
	"iter"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// BrowserTimeout bounds a Browser's whole life: starting Chromium, every
// page load and every poll of the DOM. A headless Chromium starts in about
// a second on an idle machine and several while two cores are busy; the
// bound costs nothing when things are fast.
const BrowserTimeout = 3 * time.Minute

// Browser starts a headless Chromium for t, installing Debian's chromium
// package first when it is missing (EnsureTools), and returns the chromedp
// context of its first tab. The browser stops when t ends or after
// BrowserTimeout. It runs with --no-sandbox when root (Chromium's sandbox
// refuses root), no proxy (tests reach loopback only) and a 1440×1000
// window, so screenshots look like a laptop's.
func Browser(t testing.TB) context.Context {
	t.Helper()
	if err := EnsureTools(map[string]string{"chromium": "chromium"}); err != nil {
		t.Fatalf("headless browser: %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath("chromium"),
		chromedp.NoFirstRun,
		chromedp.Flag("no-proxy-server", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1440, 1000),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	ctx, cancelTimeout := context.WithTimeout(context.Background(), BrowserTimeout)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		cancelTimeout()
	})
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatalf("start headless chromium: %v", err)
	}
	return bctx
}

// ConsoleErrors collects, from now on, the errors the page of tab ctx (a
// Browser context) reports: uncaught exceptions, console.error calls and
// browser log entries of level error, such as a Content-Security-Policy
// violation or a failed fetch. The returned func returns those seen so
// far, each as the console shows it. Collection stops when ctx ends.
func ConsoleErrors(ctx context.Context) func() []string {
	var (
		mu   sync.Mutex
		errs []string
	)
	msgs := chromedp.Console(ctx)
	go collectConsole(msgs, &mu, &errs)
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(errs)
	}
}

// collectConsole appends every error-level message of msgs to *errs; a
// named function so stacks say what it is.
func collectConsole(msgs iter.Seq2[chromedp.ConsoleMessage, error], mu *sync.Mutex, errs *[]string) {
	for m, err := range msgs {
		if err != nil {
			return
		}
		if m.IsException() || m.Type == "error" {
			mu.Lock()
			*errs = append(*errs, m.String())
			mu.Unlock()
		}
	}
}
