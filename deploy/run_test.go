package deploy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/proc"
)

// runTimeout bounds each wait of TestUnitsRunDaemons. The processes start
// in well under a second on an idle machine; the bound is for a busy one.
const runTimeout = 60 * time.Second

// hostValues are the loopback addresses TestUnitsRunDaemons gives the
// settings of the example env files: one key for every variable they set.
var hostValues = map[string]string{
	"SPILLWAY_CP_NODE":                "cp-1",
	"SPILLWAY_CP_LISTEN":              "127.91.0.1:7000",
	"SPILLWAY_CP_ADMIN":               "127.91.0.1:7100",
	"SPILLWAY_CP_GOSSIP_ADDR":         "127.91.0.1:7946",
	"SPILLWAY_CP_JOIN":                "", // the first replica up joins no one
	"SPILLWAY_CP_REPLICAS":            "cp-1",
	"SPILLWAY_CP_TLS_ALLOWED_CLIENTS": "*.gfe.spillway.internal",
	"SPILLWAY_GFE_NODE":               "gfe-nyc-1",
	"SPILLWAY_GFE_SITE":               "nyc",
	"SPILLWAY_GFE_LISTEN":             "127.91.0.2:8080",
	"SPILLWAY_GFE_ADMIN":              "127.91.0.2:9090",
	"SPILLWAY_GFE_CONTROLPLANES":      "127.91.0.1:7000",
	"SPILLWAY_GFE_GOSSIP_ADDR":        "127.91.0.2:7946",
	"SPILLWAY_GFE_JOIN":               "127.91.0.1:7946",
}

// testConfig is a control plane's /etc/spillway/controlplane.yaml: one
// region, one backend.
const testConfig = `regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: us-east-b-web
            instances:
              - address: 127.91.0.3:9001
services:
  - name: web
    backends:
      - {group: us-east-b-web, max_rate_per_instance: 100}
    health_check: {protocol: http, path: /healthz, interval: 1s, timeout: 500ms, healthy_threshold: 1, unhealthy_threshold: 2}
routes:
  - service: web
`

