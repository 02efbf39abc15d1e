package deploy

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/testkit"
)

// Stamped into the binaries TestMain builds, to check --version.
const (
	testVersion  = "v0.0.0-deploytest"
	testRevision = "deadbeefcafe"
)

// bins maps a command name (gfe, controlplane, devpki, testbackend) to the binary
// deploy/build.sh built for this test run.
var bins map[string]string

// TestMain builds the release binaries once with deploy/build.sh, the
// command the Dockerfile runs.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if err := testkit.EnsureTools(map[string]string{
		"systemd-analyze": "systemd", "systemd-sysusers": "systemd", "openssl": "openssl", "nft": "nftables", "ip": "iproute2",
	}); err != nil {
		fmt.Fprintln(os.Stderr, "deploy tests:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "spillway-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "build.sh", dir, "controlplane", "gfe", "devpki", "testbackend")
	cmd.Env = append(os.Environ(), "VERSION="+testVersion, "REVISION="+testRevision)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "deploy/build.sh: %v\n%s", err, out)
		return 1
	}
	unlock, err := testkit.LockDeployments() // one package of real deployments at a time
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer unlock()
	bins = map[string]string{}
	for _, c := range []string{"controlplane", "gfe", "devpki", "testbackend"} {
		bins[c] = filepath.Join(dir, "spillway-"+c)
	}
	return m.Run()
}

// unit is a parsed systemd unit file: section, then key, then every value
// the key was given, in order (continuation lines joined).
type unit map[string]map[string][]string

// parseUnit reads a unit file the way systemd does for what these tests
// need: comments (# and ;) skipped, lines ending in a backslash continued.
func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	var pending string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if pending == "" && (line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";")) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line, pending = pending+line, ""
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("%s:%d: not KEY=VALUE in a section: %q", path, n, line)
		}
		u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// get returns the last value of key in [Service] ("" if unset).
func (u unit) get(key string) string {
	vs := u["Service"][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// flagLine matches a flag in pflag's usage: "      --tls-ca string   ...".
var flagLine = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)`)

// flagsOf returns the flags bin defines, read from its --help.
func flagsOf(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", bin, err, out)
	}
	var flags []string
	for _, l := range strings.Split(string(out), "\n") {
		if m := flagLine.FindStringSubmatch(l); m != nil {
			flags = append(flags, m[1])
		}
	}
	if !slices.Contains(flags, "version") || len(flags) < 10 {
		t.Fatalf("%s --help: found flags %q, want the daemon's flag set with --version:\n%s", bin, flags, out)
	}
	return flags
}

// envFlag turns SPILLWAY_GFE_GOSSIP_ADDR into gossip-addr, given the
// prefix SPILLWAY_GFE_.
func envFlag(name, prefix string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, prefix)), "_", "-")
}
