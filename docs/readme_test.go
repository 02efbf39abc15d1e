package docs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spillway-lb/spillway/internal/testkit"
)

const readme = "../README.md"

// The README's two commands, which the first screen must show.
const (
	demoCommand = "go run ./cmd/demo"
	testCommand = "go test -race ./..."
)

func readReadme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadmeFrontDoor: the README reads as a front door: at most 300 lines
// and 20,000 characters, the demo and test commands in an sh block within
// its first 60 lines, and the test command the one .ci/run runs.
func TestReadmeFrontDoor(t *testing.T) {
	text := readReadme(t)
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) > 300 {
		t.Errorf("README.md has %d lines, want at most 300", len(lines))
	}
	if n := utf8.RuneCountInString(text); n > 20000 {
		t.Errorf("README.md has %d characters, want at most 20,000", n)
	}
	for _, cmd := range []string{demoCommand, testCommand} {
		found := false
		for _, b := range shBlocks(strings.Join(lines[:min(60, len(lines))], "\n")) {
			for _, l := range strings.Split(b.body, "\n") {
				if strings.HasPrefix(l, cmd+" ") || l == cmd {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("README.md: no sh block line starting with %q in the first 60 lines", cmd)
		}
	}
	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains("\n"+string(ci), "\n"+testCommand+"\n") {
		t.Errorf(".ci/run does not run the README's test command %q on a line of its own", testCommand)
	}
}

// block is one fenced sh block of a page.
type block struct {
	line int // of the opening fence, from 1
	body string
}

// shBlocks returns the ```sh blocks of text in order.
func shBlocks(text string) []block {
	var out []block
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```sh" {
			continue
		}
		start := i
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		out = append(out, block{line: start + 1, body: strings.Join(body, "\n") + "\n"})
	}
	return out
}

// section returns the part of text under the heading "## name", up to the
// next heading of that level.
func section(t *testing.T, text, name string) string {
	t.Helper()
	start := strings.Index(text, "\n## "+name+"\n")
	if start < 0 {
		t.Fatalf("README.md has no section %q", name)
	}
	rest := text[start+1:]
	if end := strings.Index(rest[3:], "\n## "); end >= 0 {
		rest = rest[:end+3]
	}
	return rest
}

// TestReadmeFiveMinutes runs the sh blocks of the README's "In front of
// your own backend in five minutes", in order, as one bash script with
// set -e, exactly as written: from the repository's root, with HOME a
// fresh directory (the guide works in ~/spillway) and in a network
// namespace of its own, so its default ports (7000, 7100, 7946, 7947,
// 8000, 8080, 9090) are its own. A command that fails fails the test; so
// does output that is not what the guide promises: the file passes
// --check-config, the gfe turns ready, and the request through it is
// answered 200 by the backend.
func TestReadmeFiveMinutes(t *testing.T) {
	if err := testkit.EnsureTools(map[string]string{"unshare": "util-linux", "ip": "iproute2", "curl": "curl"}); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root: the guide runs in a network namespace of its own (unshare --net)")
	}
	blocks := shBlocks(section(t, readReadme(t), "In front of your own backend in five minutes"))
	if len(blocks) < 5 {
		t.Fatalf("%d sh blocks in the five-minute guide, want at least 5", len(blocks))
	}
	var script strings.Builder
	script.WriteString("set -euo pipefail\nip link set lo up\n")
	for _, b := range blocks {
		fmt.Fprintf(&script, "echo '+++ README.md:%d'\n%s", b.line, b.body)
	}
	home := t.TempDir()
	path := filepath.Join(t.TempDir(), "five-minutes.sh")
	if err := os.WriteFile(path, []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	env := os.Environ()
	for _, v := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOTOOLCHAIN", "GOFLAGS"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", v, err)
		}
		// The guide moves HOME; Go's caches stay where they are.
		env = append(env, v+"="+strings.TrimSpace(string(out)))
	}
	env = append(env, "HOME="+home)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--net", "bash", path)
	cmd.Dir = ".." // the repository's root, where the guide starts
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A file, not a pipe: what the guide starts in the background must not
	// hold Wait open after the script ends (it does when a step fails).
	outFile, err := os.Create(filepath.Join(t.TempDir(), "output"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	start := time.Now()
	err = cmd.Run()
	// Whatever the guide left running dies with its process group.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	took := time.Since(start)
	outBytes, rerr := os.ReadFile(outFile.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	out := bytes.NewBuffer(outBytes)
	logs := func() string {
		var b strings.Builder
		for _, f := range []string{"controlplane.log", "gfe.log"} {
			if l, err := os.ReadFile(filepath.Join(home, "spillway", f)); err == nil {
				fmt.Fprintf(&b, "\n--- %s:\n%s", f, l)
			}
		}
		return b.String()
	}
	if err != nil {
		t.Fatalf("the five-minute guide failed after %v: %v\n%s%s", took.Round(time.Second), err, out.String(), logs())
	}
	got := out.String()
	for _, want := range []string{
		"spillway.yaml: ok\n",      // --check-config
		"ready",                    // /readyz
		"HTTP/1.1 200 OK",          // through the gfe
		"X-Spillway-Backend: demo", // to the stand-in backend
		`"site": "home"`,           // /status
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the guide's output lacks %q:\n%s%s", want, got, logs())
		}
	}
	t.Logf("the five-minute guide ran in %v", took.Round(100*time.Millisecond))
}
