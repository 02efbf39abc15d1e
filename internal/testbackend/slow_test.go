package testbackend

import (
	"net/http"
	"testing"
	"time"
)

// TestAdminSlow: POST /admin/slow multiplies the service time from the next
// request on (counted in antagonized) until slowdown=1, through the
// instance's admin and the process admin; a factor below 1 or not a number
// is refused. Only the request served while it was set counts as slowed.
func TestAdminSlow(t *testing.T) {
	capa := DefaultCapacity()
	capa.ServiceTime = 5 * time.Millisecond
	s := startServer(t, Config{Instances: []InstanceConfig{testInstance("a", capa)}, AdminAddr: "127.0.0.1:0"}, nil)
	base := "http://" + s.Addr("a")
	admin := "http://" + s.AdminAddr()
	c := newClient(t, "")
	timed := func() time.Duration {
		t0 := time.Now()
		if r := mustDo(t, c, http.MethodGet, base+"/x"); r.status != 200 {
			t.Fatalf("GET /x: %d", r.status)
		}
		return time.Since(t0)
	}
	for _, st := range []struct {
		url  string
		want int
	}{
		{base + "/admin/slow?slowdown=0.5", 400},
		{base + "/admin/slow?slowdown=x", 400},
		{admin + "/admin/slow?slowdown=2", 400}, // no instance
	} {
		if r := mustDo(t, c, http.MethodPost, st.url); r.status != st.want {
			t.Errorf("POST %s = %d, want %d", st.url, r.status, st.want)
		}
	}
	timed() // not slowed: antagonized stays 0
	if r := mustDo(t, c, http.MethodPost, base+"/admin/slow?slowdown=40"); r.status != 200 || r.body != `{"slowdown":40}`+"\n" {
		t.Fatalf("set slowdown: %d %q", r.status, r.body)
	}
	if d := timed(); d < 200*time.Millisecond {
		t.Errorf("slowed request took %v, want >= 200ms (40 × 5ms)", d)
	}
	if r := mustDo(t, c, http.MethodPost, admin+"/admin/slow?instance=a&slowdown=1"); r.status != 200 {
		t.Fatalf("end slowdown: %d %q", r.status, r.body)
	}
	timed()
	if got := getStats(t, c, base); got.Antagonized != 1 || got.Served != 3 {
		t.Errorf("stats: antagonized %d served %d, want 1, 3", got.Antagonized, got.Served)
	}
}
