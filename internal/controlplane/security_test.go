package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/testkit"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/snapshot"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// testSecret is the cookie secret of secretYAML.
const testSecret = "issue-10-finding-2-cookie-secret-0123456789"

// secretYAML is a configuration whose service signs affinity cookies
// with testSecret.
func secretYAML() string {
	return strings.Replace(manyGroups(1).yaml(), "    health_check:",
		"    session_affinity: {type: generated_cookie, cookie_name: sw, cookie_secret: "+testSecret+"}\n    health_check:", 1)
}

// firstPush is testkit.FirstPush within the package's test timeout.
func firstPush(t *testing.T, addr string, creds credentials.TransportCredentials) (*pb.Snapshot, error) {
	return testkit.FirstPush(t, addr, creds, defaultTestTimeout)
}

// TestSecretsOnlyOverMutualTLS reproduces finding 2 of the first security
// review (SECURITY.md): an attacker who dialled the control plane without
// credentials got the whole configuration, cookie secret included, and could
// forge affinity cookies. Under mutual TLS a client without a certificate,
// with a certificate from another CA, or with a valid certificate of an
// identity that is not allowed gets nothing; an allowed gfe gets the
// configuration with the secret. A control plane in --insecure-plaintext mode
// serves the configuration with the secret redacted, which a gfe rejects
// naming the withheld field.
func TestSecretsOnlyOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := devpki.NewCA("cp test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(base string, names ...string) devpki.Files {
		f, err := ca.IssueFiles(dir, base, devpki.Leaf{CommonName: base, Names: names})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	sf := issue("cp", "127.0.0.1")
	path := writeFile(t, dir, "cp.yaml", secretYAML())
	r := startDaemonWith(t, "cp-tls", path, nil, clock.NewFake(epoch), newWorld(), false, func(c *Config) {
		c.TLS = mtls.ServerConfig{Files: mtls.Files(sf), AllowedClients: []string{"*.gfe.spillway.internal"}}
	})
	advanceReady(t, r)

	otherCA, err := devpki.NewCA("attacker CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := otherCA.IssueFiles(t.TempDir(), "forged", devpki.Leaf{Names: []string{"nyc-1.gfe.spillway.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	forged.CA = sf.CA // trusts the real control plane; only its own certificate is forged
	client := func(f devpki.Files) credentials.TransportCredentials {
		c, err := mtls.ClientCredentials(mtls.ClientConfig{Files: mtls.Files(f)}, mtls.Options{Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	noCert := credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13})
	tests := []struct {
		name  string
		creds credentials.TransportCredentials
		ok    bool
	}{
		{"plain text, as in the finding", insecure.NewCredentials(), false},
		{"TLS without a client certificate", noCert, false},
		{"certificate from another CA", client(forged), false},
		{"valid certificate of a disallowed identity", client(issue("backend", "backend.spillway.internal")), false},
		{"the control plane's own certificate", client(sf), false},
		{"allowed gfe", client(issue("gfe", "nyc-1.gfe.spillway.internal")), true},
	}
	refused := 0.0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := firstPush(t, r.d.Addr(), tt.creds)
			if !tt.ok {
				refused++
				// The server counts the refusal before the client's RPC
				// fails, except in TLS 1.3 where the client may finish
				// first: wait for the count.
				waitUntil(t, "the refusal counted", func() bool { return metricValue(t, r.d.m.tlsRefused) >= refused })
			}
			switch {
			case !tt.ok && err == nil:
				t.Fatalf("got a snapshot (version %s, %d bytes of config), want the connection refused", m.GetVersion(), len(m.GetConfigYaml()))
			case tt.ok && err != nil:
				t.Fatalf("allowed gfe: %v", err)
			case tt.ok && !strings.Contains(string(m.GetConfigYaml()), testSecret):
				t.Errorf("allowed gfe got the configuration without its cookie secret:\n%s", m.GetConfigYaml())
			}
		})
	}
}

