package adminhttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func get(t *testing.T, h http.Handler, path, auth string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(b)
}

func writeToken(t *testing.T, path, tok string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func TestGuard(t *testing.T) {
	mux := http.NewServeMux()
	for _, p := range []string{"/healthz", "/readyz", "/status", "/metrics"} {
		mux.HandleFunc("GET "+p, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "page "+p) })
	}
	path := filepath.Join(t.TempDir(), "token")
	const tok = "0123456789abcdef-token"
	writeToken(t, path, tok+"\n")
	h, err := Guard(mux, path, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, auth string
		want             int
	}{
		{"liveness open", "/healthz", "", 200},
		{"readiness open", "/readyz", "", 200},
		{"status without token", "/status", "", 401},
		{"metrics without token", "/metrics", "", 401},
		{"wrong token", "/status", "Bearer 0123456789abcdef-tokem", 401},
		{"token prefix", "/status", "Bearer 0123456789abcdef", 401},
		{"basic scheme", "/status", "Basic " + tok, 401},
		{"right token", "/status", "Bearer " + tok, 200},
		{"right token on metrics", "/metrics", "Bearer " + tok, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, body := get(t, h, tt.path, tt.auth); code != tt.want {
				t.Errorf("GET %s with %q = %d %q, want %d", tt.path, tt.auth, code, body, tt.want)
			}
		})
	}

	// Rotation: the file is read again at each request.
	writeToken(t, path, "fedcba9876543210-new-token")
	if code, _ := get(t, h, "/status", "Bearer "+tok); code != 401 {
		t.Errorf("old token after rotation = %d, want 401", code)
	}
	if code, _ := get(t, h, "/status", "Bearer fedcba9876543210-new-token"); code != 200 {
		t.Errorf("new token after rotation = %d, want 200", code)
	}
	// A token file that disappears fails closed.
	os.Remove(path)
	if code, _ := get(t, h, "/status", "Bearer fedcba9876543210-new-token"); code != 503 {
		t.Errorf("with the token file gone = %d, want 503", code)
	}
	if code, _ := get(t, h, "/healthz", ""); code != 200 {
		t.Errorf("liveness with the token file gone = %d, want 200", code)
	}
}

func TestGuardRefusesBadTokenFiles(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	writeToken(t, short, "abc")
	spaced := filepath.Join(dir, "spaced")
	writeToken(t, spaced, "0123456789 abcdef")
	tests := []struct{ name, path, wantErr string }{
		{"missing", filepath.Join(dir, "nope"), "no such file"},
		{"short", short, "at least 16 bytes, got 3"},
		{"spaces", spaced, "one line without spaces"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Guard(http.NewServeMux(), tt.path, zerolog.Nop())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Guard(%s) = %v, want an error containing %q", tt.path, err, tt.wantErr)
			}
		})
	}
	if h, err := Guard(http.NotFoundHandler(), "", zerolog.Nop()); err != nil || h == nil {
		t.Errorf("Guard without a token file = %v, %v; want the handler unchanged", h, err)
	}
}

// TestPprofHasNoCmdline reproduces finding 8 of the first security review
// (SECURITY.md): a secret passed on the command line must not be readable on
// the admin listener.
func TestPprofHasNoCmdline(t *testing.T) {
	const secret = "c2VjcmV0LWdvc3NpcC1rZXktMTIzNDU2Nzg5MA=="
	old := os.Args
	os.Args = append(append([]string{}, old...), "--gossip-key", secret)
	t.Cleanup(func() { os.Args = old })
	mux := http.NewServeMux()
	MountPprof(mux)
	for _, p := range []string{"/debug/pprof/cmdline", "/debug/pprof/", "/debug/pprof/cmdline?debug=1"} {
		code, body := get(t, mux, p, "")
		if strings.Contains(body, secret) {
			t.Errorf("GET %s = %d and shows the command line's secret", p, code)
		}
	}
	if code, _ := get(t, mux, "/debug/pprof/cmdline", ""); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/cmdline = %d, want 404", code)
	}
	if code, body := get(t, mux, "/debug/pprof/", ""); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("GET /debug/pprof/ = %d, want 200 with the profile index", code)
	}
}
