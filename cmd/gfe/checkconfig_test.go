package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/daemonflags"
	"github.com/spillway-lb/spillway/internal/devpki"
)

// TestCheckConfig: gfe --check-config checks its flags and each file as a
// gfe given --config FILE would before serving it, including what the
// control plane never reads (an https listener's certificate files), and
// binds nothing: it passes with --listen and --admin on addresses the
// test holds.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	ca, err := devpki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	www, err := ca.Issue(devpki.Leaf{CommonName: "www", Names: []string{"www.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	crt, key := write("www.crt", string(www.CertPEM)), write("www.key", string(www.KeyPEM))
	base := `regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - name: g1
            instances: [{address: "127.0.0.1:9001"}]
services:
  - name: web
    backends: [{group: g1, max_rate_per_instance: 10}]
routes:
  - service: web
listeners:
  - name: tls
    protocol: https
    port: 8443
    certificates: [{cert_file: CERT, key_file: KEY}]
`
	good := write("good.yaml", strings.NewReplacer("CERT", crt, "KEY", key).Replace(base))
	noCert := write("nocert.yaml", strings.NewReplacer("CERT", filepath.Join(dir, "missing.crt"), "KEY", key).Replace(base))
	invalid := write("invalid.yaml", strings.Replace(base, "max_rate_per_instance: 10", "max_rate_per_instance: -1", 1))
	held := make([]string, 2)
	for i := range held {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		held[i] = l.Addr().String()
	}
	flags := []string{"--check-config", "--listen", held[0], "--admin", held[1]}

	for _, tc := range []struct {
		name       string
		args       []string
		wantErr    bool
		wantStdout string
		wantStderr []string
	}{
		{name: "good file", args: []string{good}, wantStdout: "flags: ok\n" + good + ": ok\n"},
		{name: "--config", args: []string{"--config", good}, wantStdout: "flags: ok\n" + good + ": ok\n"},
		{name: "flags only", args: []string{"--site", "nyc"}, wantStdout: "flags: ok\n"},
		{name: "bad files", args: []string{good, noCert, invalid}, wantErr: true,
			wantStdout: "flags: ok\n" + good + ": ok\n",
			wantStderr: []string{
				noCert + ": listeners[0].certificates[0]: cert_file: stat " + filepath.Join(dir, "missing.crt") + ": no such file or directory",
				invalid + ": services[0].backends[0].max_rate_per_instance: must be a finite number > 0, got -1",
			}},
		{name: "bad flags", args: []string{"--poller", "sometimes", good}, wantErr: true,
			wantStderr: []string{`flags: --poller: poller mode "sometimes": want auto, on or off`}},
		{name: "control plane without TLS", args: []string{"--controlplanes", "127.0.0.1:7000", good}, wantErr: true,
			wantStderr: []string{"flags: cpclient: invalid config: no transport security configured: set --tls-ca, --tls-cert and --tls-key " +
				"for mutual TLS with the control plane, or --insecure-plaintext to take snapshots in clear text from whoever answers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, flags...), tc.args...)
			v, files, err := parseFlags(args)
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			err = checkConfig(v, args, files, &stdout, &stderr)
			if tc.wantErr != errors.Is(err, daemonflags.ErrCheckFailed) {
				t.Errorf("checkConfig = %v, want failure %v", err, tc.wantErr)
			}
			if stdout.String() != tc.wantStdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tc.wantStdout)
			}
			got := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if stderr.Len() == 0 {
				got = nil
			}
			if strings.Join(got, "\n") != strings.Join(tc.wantStderr, "\n") {
				t.Errorf("stderr:\n%s\nwant:\n%s", stderr.String(), strings.Join(tc.wantStderr, "\n"))
			}
		})
	}
}
