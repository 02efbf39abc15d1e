package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// affinityYAML is a one-service configuration whose session_affinity
// block is the given flow mapping body.
func affinityYAML(affinity string) string {
	return `regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - name: g1
            instances:
              - address: 127.0.0.1:9001
services:
  - name: web
    backends:
      - {group: g1, max_rate_per_instance: 10}
    session_affinity: {type: generated_cookie, cookie_name: sw, ` + affinity + `}
routes:
  - service: web
`
}

func TestCookieSecretFile(t *testing.T) {
	dir := t.TempDir()
	const secret = "secret-from-a-file-0123456789abcdef"
	if err := os.WriteFile(filepath.Join(dir, "cookie.secret"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	c, err := Load(write("good.yaml", affinityYAML("cookie_secret_file: cookie.secret")))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Services[0].SessionAffinity
	if a.CookieSecret != secret || a.CookieSecretFile != "" {
		t.Errorf("cookie_secret %q, cookie_secret_file %q; want the file's content and the path cleared", a.CookieSecret, a.CookieSecretFile)
	}
	canon, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(canon), "cookie.secret") || !strings.Contains(string(canon), secret) {
		t.Errorf("canonical form names the file or lacks the secret:\n%s", canon)
	}
	if _, err := Parse(canon, "snapshot"); err != nil {
		t.Errorf("Parse(canonical form) = %v", err)
	}

	tests := []struct {
		name, yaml, wantErr string
		parse               bool
	}{
		{name: "missing file", yaml: affinityYAML("cookie_secret_file: nope.secret"),
			wantErr: "services[0].session_affinity.cookie_secret_file: read: open " + filepath.Join(dir, "nope.secret")},
		{name: "both set", yaml: affinityYAML("cookie_secret: " + secret + ", cookie_secret_file: cookie.secret"),
			wantErr: "services[0].session_affinity.cookie_secret_file: exclusive with cookie_secret"},
		{name: "previous from a file equal to the current", yaml: affinityYAML("cookie_secret: " + secret + ", previous_cookie_secret_file: cookie.secret"),
			wantErr: "previous_cookie_secret: must differ from cookie_secret"},
		{name: "Parse reads no file", parse: true, yaml: affinityYAML("cookie_secret_file: cookie.secret"),
			wantErr: "services[0].session_affinity.cookie_secret_file: not read from a configuration held in memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.parse {
				_, err = Parse([]byte(tt.yaml), "snapshot")
			} else {
				_, err = Load(write("bad.yaml", tt.yaml))
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want it to contain %q", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("error shows the secret: %v", err)
			}
		})
	}
}
