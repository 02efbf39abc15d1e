package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/lab"
)

const guide = "../docs/DEPLOY.md"

// guideHosts are the hosts docs/DEPLOY.md names in its host comments.
var guideHosts = []string{"admin", "cp-1", "cp-2", "gfe-nyc-1", "gfe-lon-1", "gfe-tokyo-1",
	"backend-us-east", "backend-eu-west", "backend-asia-east"}

// guideBlocks returns the guide's sh blocks (parsed as the lab that runs
// them does: internal/lab TestDeployGuide).
func guideBlocks(t *testing.T) []lab.GuideBlock {
	t.Helper()
	b, err := os.ReadFile(guide)
	if err != nil {
		t.Fatal(err)
	}
	return lab.ParseGuide(string(b))
}

// TestGuideBlocksNameTheirHosts: every sh block of docs/DEPLOY.md is
// preceded by a comment naming the hosts it runs on (or the copy step), so
// that a lab can run each on the right host.
func TestGuideBlocksNameTheirHosts(t *testing.T) {
	blocks := guideBlocks(t)
	perHost := map[string]int{}
	copies := 0
	for _, b := range blocks {
		switch {
		case strings.HasPrefix(b.Comment, "host: "):
			hosts := strings.Fields(strings.TrimPrefix(b.Comment, "host: "))
			if len(hosts) == 0 {
				t.Errorf("%s:%d: host comment names no host", guide, b.Line)
			}
			for _, h := range hosts {
				if !slices.Contains(guideHosts, h) {
					t.Errorf("%s:%d: unknown host %q (known: %q)", guide, b.Line, h, guideHosts)
				}
				perHost[h]++
			}
		case strings.HasPrefix(b.Comment, "copy: "):
			copies++
		default:
			t.Errorf("%s:%d: sh block without a <!-- host: ... --> or <!-- copy: ... --> comment right before it", guide, b.Line)
		}
	}
	if copies != 1 {
		t.Errorf("%d copy steps, want 1", copies)
	}
	for _, h := range guideHosts {
		if perHost[h] == 0 {
			t.Errorf("no block runs on %s", h)
		}
	}
	t.Logf("%d blocks; per host: %v", len(blocks), perHost)
}

// heredocs returns the bodies of every "cat > PATH <<'EOF'" in the guide's
// blocks, by PATH, in order.
func heredocs(t *testing.T, path string) []string {
	t.Helper()
	var docs []string
	start := "cat > " + path + " <<'EOF'\n"
	for _, b := range guideBlocks(t) {
		rest := b.Body
		for {
			i := strings.Index(rest, start)
			if i < 0 {
				break
			}
			rest = rest[i+len(start):]
			end := strings.Index(rest, "\nEOF")
			if end < 0 {
				t.Fatalf("%s:%d: heredoc for %s never ends", guide, b.Line, path)
			}
			docs = append(docs, rest[:end+1])
			rest = rest[end:]
		}
	}
	if len(docs) == 0 {
		t.Fatalf("%s: no heredoc writes %s", guide, path)
	}
	return docs
}

// TestGuideConfigIsValid loads the guide's controlplane.yaml with the
// control plane's own loader.
func TestGuideConfigIsValid(t *testing.T) {
	docs := heredocs(t, "dist/controlplane.yaml")
	path := filepath.Join(t.TempDir(), "controlplane.yaml")
	if err := os.WriteFile(path, []byte(docs[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatalf("the guide's configuration: %v", err)
	}
	if len(c.Regions) != 3 || len(c.Services) != 1 {
		t.Errorf("the guide's configuration has %d regions and %d services, want 3 and 1", len(c.Regions), len(c.Services))
	}
}

// TestGuideFirewall loads each nftables file of the guide with the real nft,
// twice (re-running the step must work), in a network namespace of its own
// so the machine's firewall is untouched, and checks the ports it opens.
func TestGuideFirewall(t *testing.T) {
	nft := needTool(t, "nft")
	rulesets := heredocs(t, "/etc/spillway/firewall.nft")
	if len(rulesets) != 2 {
		t.Fatalf("%d firewall files, want 2 (control planes, gfes)", len(rulesets))
	}
	wantRules := [][]string{
		{"ip saddr @gfes tcp dport 7000 accept", "ip saddr @members meta l4proto { tcp, udp } th dport 7946 accept", "policy drop;"},
		{"tcp dport { 80, 443 } accept", "ip saddr @members meta l4proto { tcp, udp } th dport 7946 accept", "policy drop;"},
	}
	for i, rs := range rulesets {
		path := filepath.Join(t.TempDir(), "firewall.nft")
		if err := os.WriteFile(path, []byte(rs), 0o644); err != nil {
			t.Fatal(err)
		}
		script := nft + " -f " + path + " && " + nft + " -f " + path + " && " + nft + " list table inet spillway"
		out, err := exec.Command("unshare", "--net", "sh", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("firewall %d: %v\n%s", i+1, err, out)
		}
		for _, r := range wantRules[i] {
			if !strings.Contains(string(out), r) {
				t.Errorf("firewall %d: loaded ruleset lacks %q:\n%s", i+1, r, out)
			}
		}
	}
}
