package refdoc

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/proc"
)

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := proc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// checkPage fails t when the committed page differs from want.
func checkPage(t *testing.T, root, name, want string) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(root, "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(got), want); d != "" {
		t.Errorf("docs/%s is not what the code gives now; run go run ./cmd/refdoc and commit it (-committed +generated):\n%s", name, d)
	}
}

// TestConfigPageUpToDate: docs/config.md is what package config's schema,
// defaults, validator and doc comments give.
func TestConfigPageUpToDate(t *testing.T) {
	root := moduleRoot(t)
	page, err := ConfigPage(root)
	if err != nil {
		t.Fatal(err)
	}
	checkPage(t, root, "config.md", page)
	for _, k := range config.Schema() {
		if !strings.Contains(page, "`"+k.Path+"`") {
			t.Errorf("docs/config.md does not name %s", k.Path)
		}
	}
}

// TestCLIPageUpToDate: docs/cli.md is what the four binaries' --help say.
func TestCLIPageUpToDate(t *testing.T) {
	root := moduleRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	helps, err := Helps(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	checkPage(t, root, "cli.md", CLIPage(helps))
	for _, h := range helps {
		if n := len(ParseHelp(h.Text)); n < 3 {
			t.Errorf("%s: %d flags parsed from --help, want at least 3:\n%s", h.Name, n, h.Text)
		}
	}
}

// TestUnitsCoverSchema: every number of the schema that is not a duration
// has a unit, and every unit names a number of the schema.
func TestUnitsCoverSchema(t *testing.T) {
	numbers := map[string]bool{}
	for _, k := range config.Schema() {
		kind := k.Type.Kind()
		if (kind == reflect.Int || kind == reflect.Int64 || kind == reflect.Float64) && k.Type != reflect.TypeFor[time.Duration]() {
			numbers[k.Path] = true
			if _, ok := units[k.Path]; !ok {
				t.Errorf("%s: a number without a unit in refdoc.units", k.Path)
			}
		}
	}
	for p := range units {
		if !numbers[p] {
			t.Errorf("refdoc.units has %s, which is not a number of the schema", p)
		}
	}
}

// TestExamplesAreOneValidConfig: the page's examples, one per top-level
// section in schema order, form a configuration Load accepts (with the
// cookie secret file the services example names).
func TestExamplesAreOneValidConfig(t *testing.T) {
	var top, keys []string
	var all strings.Builder
	for _, k := range config.Schema() {
		if k.Depth == 0 {
			top = append(top, k.Path)
		}
	}
	for _, ex := range examples {
		keys = append(keys, ex.key)
		all.WriteString(ex.yaml)
	}
	if !slices.Equal(keys, top) {
		t.Errorf("examples for %q, want one per top-level section %q", keys, top)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "cookie"), []byte(strings.Repeat("s", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "examples.yaml")
	if err := os.WriteFile(path, []byte(all.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatalf("the examples together: %v", err)
	}
	if len(c.Regions) != 2 || len(c.Services) != 2 || len(c.Listeners) != 3 || len(c.Quota.Metrics) != 1 {
		t.Errorf("the examples together: %d regions, %d services, %d listeners, %d quota metrics; want 2, 2, 3, 1",
			len(c.Regions), len(c.Services), len(c.Listeners), len(c.Quota.Metrics))
	}
}

// TestProbe: what the validator says of out-of-range values, for keys of
// each kind: plain ranges, requirements, enumerations and keys that apply
// to one protocol only.
func TestProbe(t *testing.T) {
	byPath := map[string]config.SchemaKey{}
	for _, k := range config.Schema() {
		byPath[k.Path] = k
	}
	for _, tc := range []struct {
		path string
		want verdict
	}{
		{"services[].feedback.confirm_utilization", verdict{bounds: []string{"must be in [0, 2]"}}},
		{"services[].health_check.interval", verdict{bounds: []string{"must be > 0", "must be at most 1h"}}},
		{"regions[].zones[].groups[].autoscaling.min_instances", verdict{bounds: []string{"must be in 0..max_instances"}}},
		{"listeners[].port", verdict{required: "required", bounds: []string{"must be in 1..65535"}}},
		{"listeners[].protocol", verdict{required: "required", values: []string{"http", "https", "tcp"}}},
		{"listeners[].max_connections", verdict{only: []string{"protocol tcp"}, bounds: []string{"must be in 1..1000000"}}},
		{"services[].session_affinity.header_name", verdict{only: []string{"type header"}, required: "required for type header", bounds: []string{"must be an HTTP token"}}},
		{"services[].backends[].group", verdict{required: "required", bounds: []string{"must name a known instance group"}}},
		{"quota.metrics[].unit", verdict{values: []string{"requests", "bytes"}}},
		{"regions[].zones[].groups[].instances[].demoted", verdict{}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			k, ok := byPath[tc.path]
			if !ok {
				t.Fatalf("no key %s in config.Schema()", tc.path)
			}
			got, err := probe(k)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(verdict{})); d != "" {
				t.Errorf("probe(%s) (-want +got):\n%s", tc.path, d)
			}
		})
	}
}

// TestParseHelp reads both flag layouts: spf13/pflag's and Go's flag
// package's.
func TestParseHelp(t *testing.T) {
	for _, tc := range []struct {
		name, help string
		want       []Flag
	}{
		{"pflag", `Usage of gfe:
      --access-log                     log every request
      --admin string                   admin listener (default "127.0.0.1:9090")
      --damping float                  fraction (1 = no damping) (default 0.5)
  -v, --verbose                        more
`, []Flag{
			{Name: "access-log", Usage: "log every request"},
			{Name: "admin", Type: "string", Default: "127.0.0.1:9090", Usage: "admin listener"},
			{Name: "damping", Type: "float", Default: "0.5", Usage: "fraction (1 = no damping)"},
			{Name: "verbose", Usage: "more"},
		}},
		{"flag", `Usage of devpki:
  -days int
    	validity of new certificates, days (the CA's: 10 years) (default 30)
  -delay [REGION:]CIDR=RTT
    	emulated RTT
    	(repeatable)
  -version
    	print the version and exit
`, []Flag{
			{Name: "days", Type: "int", Default: "30", Usage: "validity of new certificates, days (the CA's: 10 years)"},
			{Name: "delay", Type: "[REGION:]CIDR=RTT", Usage: "emulated RTT (repeatable)"},
			{Name: "version", Usage: "print the version and exit"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, ParseHelp(tc.help)); d != "" {
				t.Errorf("ParseHelp (-want +got):\n%s", d)
			}
		})
	}
}
