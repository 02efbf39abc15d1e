package docs

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPurePackagesImportNoInternal: no package under lb/ depends, directly
// or through another package, on a package of this module under internal/
// (ARCHITECTURE.md's rule: lb/* is pure and imports nothing under
// internal/). Test files are not counted: a test may drive a pure package
// with a fake clock or a real gossip cluster.
func TestPurePackagesImportNoInternal(t *testing.T) {
	const module = "github.com/spillway-lb/spillway/"
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./lb/...")
	cmd.Dir = ".." // the module's root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./lb/...: %v", err)
	}
	var pkgs int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkgs++
		for _, dep := range fields[1:] {
			if rel, ok := strings.CutPrefix(dep, module); ok && (strings.HasPrefix(rel, "internal/") || strings.Contains(rel, "/internal/")) {
				t.Errorf("%s depends on %s: lb/* must import nothing under internal/", strings.TrimPrefix(fields[0], module), rel)
			}
		}
	}
	if pkgs < 15 {
		t.Errorf("go list ./lb/... gave %d packages, want every package under lb/ (more than 15)", pkgs)
	}
}