// TestUnitsRunDaemons runs the deployment the units describe, on loopback:
// a control plane and a gfe, each started with its unit's ExecStart and the
// variables of its example env file, reading its own /etc/spillway (a
// temporary directory) laid out as docs/DEPLOY.md installs it, with
// certificates from mkcerts.sh and a generated gossip key. The gfe takes
// its snapshot over mutual TLS and joins gossip; a request through it
// reaches the backend; both /status pages and build_info metrics show the
// stamped version; SIGHUP
// (the units' ExecReload) keeps both running; SIGTERM stops both with exit
// status 0.
func TestUnitsRunDaemons(t *testing.T) {
	needTool(t, "openssl")
	root := t.TempDir()
	pki := filepath.Join(root, "pki-src")
	mkcerts(t, "openssl", pki, "cp/cp-1=127.91.0.1", "gfe/gfe-nyc-1")
	key := make([]byte, 32)
	rand.Read(key)
	gossipKey := base64.StdEncoding.EncodeToString(key) + "\n"

	backend, err := proc.Start("testbackend", bins["testbackend"], proc.Options{},
		"--instance", "name=b1,addr=127.91.0.3:9001,region=us-east,zone=us-east-b", "--max-concurrency", "0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(backend.Kill)

	started := map[string]*proc.Proc{}
	for _, d := range daemons {
		host := map[string]string{"controlplane": "cp-1", "gfe": "gfe-nyc-1"}[d.cmd]
		etc := filepath.Join(root, host, "etc", "spillway")
		install(t, filepath.Join(pki, "ca.crt"), filepath.Join(etc, "pki", "ca.crt"))
		install(t, filepath.Join(pki, host+".crt"), filepath.Join(etc, "pki", "node.crt"))
		install(t, filepath.Join(pki, host+".key"), filepath.Join(etc, "pki", "node.key"))
		write(t, filepath.Join(etc, "gossip.key"), gossipKey)
		if err := os.Chmod(filepath.Join(etc, "gossip.key"), 0o600); err != nil { // the daemons warn otherwise
			t.Fatal(err)
		}
		if d.cmd == "controlplane" {
			write(t, filepath.Join(etc, "controlplane.yaml"), testConfig)
		}
		u := parseUnit(t, filepath.Join("systemd", d.unit))
		args := strings.Fields(strings.ReplaceAll(u.get("ExecStart"), "/etc/spillway", etc))[1:]
		p, err := proc.Start(d.cmd, bins[d.cmd], proc.Options{Env: hostEnv(t, filepath.Join("env", d.envFile))}, args...)
		if err != nil {
			t.Fatal(err)
		}
		started[d.cmd] = p
		t.Cleanup(func() {
			p.Kill()
			if t.Failed() {
				t.Logf("%s output:\n%s", d.cmd, p.Output())
			}
		})
		if d.cmd == "controlplane" {
			wait(t, p, "http://127.91.0.1:7100/healthz")
		}
	}

	wait(t, started["gfe"], "http://127.91.0.2:9090/readyz") // ready: a snapshot with a healthy backend came over mutual TLS
	resp, err := http.Get("http://127.91.0.2:8080/")
	if err != nil {
		t.Fatalf("GET through the gfe: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Spillway-Backend") != "b1" {
		t.Errorf("GET through the gfe = %d from backend %q, want 200 from b1", resp.StatusCode, resp.Header.Get("X-Spillway-Backend"))
	}

	var cp struct {
		Node            string `json:"node"`
		SnapshotVersion string `json:"snapshot_version"`
		Version         struct{ Version, Revision string }
		GFEs            []struct {
			ID           string `json:"id"`
			BuildVersion string `json:"build_version"`
		} `json:"gfes"`
	}
	var gfe struct {
		Node          string   `json:"node"`
		ConfigVersion string   `json:"config_version"`
		Members       []string `json:"gossip_members"`
		Version       struct{ Version, Revision string }
	}
	getJSON(t, "http://127.91.0.1:7100/status", &cp)
	getJSON(t, "http://127.91.0.2:9090/status", &gfe)
	t.Logf("control plane %s %s: config %s, gfes %v; gfe %s %s: config %s, gossip %v",
		cp.Node, cp.Version.Version, cp.SnapshotVersion, cp.GFEs, gfe.Node, gfe.Version.Version, gfe.ConfigVersion, gfe.Members)
	if cp.Version.Version != testVersion || cp.Version.Revision != testRevision || gfe.Version.Version != testVersion || gfe.Version.Revision != testRevision {
		t.Errorf("/status versions: control plane %+v, gfe %+v, want %s %s", cp.Version, gfe.Version, testVersion, testRevision)
	}
	if cp.Node != "cp-1" || gfe.Node != "gfe-nyc-1" || len(cp.GFEs) != 1 || cp.GFEs[0].ID != "gfe-nyc-1" ||
		!strings.HasPrefix(cp.GFEs[0].BuildVersion, testVersion+" (rev "+testRevision+")") {
		t.Errorf("/status: control plane %q serving %+v, gfe %q; want cp-1 serving gfe-nyc-1 of build %s", cp.Node, cp.GFEs, gfe.Node, testVersion)
	}
	if gfe.ConfigVersion == "" || gfe.ConfigVersion != cp.SnapshotVersion {
		t.Errorf("gfe config_version %q, want the control plane's snapshot %q", gfe.ConfigVersion, cp.SnapshotVersion)
	}

	for url, metric := range map[string]string{
		"http://127.91.0.1:7100/metrics": "spillway_controlplane_build_info",
		"http://127.91.0.2:9090/metrics": "spillway_gfe_build_info",
	} {
		want := fmt.Sprintf(`%s{go_version="%s",revision="%s",version="%s"} 1`, metric, runtime.Version(), testRevision, testVersion)
		if body := getText(t, url); !strings.Contains(body, want) {
			t.Errorf("%s lacks %s", url, want)
		}
	}

	// ExecReload, then stop as systemd does.
	for name, p := range started {
		if err := p.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitOutput(t, p, "gossip keyring reloaded")
		select {
		case <-p.Done():
			t.Fatalf("%s exited on SIGHUP: %v", name, p.Err())
		default:
		}
	}
	for _, name := range []string{"gfe", "controlplane"} {
		if err := started[name].Stop(30 * time.Second); err != nil {
			t.Errorf("%s on SIGTERM: %v, want exit status 0", name, err)
		}
	}
}

// hostEnv returns the variables of the example env file at path, each set
// to its hostValues value; a variable the test does not know fails it, so
// the file cannot gain a setting this test does not run.
func hostEnv(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := []string{"SPILLWAY_GOSSIP_KEY="} // from the key file only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "=")
		v, ok := hostValues[name]
		if !ok {
			t.Fatalf("%s sets %s, which this test has no value for", path, name)
		}
		env = append(env, name+"="+v)
	}
	return env
}

// install copies src to dst (creating its directory), as the install
// steps of docs/DEPLOY.md do.
func install(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	write(t, dst, string(b))
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o640); err != nil {
		t.Fatal(err)
	}
}

// wait polls url until it answers 200; it gives up when p exits.
func wait(t *testing.T, p *proc.Proc, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := proc.WaitHTTP(ctx, url); err != nil {
		t.Fatalf("%s: %v", p.Name, err)
	}
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return string(b)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

// waitOutput polls p's output until it contains s.
func waitOutput(t *testing.T, p *proc.Proc, s string) {
	t.Helper()
	deadline := time.Now().Add(runTimeout)
	for !strings.Contains(p.Output(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q in its output within %v", p.Name, s, runTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
