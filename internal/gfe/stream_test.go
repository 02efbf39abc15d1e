package gfe

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/cpclient"
	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/snapshot"
)

// adminGet serves path on e's admin handler and returns the code and body.
func adminGet(t *testing.T, e *Daemon, path string) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	e.admin.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(b)
}

// metricLine returns the line of /metrics for the unlabelled series name.
func metricLine(t *testing.T, e *Daemon, name string) string {
	t.Helper()
	_, body := adminGet(t, e, "/metrics")
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name+" ") {
			return l
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return ""
}

// TestRefusedSnapshotsAreVisible: a gfe that refuses the control plane's
// snapshots keeps serving its last good one, so nothing in its traffic
// says that health changes no longer reach it. /readyz says it in its
// body (keeping 200: the gfe still routes), /status in control_plane, and
// spillway_gfe_snapshot_nacks_in_a_row counts it; the fields of a newer
// control plane that the snapshot served was applied without are listed
// and counted (spillway_gfe_snapshot_unknown_fields). A gfe that never
// accepted a snapshot is not ready and says why.
func TestRefusedSnapshotsAreVisible(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	c := edgeConfig(t, []string{b.addr()}, "")
	var stream atomic.Pointer[cpclient.Status]
	stream.Store(&cpclient.Status{Connected: "cp-1:7000", Version: "v1", Pushes: 1, Acks: 1})
	newEdge := func() *Daemon {
		cfg := DefaultConfig()
		cfg.Node, cfg.Site = "gfe-nyc", "nyc"
		cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
		g := &fakeGossip{node: cfg.Node, states: map[string]gossip.NodeState{}}
		e, err := New(cfg, Options{Gossip: g, Clock: clock.NewFake(time.Unix(1_000_000, 0)),
			Stream: func() cpclient.Status { return *stream.Load() }})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}

	// Before any snapshot: not ready, and why.
	fresh := newEdge()
	stream.Store(&cpclient.Status{Connected: "cp-1:7000", Pushes: 2, Nacks: 2, NacksInARow: 2,
		LastNack: "snapshot.config_yaml: cp.yaml: listeners[0].fast_path: unknown field"})
	code, body := adminGet(t, fresh, "/readyz")
	if want := "not ready\nrefusing snapshots: the last 2 pushed by the control plane were refused (NACK); serving nothing yet, which no longer follows its health changes: snapshot.config_yaml: cp.yaml: listeners[0].fast_path: unknown field\n"; code != http.StatusServiceUnavailable || body != want {
		t.Errorf("/readyz before any snapshot = %d %q, want 503 %q", code, body, want)
	}

	e := runEdge(t, newEdge(), c).Daemon
	stream.Store(&cpclient.Status{Connected: "cp-1:7000", Version: "v1", Pushes: 1, Acks: 1})
	if code, body := adminGet(t, e, "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz = %d %q, want 200 \"ready\\n\"", code, body)
	}

	// A snapshot of a newer control plane, applied without the fields it
	// does not know; then three refused.
	newer := snapshot.FromConfig("v2", c)
	newer.UnknownFields = []string{"tracing", "services[0].warmup"}
	if err := e.ApplySnapshot(newer); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_000_100, 0).UTC()
	stream.Store(&cpclient.Status{Connected: "cp-1:7000", Version: "v2", Pushes: 5, Acks: 2, Nacks: 3, NacksInARow: 3,
		LastNack: "apply snapshot v5: certificate missing", LastNackAt: at})
	code, body = adminGet(t, e, "/readyz")
	for _, want := range []string{
		"ready\n",
		"refusing snapshots: the last 3 pushed by the control plane were refused (NACK); serving v2, which no longer follows its health changes: apply snapshot v5: certificate missing\n",
		"snapshot v2 applied without 2 fields this build does not know (a newer control plane): tracing, services[0].warmup\n",
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/readyz = %d %q, want 200 with %q", code, body, want)
		}
	}
	_, js := adminGet(t, e, "/status")
	var st status.Status
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	want := &status.StreamStatus{Connected: "cp-1:7000", Serving: "v2", Pushes: 5, Acks: 2, Nacks: 3, NacksInARow: 3, Refusing: true,
		LastNack: "apply snapshot v5: certificate missing", LastNackAt: &at}
	if st.ControlPlane == nil || *st.ControlPlane.LastNackAt != at {
		t.Fatalf("/status control_plane = %+v, want %+v", st.ControlPlane, want)
	}
	got := *st.ControlPlane
	got.LastNackAt, want.LastNackAt = nil, nil
	if got != *want || !slices.Equal(st.UnknownFields, newer.UnknownFields) {
		t.Errorf("/status control_plane = %+v, unknown %v; want %+v, %v", got, st.UnknownFields, *want, newer.UnknownFields)
	}
	for name, want := range map[string]string{
		"spillway_gfe_snapshot_nacks_in_a_row": "3", "spillway_gfe_snapshot_nacks_total": "3",
		"spillway_gfe_snapshot_acks_total": "2", "spillway_gfe_snapshot_unknown_fields": "2",
	} {
		if l := metricLine(t, e, name); l != name+" "+want {
			t.Errorf("/metrics: %q, want %s %s", l, name, want)
		}
	}

	// Accepted again: the warning goes.
	stream.Store(&cpclient.Status{Connected: "cp-1:7000", Version: "v6", Pushes: 6, Acks: 3, Nacks: 3,
		LastNack: "apply snapshot v5: certificate missing", LastNackAt: at})
	if err := e.ApplySnapshot(snapshot.FromConfig("v6", c)); err != nil {
		t.Fatal(err)
	}
	if code, body := adminGet(t, e, "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz after an ACK = %d %q, want 200 \"ready\\n\"", code, body)
	}
	if l := metricLine(t, e, "spillway_gfe_snapshot_nacks_in_a_row"); l != "spillway_gfe_snapshot_nacks_in_a_row 0" {
		t.Errorf("/metrics after an ACK: %q, want 0", l)
	}
}

// TestNoControlPlaneNoStreamStatus: a gfe serving a local file only has no
// control_plane on /status and its snapshot metrics stay at 0.
func TestNoControlPlaneNoStreamStatus(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	e := startEdge(t, edgeConfig(t, []string{b.addr()}, ""), time.Second).Daemon
	if st := e.Status(); st.ControlPlane != nil || st.UnknownFields != nil {
		t.Errorf("Status() control_plane %+v, unknown %v; want neither", st.ControlPlane, st.UnknownFields)
	}
	if l := metricLine(t, e, "spillway_gfe_snapshot_nacks_in_a_row"); l != "spillway_gfe_snapshot_nacks_in_a_row 0" {
		t.Errorf("/metrics: %q, want 0", l)
	}
}
