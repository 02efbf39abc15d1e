package statuspage

import (
	"embed"
	"net/http"
)

//go:embed assets
var assets embed.FS

// CSP is the Content-Security-Policy of every response of the page: the
// page's own script and style sheet, fetches to its own origin (/status),
// nothing else.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Mount adds the page to mux: the HTML at GET / (exactly) and its script,
// style sheet and icon under GET /ui/. The page fetches "status" relative to
// itself, so mux must serve the daemon's /status JSON too.
func Mount(mux *http.ServeMux) {
	mux.Handle("GET /{$}", asset("assets/index.html", "text/html; charset=utf-8"))
	mux.Handle("GET /ui/page.js", asset("assets/page.js", "text/javascript; charset=utf-8"))
	mux.Handle("GET /ui/page.css", asset("assets/page.css", "text/css; charset=utf-8"))
	mux.Handle("GET /ui/favicon.svg", asset("assets/favicon.svg", "image/svg+xml"))
}

// asset serves the embedded file name with content type ctype and the
// page's security headers. The files are part of the binary, so a missing
// one is a build mistake: asset panics at Mount time rather than serving
// 404s.
func asset(name, ctype string) http.Handler {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic("statuspage: " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", ctype)
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		w.Write(b)
	})
}
