package statuspage

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMount(t *testing.T) {
	mux := http.NewServeMux()
	Mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	tests := []struct {
		name, method, path string
		wantStatus         int
		wantType, wantBody string
	}{
		{"page", "GET", "/", 200, "text/html; charset=utf-8", `<script src="ui/page.js" defer></script>`},
		{"script", "GET", "/ui/page.js", 200, "text/javascript; charset=utf-8", "function poll()"},
		{"style", "GET", "/ui/page.css", 200, "text/css; charset=utf-8", ".card {"},
		{"icon", "GET", "/ui/favicon.svg", 200, "image/svg+xml", "<svg"},
		{"head", "HEAD", "/", 200, "text/html; charset=utf-8", ""},
		{"other path", "GET", "/index.html", 404, "", ""},
		{"unknown asset", "GET", "/ui/other.js", 404, "", ""},
		{"post", "POST", "/", 405, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("%s %s = %d, want %d", tt.method, tt.path, resp.StatusCode, tt.wantStatus)
			}
			if tt.wantStatus != 200 {
				return
			}
			h := resp.Header
			if got := h.Get("Content-Type"); got != tt.wantType {
				t.Errorf("Content-Type = %q, want %q", got, tt.wantType)
			}
			if got := h.Get("Content-Security-Policy"); got != CSP {
				t.Errorf("Content-Security-Policy = %q, want %q", got, CSP)
			}
			if got := h.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options = %q, want nosniff", got)
			}
			if got := h.Get("Referrer-Policy"); got != "no-referrer" {
				t.Errorf("Referrer-Policy = %q, want no-referrer", got)
			}
			if !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("body lacks %q", tt.wantBody)
			}
		})
	}
}

// TestNoExternalAssets checks that the page loads nothing from another
// origin (it must work offline) and runs no inline script or style (the
// CSP would block them).
func TestNoExternalAssets(t *testing.T) {
	for _, name := range []string{"assets/index.html", "assets/page.js", "assets/page.css"} {
		b, err := assets.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		// The SVG namespace is a name, not a fetch.
		s := strings.ReplaceAll(string(b), "http://www.w3.org/2000/svg", "")
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", " style=", "<script>", "<style"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
	}
}
