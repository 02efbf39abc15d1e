package deploy

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/testkit"
)

// containersConf is the podman configuration the container tests use
// (CONTAINERS_CONF): runc, since crun cannot set rlimits on these
// machines, and no default ulimits, which runc cannot set here either
// ("error setting rlimit type 7: operation not permitted").
const containersConf = `[containers]
default_ulimits = []

[engine]
runtime = "runc"
`

// imageUID is the user the image runs as (deploy/rootfs.sh's spillway).
const imageUID = 65532

// podman makes sure Debian's podman and runc are installed and returns a
// function that runs podman with the test's configuration and returns its
// combined output.
func podman(t *testing.T) (run func(args ...string) (string, error), env []string) {
	t.Helper()
	if err := testkit.EnsureTools(map[string]string{"podman": "podman", "runc": "runc"}); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "containers.conf")
	if err := os.WriteFile(conf, []byte(containersConf), 0o644); err != nil {
		t.Fatal(err)
	}
	env = []string{"CONTAINERS_CONF=" + conf}
	return func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "podman", args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}, env
}

// buildImage lays out the image with deploy/rootfs.sh, builds
// deploy/Containerfile over it with podman and returns its tag; the image
// is removed when the test ends.
func buildImage(t *testing.T, run func(...string) (string, error)) string {
	t.Helper()
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	cmd := exec.Command("bash", "rootfs.sh", rootfs)
	cmd.Env = append(os.Environ(), "VERSION="+testVersion, "REVISION="+testRevision)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/rootfs.sh: %v\n%s", err, out)
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	tag := "localhost/spillway-test:" + hex.EncodeToString(suffix)
	if out, err := run("build", "--quiet", "-f", "Containerfile", "-t", tag, rootfs); err != nil {
		t.Fatalf("podman build: %v\n%s", err, out)
	}
	t.Cleanup(func() { run("rmi", "--force", tag) })
	return tag
}

