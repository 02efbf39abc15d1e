package provider

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spillway-lb/spillway/internal/proc"
)

const defaultTestTimeout = 30 * time.Second

// testbackendBin is the test backend binary, built once by TestMain.
var testbackendBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "provider-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bins, err := proc.Build(ctx, dir, false, "testbackend")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testbackendBin = bins["testbackend"]
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// freePorts returns the first of n consecutive loopback ports, none bound
// when it looked (another program may bind one meanwhile; the provider
// checks again and skips it).
func freePorts(t *testing.T, n int) PortRange {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		first := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if first+n-1 > 65535 {
			continue
		}
		ok := true
		for p := first; p < first+n; p++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			return PortRange{First: first, Last: first + n - 1}
		}
	}
	t.Fatalf("no %d free consecutive ports", n)
	return PortRange{}
}

// groupAlive reports whether a live (not zombie) process is in process
// group pgid, by scanning /proc: zombies count as gone, since a container's
// init may never reap the orphans it inherits.
func groupAlive(t *testing.T, pgid int) bool {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and ')'.
		s := string(b)
		rest := s[strings.LastIndexByte(s, ')')+2:]
		f := strings.Fields(rest)
		if len(f) < 3 {
			continue
		}
		if pg, _ := strconv.Atoi(f[2]); pg == pgid && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

// waitGroupGone waits until no live process is in group pgid. The
// processes were killed; it only waits for the kernel to finish them.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	for groupAlive(t, pgid) {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has live processes after %v", pgid, defaultTestTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
