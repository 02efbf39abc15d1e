package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A running `lab up` is the owner of its lab: it started the processes,
// made the namespaces and waits to tear them down. It records itself in
// the state directory (RecordOwner), so that `lab down` from another shell
// (Clean) asks it to tear its own lab down (StopOwner: SIGTERM, as Ctrl-C
// would) instead of killing its processes under it. The owner then exits
// as after Ctrl-C, with status 0, and Clean only checks that nothing is
// left.

// ownerFile is where the owner records itself, as "pid exe".
func ownerFile(stateDir string) string { return filepath.Join(stateDir, "owner") }

// ownerStopTimeout bounds how long Clean waits for the owner to tear its
// lab down before it removes what is left itself.
const ownerStopTimeout = 60 * time.Second

// RecordOwner records the calling process as the owner of the lab whose
// state directory is stateDir. release removes the record if it is still
// this process's.
func RecordOwner(stateDir string) (release func(), err error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("lab: record owner: %w", err)
	}
	pid := os.Getpid()
	file := ownerFile(stateDir)
	if err := os.WriteFile(file, []byte(fmt.Sprintf("%d %s\n", pid, exe)), 0o644); err != nil {
		return nil, fmt.Errorf("lab: record owner: %w", err)
	}
	return func() {
		if p, _, ok := readOwner(file); ok && p == pid {
			os.Remove(file)
		}
	}, nil
}

// StopOwner asks the recorded owner of the lab in stateDir to tear its lab
// down (SIGTERM) and waits until it has exited, or until ctx ends. It does
// nothing, and reports false, when there is no record, when the recorded
// process no longer runs the recorded executable (a stale record, which it
// removes) or when the owner is the caller itself.
func StopOwner(ctx context.Context, stateDir string) (stopped bool, err error) {
	file := ownerFile(stateDir)
	pid, exe, ok := readOwner(file)
	if !ok || pid == os.Getpid() {
		return false, nil
	}
	if !runs(pid, exe) {
		os.Remove(file)
		return false, nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			os.Remove(file)
			return false, nil
		}
		return false, fmt.Errorf("lab: stop owner %d: %w", pid, err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for runs(pid, exe) {
		select {
		case <-ctx.Done():
			return true, fmt.Errorf("lab: owner %d (lab up) still running its teardown: %w", pid, ctx.Err())
		case <-tick.C:
		}
	}
	return true, nil
}

// readOwner reads an owner record; ok is false when there is none or it
// is malformed.
func readOwner(file string) (pid int, exe string, ok bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, "", false
	}
	pidStr, exe, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	if !ok {
		return 0, "", false
	}
	pid, err = strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return 0, "", false
	}
	return pid, exe, true
}

// runs reports whether process pid exists and runs executable exe (not a
// zombie: a zombie has no executable left to read).
func runs(pid int, exe string) bool {
	cur, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && cur == exe
}
