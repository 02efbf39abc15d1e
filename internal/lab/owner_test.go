package lab

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/topology"
)

// ownerEnv makes the test binary act as a `lab up` (ownerHelper) instead
// of running the tests.
const ownerEnv = "SPILLWAY_LAB_TEST_OWNER"

// ownerHelper records itself as the owner of the lab in dir, waits for
// SIGTERM, "tears down" (writes dir/torn-down) and exits 0, as `lab up`
// does after Ctrl-C or `lab down`.
func ownerHelper(dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	release, err := RecordOwner(dir)
	if err != nil {
		return 3
	}
	defer release()
	<-ctx.Done()
	time.Sleep(100 * time.Millisecond) // a teardown that takes a while
	if err := os.WriteFile(filepath.Join(dir, "torn-down"), nil, 0o644); err != nil {
		return 4
	}
	return 0
}

func TestStopOwner(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ownerEnv+"="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps it: a zombie no longer "runs"
	t.Cleanup(func() { cmd.Process.Kill() })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
		_, _, ok := readOwner(ownerFile(dir))
		return ok, errors.New("no owner record yet")
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped, err := StopOwner(ctx, dir)
	if !stopped || err != nil {
		t.Fatalf("StopOwner = %t, %v; want true, nil", stopped, err)
	}
	if err := <-exited; err != nil {
		t.Errorf("owner exited with %v; want status 0 (a teardown like Ctrl-C's)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "torn-down")); err != nil {
		t.Errorf("owner did not tear down before StopOwner returned: %v", err)
	}
	if _, err := os.Stat(ownerFile(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("owner record left behind: %v", err)
	}
}

func TestStopOwnerLeavesOthers(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	self, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, record string
		kept         bool // the record stays
	}{
		{"no record", "", false},
		{"malformed", "not a pid\n", true},
		{"exited process", strconv.Itoa(dead.ProcessState.Pid()) + " " + self + "\n", false},
		{"other executable", "1 /no/such/exe\n", false},
		{"the caller itself", strconv.Itoa(os.Getpid()) + " " + self + "\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.record != "" {
				if err := os.WriteFile(ownerFile(dir), []byte(tc.record), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			stopped, err := StopOwner(context.Background(), dir)
			if stopped || err != nil {
				t.Fatalf("StopOwner = %t, %v; want false, nil", stopped, err)
			}
			_, err = os.Stat(ownerFile(dir))
			if kept := err == nil; kept != tc.kept && tc.record != "" {
				t.Errorf("record kept = %t, want %t", kept, tc.kept)
			}
		})
	}
}

func TestRecordOwnerRelease(t *testing.T) {
	dir := t.TempDir()
	release, err := RecordOwner(dir)
	if err != nil {
		t.Fatal(err)
	}
	if pid, _, ok := readOwner(ownerFile(dir)); !ok || pid != os.Getpid() {
		t.Fatalf("record: pid %d ok %t; want %d", pid, ok, os.Getpid())
	}
	release()
	if _, err := os.Stat(ownerFile(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("release left the record: %v", err)
	}
}
