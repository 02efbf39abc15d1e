package provider

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
)

// hook writes an executable shell script into a temp dir and returns its
// path. The script logs its arguments and SPILLWAY_* variables to the file
// $LOG, one line per run, then runs body.
func hook(t *testing.T, body string) (script, log string) {
	t.Helper()
	dir := t.TempDir()
	script, log = filepath.Join(dir, "scale.sh"), filepath.Join(dir, "log")
	text := "#!/bin/sh\n" +
		`echo "$* | $SPILLWAY_EVENT $SPILLWAY_GROUP $SPILLWAY_REGION $SPILLWAY_ZONE count=$SPILLWAY_COUNT address=$SPILLWAY_ADDRESS" >> "$LOG"` + "\n" +
		body + "\n"
	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, log
}

func newExec(t *testing.T, script, log string, timeout time.Duration) *Exec {
	t.Helper()
	e, err := NewExec(ExecConfig{Command: []string{script}, Timeout: timeout, Env: []string{"LOG=" + log}}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func readLog(t *testing.T, log string) string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestExecScaleUpDown runs a hook that starts N instances by printing
// their addresses, then stops one.
func TestExecScaleUpDown(t *testing.T) {
	script, log := hook(t, `
case "$1" in
scale-up) i=1; while [ $i -le "$3" ]; do echo "10.0.0.$i:8080"; i=$((i+1)); done ;;
scale-down) ;;
*) exit 2 ;;
esac`)
	e := newExec(t, script, log, time.Minute)
	insts, err := e.Start(t.Context(), testGroup, 2)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	want := []Instance{
		{Group: testGroup, Address: "10.0.0.1:8080", Name: "10.0.0.1:8080"},
		{Group: testGroup, Address: "10.0.0.2:8080", Name: "10.0.0.2:8080"},
	}
	if diff := cmp.Diff(want, insts); diff != "" {
		t.Errorf("Start mismatch (-want +got):\n%s", diff)
	}
	if err := e.Stop(t.Context(), insts[1]); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	wantLog := "scale-up us-east-b-web 2 | scale-up us-east-b-web us-east us-east-b count=2 address=\n" +
		"scale-down us-east-b-web 10.0.0.2:8080 | scale-down us-east-b-web us-east us-east-b count= address=10.0.0.2:8080\n"
	if got := readLog(t, log); got != wantLog {
		t.Errorf("hook saw\n%s\nwant\n%s", got, wantLog)
	}
}

func TestExecFailures(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		n         int
		wantInsts int
		wantErr   string
	}{
		{name: "fewer started", body: `echo 10.0.0.1:80`, n: 3, wantInsts: 1, wantErr: "scale-up us-east-b-web 3: started 1 of 3"},
		{name: "garbage line", body: `echo 10.0.0.1:80; echo "quota exceeded"`, n: 2,
			wantErr: `line 2 "quota exceeded": whitespace at byte 6 (instances it may have started are unknown to Spillway)`},
		{name: "exit status", body: `echo "no capacity in zone" >&2; exit 7`, n: 1, wantErr: "exit status 7: stderr: no capacity in zone"},
		{name: "not executable", body: "", n: 1, wantErr: "permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			script, log := hook(t, tt.body)
			if tt.name == "not executable" {
				if err := os.Chmod(script, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			insts, err := newExec(t, script, log, time.Minute).Start(t.Context(), testGroup, tt.n)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Start error = %v, want it to contain %q", err, tt.wantErr)
			}
			if len(insts) != tt.wantInsts {
				t.Errorf("Start returned %d instances, want %d", len(insts), tt.wantInsts)
			}
		})
	}
}

// TestExecTimeout runs a hook that hangs with a child: the timeout kills
// both and the error says so.
func TestExecTimeout(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script, log := hook(t, `echo $$ > "`+pidFile+`.tmp"; mv "`+pidFile+`.tmp" "`+pidFile+`"; sleep 300 & wait`)
	e := newExec(t, script, log, 500*time.Millisecond)
	err := e.Stop(t.Context(), Instance{Group: testGroup, Address: "10.0.0.1:80"})
	if err == nil || !strings.Contains(err.Error(), "scale-down us-east-b-web 10.0.0.1:80: timed out after 500ms") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop error = %v, want a timeout after 500ms", err)
	}
	b, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Skipf("hook killed before it wrote its pid: %v", rerr)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitGroupGone(t, pid)
}

func TestNewExecErrors(t *testing.T) {
	if _, err := NewExec(ExecConfig{}, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "command: must name a program") {
		t.Errorf("NewExec(no command) = %v", err)
	}
	if _, err := NewExec(ExecConfig{Command: []string{"x"}, Timeout: -time.Second}, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "timeout: -1s is negative") {
		t.Errorf("NewExec(negative timeout) = %v", err)
	}
}
