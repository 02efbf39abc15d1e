package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
)

var installMu sync.Mutex

// EnsureTools makes sure every command of tools (command name → the Debian
// package that provides it) is on PATH, installing the missing packages
// with apt-get when running as root, so that a fresh machine runs the
// README's test command without a manual step. It returns an error that
// names what is missing and how to install it when that fails (not root,
// no apt-get, no network to the package mirror). Safe for concurrent use.
func EnsureTools(tools map[string]string) error {
	installMu.Lock()
	defer installMu.Unlock()
	var pkgs []string
	for cmd, pkg := range tools {
		if _, err := exec.LookPath(cmd); err != nil && !slices.Contains(pkgs, pkg) {
			pkgs = append(pkgs, pkg)
		}
	}
	if len(pkgs) == 0 {
		return nil
	}
	slices.Sort(pkgs)
	hint := "apt-get install -y " + strings.Join(pkgs, " ")
	if os.Geteuid() != 0 {
		return fmt.Errorf("missing Debian packages %v and not root to install them: run %q", pkgs, hint)
	}
	for _, args := range [][]string{
		{"-o", "DPkg::Lock::Timeout=300", "update", "-qq"},
		append([]string{"-o", "DPkg::Lock::Timeout=300", "install", "-y", "-qq"}, pkgs...),
	} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("installing %v (apt-get %s): %w\n%s", pkgs, strings.Join(args, " "), err, out)
		}
	}
	for cmd, pkg := range tools {
		if _, err := exec.LookPath(cmd); err != nil {
			return fmt.Errorf("%s still missing after installing %s: %w", cmd, pkg, err)
		}
	}
	return nil
}
