package lab

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/proc"
)

// guidePath is docs/DEPLOY.md, from this package's directory.
const guidePath = "../../docs/DEPLOY.md"

// TestDeployGuide runs docs/DEPLOY.md on lab hosts with the guide's own
// addresses (Guide): every sh block, in order, on the hosts its comment
// names — build and certificates on admin, the copy step, install, env
// files, the nftables firewall, starting the units (systemctl and
// systemd-run are the lab's stand-ins), the probes, the rolling upgrade of
// cp-1 and gfe-nyc-1, the backup — and fails when any command fails. Then
// it checks what the guide promises: both gfes of the serving step answer
// with a region, the backup holds the configuration and the host's key,
// a control plane's gRPC port drops a host that is not a gfe while the
// gfes are connected, and every host of the table ran a block. The lab
// has no distances, so which region answers is not checked.
func TestDeployGuide(t *testing.T) {
	requireLab(t)
	text, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	root, err := proc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	fake := filepath.Join(state, "fakesystemd")
	build := exec.CommandContext(ctx, "go", "build", "-o", fake, "./internal/lab/fakesystemd")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build fakesystemd: %v\n%s", err, out)
	}
	cfg := Config{Prefix: "splg-", Network: netip.MustParsePrefix("10.0.0.0/16"), StateDir: state}
	g, err := UpGuide(ctx, cfg, string(text), root, fake)
	if err != nil {
		Clean(context.Background(), cfg)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, h := range g.Hosts {
				logs, _ := filepath.Glob(filepath.Join(g.fs, h, "var.u", "log", "fakesystemd", "*.log"))
				for _, f := range logs {
					b, _ := os.ReadFile(f)
					t.Logf("--- %s %s (tail):\n%s", h, filepath.Base(f), tail(string(b), 1500))
				}
			}
		}
		if err := g.Lab.Down(context.Background()); err != nil {
			t.Errorf("Down: %v", err)
		}
		if left, _ := Namespaces(cfg.Prefix); len(left) > 0 {
			t.Errorf("namespaces left after Down: %v", left)
		}
	})

	ran := map[string]int{}
	var served string
	start := time.Now()
	for _, b := range ParseGuide(string(text)) {
		t0 := time.Now()
		out, err := g.Run(ctx, b)
		if err != nil {
			t.Fatalf("%s:%d: %v", guidePath, b.Line, err)
		}
		for h := range out {
			ran[h]++
		}
		if strings.Contains(b.Body, "curl -si http://") {
			served = out["admin"]
		}
		t.Logf("%s:%d (%s) ran in %v", guidePath, b.Line, b.Comment, time.Since(t0).Round(time.Millisecond))
	}
	t.Logf("the whole guide ran in %v; blocks per host: %v", time.Since(start).Round(time.Second), ran)

	for _, h := range append(slices.Clone(g.Hosts), "admin") {
		if ran[h] == 0 {
			t.Errorf("no block of the guide ran on %s", h)
		}
	}
	region := regexp.MustCompile(`(?im)^x-spillway-region: \S+\r?$`)
	if n := len(region.FindAllString(served, -1)); n != 2 {
		t.Errorf("the serving step printed %d X-Spillway-Region headers, want 2 (one per gfe):\n%s", n, served)
	}
	backup, err := g.Exec(ctx, "cp-1", "tar -tzf /root/spillway-etc-*.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"spillway/controlplane.yaml", "spillway/controlplane.env", "spillway/pki/node.key", "spillway/gossip.key"} {
		if !strings.Contains(backup, f+"\n") {
			t.Errorf("the backup lacks %s:\n%s", f, backup)
		}
	}
	// admin is not among the firewall's gfes: its SYN to cp-1's gRPC
	// port is dropped (curl's exit status 28, a timeout; 7 would be a
	// refusal, 0 or 52 an answer).
	fw, _ := g.Exec(ctx, "admin", "curl -s --connect-timeout 1 http://"+g.Addrs["cp-1"].String()+":7000/ >/dev/null && echo exit=0 || echo exit=$?")
	if !strings.Contains(fw, "exit=28") {
		t.Errorf("admin reaching cp-1:7000 through the firewall: %q, want a timeout (exit=28)", strings.TrimSpace(fw))
	}
	// Every gfe streams its snapshots from one of the control planes.
	var gfes string
	for _, cp := range []string{"cp-1", "cp-2"} {
		st, err := g.Exec(ctx, cp, "curl -fsS http://127.0.0.1:7100/status")
		if err != nil {
			t.Fatal(err)
		}
		gfes += st
	}
	for _, h := range []string{"gfe-nyc-1", "gfe-lon-1", "gfe-tokyo-1"} {
		if !regexp.MustCompile(`"id":\s*"` + h + `"`).MatchString(gfes) {
			t.Errorf("no control plane's /status lists %s among its gfes: %s", h, tail(gfes, 3000))
		}
	}
}