// TestContainerImage builds the image from deploy/Containerfile with
// Debian's podman (no registry: FROM scratch over deploy/rootfs.sh's
// files), checks what is in it and who it runs as, then runs a control
// plane and a gfe from it as containers, with the host's network and
// their /etc/spillway (configuration, certificates from mkcerts.sh, gossip
// key) mounted read-only, and serves a request through them to a test
// backend on the host.
func TestContainerImage(t *testing.T) {
	needTool(t, "openssl")
	start := time.Now()
	run, env := podman(t)
	tag := buildImage(t, run)
	built := time.Since(start)

	t.Run("contents", func(t *testing.T) {
		out, err := run("image", "inspect", "--format", "{{.Config.User}} {{json .Config.Entrypoint}}", tag)
		if err != nil {
			t.Fatalf("podman image inspect: %v\n%s", err, out)
		}
		if got, want := strings.TrimSpace(out), `65532:65532 ["/usr/local/bin/spillway-gfe"]`; got != want {
			t.Errorf("user and entry point %q, want %q", got, want)
		}
		name := "spillway-files-" + tag[strings.LastIndex(tag, ":")+1:]
		if out, err := run("create", "--name", name, tag); err != nil {
			t.Fatalf("podman create: %v\n%s", err, out)
		}
		defer run("rm", "--force", name)
		files := exportedFiles(t, env, name)
		want := []string{"etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt",
			"usr/local/bin/spillway-controlplane", "usr/local/bin/spillway-devpki", "usr/local/bin/spillway-gfe"}
		if !slices.Equal(files, want) {
			t.Errorf("files in the image %q, want exactly %q", files, want)
		}
		for _, entry := range []string{"", "/usr/local/bin/spillway-controlplane"} {
			args := []string{"run", "--rm"}
			if entry != "" {
				args = append(args, "--entrypoint", entry)
			}
			out, err := run(append(args, tag, "--version")...)
			if err != nil || !strings.Contains(out, testVersion+" (rev "+testRevision+")") {
				t.Errorf("podman run %s --version = %q, %v; want version %s", entry, out, err, testVersion)
			}
		}
	})

	t.Run("serves", func(t *testing.T) {
		served := time.Now()
		root := t.TempDir()
		pki := filepath.Join(root, "pki-src")
		mkcerts(t, "openssl", pki, "cp/cp-1=127.92.0.1", "gfe/gfe-1")
		backend, err := proc.Start("testbackend", bins["testbackend"], proc.Options{},
			"--instance", "name=b1,addr=127.92.0.3:9001,region=us-east,zone=us-east-b", "--max-concurrency", "0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(backend.Kill)
		gossipKey := make([]byte, 32)
		rand.Read(gossipKey)
		etc := map[string]string{}
		for _, host := range []string{"cp-1", "gfe-1"} {
			dir := filepath.Join(root, host)
			install(t, filepath.Join(pki, "ca.crt"), filepath.Join(dir, "pki", "ca.crt"))
			install(t, filepath.Join(pki, host+".crt"), filepath.Join(dir, "pki", "node.crt"))
			install(t, filepath.Join(pki, host+".key"), filepath.Join(dir, "pki", "node.key"))
			write(t, filepath.Join(dir, "gossip.key"), base64.StdEncoding.EncodeToString(gossipKey)+"\n")
			if err := os.Chmod(filepath.Join(dir, "gossip.key"), 0o600); err != nil { // the daemons warn otherwise
				t.Fatal(err)
			}
			if host == "cp-1" {
				write(t, filepath.Join(dir, "controlplane.yaml"), strings.ReplaceAll(testConfig, "127.91.0.3", "127.92.0.3"))
			}
			chownTree(t, dir, imageUID)
			etc[host] = dir
		}
		common := []string{"--network", "host", "--rm"}
		tlsFlags := []string{"--tls-ca", "/etc/spillway/pki/ca.crt", "--tls-cert", "/etc/spillway/pki/node.crt",
			"--tls-key", "/etc/spillway/pki/node.key", "--gossip-key-file", "/etc/spillway/gossip.key"}
		cp := runContainer(t, env, "cp", append(append(common, "-v", etc["cp-1"]+":/etc/spillway:ro",
			"--entrypoint", "/usr/local/bin/spillway-controlplane", tag,
			"--config", "/etc/spillway/controlplane.yaml", "--node", "cp-1", "--listen", "127.92.0.1:7000",
			"--admin", "127.92.0.1:7100", "--gossip-addr", "127.92.0.1:7946",
			"--tls-allowed-clients", "*.gfe.spillway.internal"), tlsFlags...)...)
		wait(t, cp, "http://127.92.0.1:7100/healthz")
		gfe := runContainer(t, env, "gfe", append(append(common, "-v", etc["gfe-1"]+":/etc/spillway:ro", tag,
			"--site", "nyc", "--node", "gfe-1", "--listen", "127.92.0.2:8080", "--admin", "127.92.0.2:9090",
			"--controlplanes", "127.92.0.1:7000", "--gossip-addr", "127.92.0.2:7946", "--join", "127.92.0.1:7946"), tlsFlags...)...)
		wait(t, gfe, "http://127.92.0.2:9090/readyz") // a snapshot with a healthy backend, over mutual TLS
		resp, err := http.Get("http://127.92.0.2:8080/")
		if err != nil {
			t.Fatalf("GET through the gfe's container: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Spillway-Backend") != "b1" {
			t.Errorf("GET through the gfe's container = %d from backend %q, want 200 from b1", resp.StatusCode, resp.Header.Get("X-Spillway-Backend"))
		}
		var st struct {
			Members []string `json:"gossip_members"`
			Version struct{ Version string }
		}
		getJSON(t, "http://127.92.0.2:9090/status", &st)
		if st.Version.Version != testVersion || !slices.Contains(st.Members, "cp-1") {
			t.Errorf("gfe /status: version %q, gossip members %q; want %s with cp-1", st.Version.Version, st.Members, testVersion)
		}
		t.Logf("image built in %v; control plane and gfe containers up and serving %v later (%v in all)",
			built.Round(100*time.Millisecond), time.Since(served).Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	})
}

// runContainer runs podman run args in the foreground as a child named
// name, so that its output is the container's; the container is removed
// when the test ends (its output is logged if the test failed).
func runContainer(t *testing.T, env []string, name string, args ...string) *proc.Proc {
	t.Helper()
	suffix := make([]byte, 4)
	rand.Read(suffix)
	cname := "spillway-" + name + "-" + hex.EncodeToString(suffix)
	p, err := proc.Start(name, "podman", proc.Options{Env: env}, append([]string{"run", "--name", cname}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd := exec.Command("podman", "rm", "--force", "--time", "10", cname)
		cmd.Env = append(os.Environ(), env...)
		cmd.Run()
		<-p.Done()
		if t.Failed() {
			t.Logf("%s container output:\n%s", name, p.Output())
		}
	})
	return p
}

// exportedFiles returns the regular files of container name's file
// system, sorted.
func exportedFiles(t *testing.T, env []string, name string) []string {
	t.Helper()
	cmd := exec.Command("podman", "export", name)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var files []string
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("podman export: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			files = append(files, strings.TrimPrefix(h.Name, "./"))
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("podman export: %v", err)
	}
	slices.Sort(files)
	return files
}

// chownTree gives dir and everything under it to uid (the image's user
// reads its mounted /etc/spillway).
func chownTree(t *testing.T, dir string, uid int) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}