// TestPlaintextRedactsSecrets: in --insecure-plaintext mode the secret
// never crosses the wire; a gfe rejects the redacted configuration (NACK)
// with a message naming the field.
func TestPlaintextRedactsSecrets(t *testing.T) {
	path := writeFile(t, t.TempDir(), "cp.yaml", secretYAML())
	r := startDaemon(t, "cp-plain", path, nil, clock.NewFake(epoch), newWorld(), false)
	advanceReady(t, r)
	m, err := firstPush(t, r.d.Addr(), insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	yaml := string(m.GetConfigYaml())
	if strings.Contains(yaml, testSecret) || !strings.Contains(yaml, config.RedactedSecret) {
		t.Fatalf("plain-text snapshot shows the secret or lacks the redaction marker:\n%s", yaml)
	}
	_, err = snapshot.FromProto(m)
	if err == nil || !strings.Contains(err.Error(), "services[0].session_affinity.cookie_secret: withheld") {
		t.Errorf("FromProto(redacted) = %v, want an error naming the withheld cookie_secret", err)
	}
}

// TestReflectionOnlyWhenAsked: the reflection service, which lists the API
// to whoever can call it, is registered only with GRPCReflection.
func TestReflectionOnlyWhenAsked(t *testing.T) {
	path := writeFile(t, t.TempDir(), "cp.yaml", manyGroups(1).yaml())
	for _, on := range []bool{false, true} {
		r := startDaemonWith(t, "cp-refl", path, nil, clock.NewFake(epoch), newWorld(), false, func(c *Config) { c.GRPCReflection = on })
		_, has := r.d.grpcSrv.GetServiceInfo()["grpc.reflection.v1.ServerReflection"]
		if has != on {
			t.Errorf("GRPCReflection %v: reflection registered = %v", on, has)
		}
		r.stop()
	}
}

// advanceReady waits until the rig's daemon serves a Ready State.
func advanceReady(t *testing.T, r *daemonRig) {
	t.Helper()
	waitState(t, r.d.State, "ready", func(st *State) bool { return st.Ready })
}

// TestAdminPagesShowNoSecret reproduces finding 8 of the first security
// review (SECURITY.md) on the control plane's admin listener:
// /debug/pprof/cmdline printed the command line (and its --gossip-key). pprof
// is mounted only when asked for and never serves cmdline; no page shows the
// cookie secret; with an admin token every page but the probes needs it.
func TestAdminPagesShowNoSecret(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "cp.yaml", secretYAML())
	const token = "admin-token-0123456789abcdef"
	tokenFile := writeFile(t, dir, "admin.token", token+"\n")
	get := func(url, auth string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name   string
		edit   func(*Config)
		auth   string
		status map[string]int // path → want status
	}{
		{"defaults", nil, "", map[string]int{
			"/debug/pprof/cmdline": 404, "/debug/pprof/": 404, "/status": 200, "/metrics": 200, "/healthz": 200, "/readyz": 200, "/": 200, "/ui/page.js": 200}},
		{"pprof", func(c *Config) { c.Pprof = true }, "", map[string]int{
			"/debug/pprof/cmdline": 404, "/debug/pprof/": 200}},
		{"token, none sent", func(c *Config) { c.AdminTokenFile = tokenFile }, "", map[string]int{
			"/status": 401, "/metrics": 401, "/healthz": 200, "/readyz": 200, "/": 401, "/ui/page.js": 401}},
		{"token sent", func(c *Config) { c.AdminTokenFile = tokenFile }, token, map[string]int{
			"/status": 200, "/metrics": 200, "/": 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startDaemonWith(t, "cp-admin", path, nil, clock.NewFake(epoch), newWorld(), false, tt.edit)
			defer r.stop()
			advanceReady(t, r)
			for p, want := range tt.status {
				code, body := get("http://"+r.d.AdminAddr()+p, tt.auth)
				if code != want {
					t.Errorf("GET %s = %d, want %d", p, code, want)
				}
				if strings.Contains(body, testSecret) {
					t.Errorf("GET %s shows the cookie secret", p)
				}
			}
		})
	}
}

// TestCookieSecretFileReloadedOnSIGHUP: a secret kept in a file of its own
// reaches an authenticated gfe, and replacing the file followed by Reload
// (SIGHUP) serves the new secret though the configuration file is
// unchanged.
func TestCookieSecretFileReloadedOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	secretFile := writeFile(t, dir, "cookie.secret", testSecret+"\n")
	yaml := strings.Replace(secretYAML(), "cookie_secret: "+testSecret, "cookie_secret_file: cookie.secret", 1)
	path := writeFile(t, dir, "cp.yaml", yaml)
	r := startDaemon(t, "cp-secretfile", path, nil, clock.NewFake(epoch), newWorld(), false)
	advanceReady(t, r)
	if got := r.d.Config().Config.Services[0].SessionAffinity.CookieSecret; got != testSecret {
		t.Fatalf("cookie secret from the file = %q", got)
	}
	if strings.Contains(string(r.d.Config().YAML), "cookie.secret") {
		t.Errorf("the served YAML names the secret file:\n%s", r.d.Config().YAML)
	}
	const next = "the-next-cookie-secret-0123456789abcdef"
	replaceFile(t, secretFile, next)
	if !r.d.Reload() {
		t.Fatal("Reload() after replacing the secret file = false, want a new version")
	}
	if got := r.d.Config().Config.Services[0].SessionAffinity.CookieSecret; got != next {
		t.Errorf("cookie secret after Reload = %q, want the new file's", got)
	}
	if r.d.Reload() {
		t.Error("a second Reload with nothing changed made a new version")
	}
}
