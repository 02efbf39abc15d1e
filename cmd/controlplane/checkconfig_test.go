package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckConfig: controlplane --check-config accepts every operator
// configuration in configs/ and prints FILE: ok for each; a broken file is
// rejected with every problem on a line of its own naming the file and the
// field, and the command exits 1. It starts nothing: the gRPC and admin
// addresses it is given are held by the test, which a daemon could not
// bind.
func TestCheckConfig(t *testing.T) {
	good, err := filepath.Glob("../../configs/*.yaml")
	if err != nil || len(good) < 6 {
		t.Fatalf("configs/*.yaml: %v, %d files, want at least 6", err, len(good))
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(configYAML("127.0.0.1:9001", "127.0.0.1:9002", 10)+
		"  - {host: api.example.com, service: nope, timeout: 10}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte(strings.Replace(configYAML("127.0.0.1:9001", "127.0.0.1:9002", 10),
		"  - name: web\n", "  - name: web\n    polcy: hash5\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	held := holdAddrs(t, 2)
	checkFlags := []string{"--check-config", "--listen", held[0], "--admin", held[1]}

	t.Run("configs", func(t *testing.T) {
		stdout, stderr, code := runCheck(t, append(checkFlags, good...)...)
		if code != 0 || stderr != "" {
			t.Fatalf("exit %d, stderr:\n%s", code, stderr)
		}
		for _, f := range good {
			if !strings.Contains(stdout, f+": ok\n") {
				t.Errorf("stdout lacks %q:\n%s", f+": ok", stdout)
			}
		}
		if n := strings.Count(stdout, "\n"); n != len(good) {
			t.Errorf("%d lines for %d files:\n%s", n, len(good), stdout)
		}
	})
	t.Run("broken", func(t *testing.T) {
		stdout, stderr, code := runCheck(t, append(checkFlags, good[0], bad, typo)...)
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		if stdout != good[0]+": ok\n" {
			t.Errorf("stdout %q, want only %q", stdout, good[0]+": ok")
		}
		want := []string{
			bad + `: routes[1].timeout: expected a duration such as "5s", got number 10`,
			bad + `: routes[1].service: unknown service "nope"`,
			typo + `: services[0].polcy: unknown field (did you mean "policy"?)`,
		}
		if got := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); !equalLines(got, want) {
			t.Errorf("stderr %q\nwant exactly:\n%s", stderr, strings.Join(want, "\n"))
		}
	})
	t.Run("--config", func(t *testing.T) {
		_, stderr, code := runCheck(t, "--check-config", "--config", bad)
		if code != 1 || !strings.Contains(stderr, bad+": routes[1].service:") {
			t.Errorf("exit %d, stderr:\n%s", code, stderr)
		}
	})
	t.Run("no file", func(t *testing.T) {
		_, stderr, code := runCheck(t, "--check-config")
		if code != 1 || !strings.Contains(stderr, "name the files to check") {
			t.Errorf("exit %d, stderr:\n%s", code, stderr)
		}
	})
}

// runCheck runs the controlplane binary with args and returns its output
// and exit code.
func runCheck(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(bins["controlplane"], args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// holdAddrs listens on n loopback ports for the test's duration and
// returns their addresses.
func holdAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		out = append(out, l.Addr().String())
	}
	return out
}

func equalLines(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
