package docs

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// packageCell is the first cell of a package map row: one or more
// backquoted paths, comma-separated.
var packageCell = regexp.MustCompile("^\\| (`[^|]+`) \\|")

// TestArchitectureCoversEveryPackage: every package of go list ./... has a
// row in ARCHITECTURE.md's package map, and every package a row names
// exists, so the map can neither miss a package nor keep a removed one.
func TestArchitectureCoversEveryPackage(t *testing.T) {
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = ".." // the module's root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	const module = "github.com/spillway-lb/spillway/"
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		pkgs = append(pkgs, strings.TrimPrefix(p, module))
	}
	b, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, line := range strings.Split(string(b), "\n") {
		m := packageCell.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, p := range strings.Split(m[1], ",") {
			listed = append(listed, strings.Trim(strings.TrimSpace(p), "`"))
		}
	}
	for _, p := range pkgs {
		if !slices.Contains(listed, p) {
			t.Errorf("package %s has no row in docs/ARCHITECTURE.md's package map", p)
		}
	}
	for _, p := range listed {
		if !slices.Contains(pkgs, p) {
			t.Errorf("docs/ARCHITECTURE.md lists %s, which go list ./... does not", p)
		}
	}
	if len(pkgs) < 70 {
		t.Errorf("go list ./... gave %d packages, want the whole module (more than 70)", len(pkgs))
	}
}
