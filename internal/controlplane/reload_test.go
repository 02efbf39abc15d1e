package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
)

// recordingApplier records the versions it is given and refuses those for
// which refuse returns an error.
type recordingApplier struct {
	mu     sync.Mutex
	got    []string
	refuse func(*LoadedConfig) error
}

func (a *recordingApplier) apply(l *LoadedConfig) error {
	if a.refuse != nil {
		if err := a.refuse(l); err != nil {
			return err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, l.Version)
	return nil
}

func newTestReloader(t *testing.T, path string, clk clock.Clock, a *recordingApplier) (*reloader, *metrics) {
	t.Helper()
	m := newMetrics(prometheus.NewRegistry())
	return newReloader(path, DefaultConfig().ReloadDebounce, 0, []applier{{name: "test", fn: a.apply}}, clk, testLogger(t), m), m
}

func TestReload(t *testing.T) {
	good := manyGroups(2).yaml()
	changed := strings.Replace(good, "max_rate_per_instance: 100", "max_rate_per_instance: 50", 1)
	invalid := strings.Replace(changed, "jitter: 0,", "jitter: 2,", 1)
	invalid = strings.Replace(invalid, "{group: g01,", "{group: g99,", 1)

	dir := t.TempDir()
	path := writeFile(t, dir, "cp.yaml", good)
	a := &recordingApplier{}
	r, m := newTestReloader(t, path, clock.NewFake(epoch), a)

	type step struct {
		name        string
		content     string // "" = leave the file alone
		wantChanged bool
		wantErr     []string // substrings: field paths and messages
		wantSeq     uint64   // of Current after the step
		wantFails   float64  // reload failures counted so far
		wantOK      float64  // config_last_reload_successful
	}
	steps := []step{
		{name: "initial load", wantChanged: true, wantSeq: 1, wantOK: 1},
		{name: "same file again", wantSeq: 1, wantOK: 1},
		{name: "comment only", content: "# a comment\n" + good, wantSeq: 1, wantOK: 1},
		{name: "valid change", content: changed, wantChanged: true, wantSeq: 2, wantOK: 1},
		{name: "invalid change", content: invalid, wantSeq: 2, wantFails: 1, wantErr: []string{
			"cp.yaml: services[0].health_check.jitter: ",
			`cp.yaml: services[0].backends[1].group: unknown instance group "g99"`,
		}},
		{name: "invalid file unchanged is not counted again", wantSeq: 2, wantFails: 1},
		{name: "yaml syntax error", content: "regions: [", wantSeq: 2, wantFails: 2, wantErr: []string{"cp.yaml: parsing yaml"}},
		{name: "fixed", content: good, wantChanged: true, wantSeq: 3, wantFails: 2, wantOK: 1},
	}
	var prevHash string
	for _, s := range steps {
		if s.content != "" {
			replaceFile(t, path, s.content)
		}
		gotChanged, err := r.Reload()
		if gotChanged != s.wantChanged {
			t.Errorf("%s: Reload() changed = %t, want %t (err %v)", s.name, gotChanged, s.wantChanged, err)
		}
		if len(s.wantErr) == 0 && err != nil {
			t.Errorf("%s: Reload() = %v, want no error", s.name, err)
		}
		for _, w := range s.wantErr {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: Reload() error = %v, want it to contain %q", s.name, err, w)
			}
		}
		if len(s.wantErr) > 0 && !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%s: Reload() error = %v, want it to match config.ErrInvalid", s.name, err)
		}
		cur := r.Current()
		if cur.Seq != s.wantSeq {
			t.Errorf("%s: Current().Seq = %d, want %d", s.name, cur.Seq, s.wantSeq)
		}
		if want := fmt.Sprintf("%d-%s", cur.Seq, cur.Hash); cur.Version != want || len(cur.Hash) != 12 {
			t.Errorf("%s: Current().Version = %q, want %q with a 12-digit hash", s.name, cur.Version, want)
		}
		if s.wantChanged && cur.Hash == prevHash {
			t.Errorf("%s: hash %s did not change", s.name, cur.Hash)
		}
		prevHash = cur.Hash
		if got := metricValue(t, m.reloads.WithLabelValues(resultFailure)); got != s.wantFails {
			t.Errorf("%s: reload failures = %v, want %v", s.name, got, s.wantFails)
		}
		if got := metricValue(t, m.lastReloadOK); got != s.wantOK {
			t.Errorf("%s: last reload successful = %v, want %v", s.name, got, s.wantOK)
		}
	}
	if got := metricValue(t, m.configInfo.WithLabelValues(r.Current().Version)); got != 1 {
		t.Errorf("config_info{version=%q} = %v, want 1", r.Current().Version, got)
	}
	// The applier saw exactly the accepted versions; the first and third
	// share a hash (same content) but not a version.
	if len(a.got) != 3 || a.got[0] == a.got[2] || a.got[0][2:] != a.got[2][2:] {
		t.Errorf("applier got %v, want 3 versions, the first and last with one hash", a.got)
	}
}

func TestReloadRefusedByApplier(t *testing.T) {
	good := manyGroups(1).yaml()
	path := writeFile(t, t.TempDir(), "cp.yaml", good)
	a := &recordingApplier{}
	r, m := newTestReloader(t, path, nil, a)
	if _, err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	first := r.Current()
	a.refuse = func(*LoadedConfig) error { return errors.New("no prober for you") }
	replaceFile(t, path, strings.Replace(good, "100", "7", 1))
	changed, err := r.Reload()
	if changed || err == nil || !strings.Contains(err.Error(), "apply config to test: no prober for you") {
		t.Fatalf("Reload() = %t, %v; want false and the applier's error", changed, err)
	}
	if r.Current() != first {
		t.Errorf("Current() changed after a refused config")
	}
	if got := metricValue(t, m.reloads.WithLabelValues(resultFailure)); got != 1 {
		t.Errorf("reload failures = %v, want 1", got)
	}
}

func TestReloadMissingFile(t *testing.T) {
	r, _ := newTestReloader(t, filepath.Join(t.TempDir(), "nope.yaml"), nil, &recordingApplier{})
	_, err := r.Reload()
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Reload() = %v, want fs.ErrNotExist", err)
	}
	if r.Current() != nil {
		t.Errorf("Current() = %v, want nil", r.Current())
	}
}

// TestWatchRenameReplace checks that Run picks up a file replaced by
// rename (as editors save), after the debounce, on the fake clock.
func TestWatchRenameReplace(t *testing.T) {
	good := manyGroups(1).yaml()
	dir := t.TempDir()
	path := writeFile(t, dir, "cp.yaml", good)
	clk := clock.NewFake(epoch)
	a := &recordingApplier{}
	r, _ := newTestReloader(t, path, clk, a)
	if _, err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	}()

	select {
	case <-r.Watching():
	case <-ctx.Done():
	}
	for i, rate := range []string{"51", "52"} {
		before := r.Current().Seq
		replaceFile(t, path, strings.Replace(good, "100", rate, 1))
		// Each event of the rename (re)arms the debounce timer, which
		// fires only once the fake clock passes it: advance whenever it is
		// armed, until the new config is in.
		waitUntil(t, "the new config is current", func() bool {
			if clk.Waiters() > 0 {
				clk.Advance(r.debounce)
			}
			return r.Current().Seq == before+1
		})
		if got := r.Current().Config.Services[0].Backends[0].MaxRatePerInstance; got != float64(i+51) {
			t.Errorf("change %d: max_rate_per_instance = %v, want %d", i, got, i+51)
		}
	}
}
