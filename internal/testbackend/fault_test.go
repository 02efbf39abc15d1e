package testbackend

import (
	"net/http"
	"testing"
)

// TestFault injects a 5xx answer through the instance's own admin route and
// the process admin: normal requests get it without taking capacity, health
// checks still pass, and status=0 ends it.
func TestFault(t *testing.T) {
	s := startServer(t, Config{Instances: []InstanceConfig{testInstance("a", DefaultCapacity())}, AdminAddr: "127.0.0.1:0"}, nil)
	base := "http://" + s.Addr("a")
	admin := "http://" + s.AdminAddr()
	c := newClient(t, "")
	steps := []struct {
		name       string
		method     string
		url        string
		wantStatus int
		wantBody   string
	}{
		{"serves at start", http.MethodGet, base + "/x", 200, ""},
		{"set a fault", http.MethodPost, base + "/admin/fault?status=500", 200, `{"status":500}` + "\n"},
		{"request faulted", http.MethodGet, base + "/x", 500, "fault injected\n"},
		{"health check passes", http.MethodGet, base + "/healthz", 200, "ok\n"},
		{"bad status", http.MethodPost, base + "/admin/fault?status=200", 400, ""},
		{"bad status changes nothing", http.MethodGet, base + "/y", 500, ""},
		{"process admin changes it", http.MethodPost, admin + "/admin/fault?instance=a&status=503", 200, `{"status":503}` + "\n"},
		{"request faulted with 503", http.MethodGet, base + "/x", 503, ""},
		{"process admin needs an instance", http.MethodPost, admin + "/admin/fault?status=0", 400, ""},
		{"unknown instance", http.MethodPost, admin + "/admin/fault?instance=nope&status=0", 404, ""},
		{"end the fault", http.MethodPost, admin + "/admin/fault?instance=a&status=0", 200, `{"status":0}` + "\n"},
		{"serves again", http.MethodGet, base + "/x", 200, ""},
	}
	for _, st := range steps {
		r := mustDo(t, c, st.method, st.url)
		if r.status != st.wantStatus || (st.wantBody != "" && r.body != st.wantBody) {
			t.Errorf("%s: %s %s = %d %q, want %d %q", st.name, st.method, st.url, r.status, r.body, st.wantStatus, st.wantBody)
		}
		if r.status < 300 && st.method == http.MethodGet && r.header.Get(HeaderBackend) != "a" {
			t.Errorf("%s: %s = %q, want a", st.name, HeaderBackend, r.header.Get(HeaderBackend))
		}
	}
	if got := getStats(t, c, base); got.Faulted != 3 || got.Served != 2 || got.InFlight != 0 {
		t.Errorf("stats: faulted %d served %d in flight %d; want 3, 2, 0", got.Faulted, got.Served, got.InFlight)
	}
}
