package gfe

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/clock"
)

// TestAdminPprofAndToken reproduces finding 8 of the first security review
// (SECURITY.md) on the gfe's admin listener: pprof only when asked for and
// never cmdline; with an admin token every page but the probes needs it.
func TestAdminPprofAndToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin.token")
	const token = "gfe-admin-token-0123456789"
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		edit   func(*Config)
		auth   string
		status map[string]int
	}{
		{"defaults", func(*Config) {}, "", map[string]int{"/debug/pprof/": 404, "/debug/pprof/cmdline": 404, "/status": 200, "/healthz": 200, "/": 200, "/ui/page.js": 200}},
		{"pprof", func(c *Config) { c.Pprof = true }, "", map[string]int{"/debug/pprof/": 200, "/debug/pprof/cmdline": 404}},
		{"token, none sent", func(c *Config) { c.AdminTokenFile = tokenFile }, "", map[string]int{"/status": 401, "/metrics": 401, "/healthz": 200, "/readyz": 503, "/": 401, "/ui/page.js": 401}},
		{"token sent", func(c *Config) { c.AdminTokenFile = tokenFile }, token, map[string]int{"/status": 200, "/metrics": 200, "/": 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Node, cfg.Site = "gfe-nyc", "nyc"
			tt.edit(&cfg)
			e, err := New(cfg, Options{Gossip: &fakeGossip{node: cfg.Node}, Clock: clock.NewFake(time.Unix(1_000_000, 0))})
			if err != nil {
				t.Fatal(err)
			}
			for p, want := range tt.status {
				r := httptest.NewRequest(http.MethodGet, p, nil)
				if tt.auth != "" {
					r.Header.Set("Authorization", "Bearer "+tt.auth)
				}
				w := httptest.NewRecorder()
				e.admin.ServeHTTP(w, r)
				if w.Code != want {
					t.Errorf("GET %s = %d, want %d", p, w.Code, want)
				}
			}
		})
	}
	cfg := DefaultConfig()
	cfg.Node, cfg.Site, cfg.AdminTokenFile = "gfe-nyc", "nyc", filepath.Join(t.TempDir(), "missing")
	if _, err := New(cfg, Options{Gossip: &fakeGossip{node: cfg.Node}}); err == nil {
		t.Error("New with a missing admin token file succeeded, want an error")
	}
}
