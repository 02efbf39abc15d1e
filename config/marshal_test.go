package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustRead(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMarshalRoundTrip: Parse(Marshal(c)) == c for every valid fixture and
// example, so the effective config can be shipped to another process.
func TestMarshalRoundTrip(t *testing.T) {
	good, _ := filepath.Glob("testdata/*.good.yaml")
	examples, _ := filepath.Glob("../configs/*.yaml")
	for _, f := range append(good, examples...) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c := loadT(t, f)
			out, err := Marshal(c)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			back, err := Parse(out, "marshalled.yaml")
			if err != nil {
				t.Fatalf("Parse(Marshal(%s)): %v\n%s", f, err, out)
			}
			if diff := cmp.Diff(c, back, ignoreIndex); diff != "" {
				t.Errorf("Parse(Marshal(%s)) differs (-loaded +reparsed):\n%s", f, diff)
			}
		})
	}
}

func TestMarshalKeepsMeaningfulZeros(t *testing.T) {
	c, err := load("../configs/demo.yaml", []string{"SPILLWAY_SERVICES_0_BACKENDS_2_CAPACITY_SCALER=0"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "capacity_scaler: 0\n") {
		t.Errorf("Marshal dropped capacity_scaler: 0 (it drains; absent means 1):\n%s", out)
	}
	back, err := Parse(out, "m.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Services[0].Backends[2].CapacityScaler; got != 0 {
		t.Errorf("round trip capacity_scaler = %v, want 0", got)
	}
}
