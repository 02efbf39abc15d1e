package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestNewProxy(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Host+" "+r.Header.Get("X-Forwarded-For")+" "+r.URL.Path)
	}))
	defer origin.Close()
	rp, err := newProxy(strings.TrimPrefix(origin.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "http://front.test/a/b", nil)
	req.RemoteAddr = "192.0.2.7:1234"
	w := httptest.NewRecorder()
	rp.ServeHTTP(w, req)
	if want := "front.test 192.0.2.7 /a/b"; w.Code != 200 || w.Body.String() != want {
		t.Errorf("proxied = %d %q, want 200 %q", w.Code, w.Body.String(), want)
	}
}

func TestNewProxyBadOrigin(t *testing.T) {
	for _, origin := range []string{"", "http://x:1", "x:1/path"} {
		if _, err := newProxy(origin); err == nil {
			t.Errorf("newProxy(%q) = nil error, want an error", origin)
		}
	}
}
