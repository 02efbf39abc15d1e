// Package adminhttp holds what the daemons' admin listeners share: an
// optional bearer token in front of every page but the liveness and
// readiness probes, and the pprof handlers, which are mounted only when
// asked for and never include /debug/pprof/cmdline (a command line can
// carry secrets; docs/design.md §9).
package adminhttp

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strings"

	"github.com/rs/zerolog"
)

// Probes are the paths a token never guards: load balancers and
// orchestrators probe them without credentials.
var Probes = []string{"/healthz", "/readyz"}

// MinTokenBytes is the shortest admin token accepted.
const MinTokenBytes = 16

// Guard returns h behind the bearer token in tokenFile: every request but
// those for Probes must carry "Authorization: Bearer <token>" or is
// answered 401. The file is read when Guard is called (an unreadable,
// empty or short token is an error: the daemon refuses to start) and again
// at every guarded request, so a token rotates by replacing the file;
// leading and trailing white space is ignored. If the file cannot be read
// later, guarded requests are answered 503 (fail closed). An empty
// tokenFile returns h unchanged.
func Guard(h http.Handler, tokenFile string, log zerolog.Logger) (http.Handler, error) {
	if tokenFile == "" {
		return h, nil
	}
	if _, err := readToken(tokenFile); err != nil {
		return nil, err
	}
	log = log.With().Str("component", "admin").Logger()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(Probes, r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		want, err := readToken(tokenFile)
		if err != nil {
			log.Error().Err(err).Msg("admin token unreadable; refusing admin requests")
			http.Error(w, "admin token unavailable", http.StatusServiceUnavailable)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		// Compare digests so that the time taken says nothing about the
		// length or prefix of the token.
		gd, wd := sha256.Sum256([]byte(got)), sha256.Sum256(want)
		if !ok || subtle.ConstantTimeCompare(gd[:], wd[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="spillway admin"`)
			http.Error(w, "admin token required (Authorization: Bearer ...)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}

// readToken reads and checks the token in path.
func readToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("admin-token-file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < MinTokenBytes {
		return nil, fmt.Errorf("admin-token-file %s: token must be at least %d bytes, got %d", path, MinTokenBytes, len(b))
	}
	if bytes.ContainsAny(b, " \t\r\n") {
		return nil, errors.New("admin-token-file " + path + ": token must be one line without spaces")
	}
	return b, nil
}

// MountPprof adds the pprof handlers under /debug/pprof/ to mux, all but
// /debug/pprof/cmdline, which is answered 404.
func MountPprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", http.NotFound)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
