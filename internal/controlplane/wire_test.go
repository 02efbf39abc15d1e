package controlplane

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/spillway-lb/spillway/config"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// openAs opens a stream as gfe id stating fields (nil: none, as a gfe from
// before 0.1.0), serving version.
func (r *svcRig) openAs(t *testing.T, ctx context.Context, id, version string, fields []string) pb.ControlPlane_StreamSnapshotsClient {
	t.Helper()
	s, err := r.client.StreamSnapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &pb.Node{Id: id, Site: "paris", BuildVersion: "test " + id, ConfigFields: fields}
	if err := s.Send(&pb.SnapshotRequest{Node: node, VersionInfo: version}); err != nil {
		t.Fatal(err)
	}
	return s
}

// gfeGauges returns the value of every series of the gfe collector named
// name (without the spillway_controlplane_ prefix), by its labels joined
// with ",".
func gfeGauges(t *testing.T, svc *service, name string) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newGFECollector(svc.Nodes))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "spillway_controlplane_"+name {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[labels(m)] = m.GetGauge().GetValue()
		}
	}
	return out
}

func labels(m *dto.Metric) string {
	var l []string
	for _, p := range m.GetLabel() {
		l = append(l, p.GetName()+"="+p.GetValue())
	}
	return strings.Join(l, ",")
}

// TestStreamSendsAnOlderGFEOnlyWhatItReads: the configuration sets a field
// (a listener's fast_path) that one gfe, of an earlier release, does not
// read. That gfe is sent the snapshot without it — YAML its strict parser
// accepts, under a version of its own that still changes with health —
// and /status and the metrics name the field it cannot honour. A gfe that
// reads every field, and one that states no schema (the baseline's, which has
// fast_path), get the canonical snapshot.
func TestStreamSendsAnOlderGFEOnlyWhatItReads(t *testing.T) {
	r := newSvcRig(t)
	r.cfg = loaded(t, manyGroups(2).yaml()+"listeners:\n  - {name: alt, protocol: http, port: 8081, fast_path: false}\n", "cfghash")
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	v1 := r.state(true)
	older := slices.DeleteFunc(config.Fields(), func(p string) bool { return p == "listeners[].fast_path" })

	cur := r.openAs(t, ctx, "gfe-new", "", config.Fields())
	if m := recv(t, cur, v1.Version, "1"); string(m.GetConfigYaml()) != string(r.cfg.YAML) {
		t.Errorf("gfe reading every field got\n%s\nwant the canonical\n%s", m.GetConfigYaml(), r.cfg.YAML)
	}
	ack(t, cur, v1.Version, "1")
	base := r.openAs(t, ctx, "gfe-baseline", "", nil)
	if m := recv(t, base, v1.Version, "1"); string(m.GetConfigYaml()) != string(r.cfg.YAML) {
		t.Errorf("gfe stating no schema got\n%s\nwant the canonical (the baseline reads fast_path)", m.GetConfigYaml())
	}
	ack(t, base, v1.Version, "1")

	old := r.openAs(t, ctx, "gfe-old", "", older)
	m, err := old.Recv()
	if err != nil {
		t.Fatal(err)
	}
	oldV1 := m.GetVersion()
	if oldV1 == v1.Version || !strings.HasSuffix(oldV1, v1.healthHash) {
		t.Errorf("older gfe's version %s, want one of its own ending in the health part %s", oldV1, v1.healthHash)
	}
	y := string(m.GetConfigYaml())
	if strings.Contains(y, "fast_path") || !strings.Contains(y, "port: 8081") {
		t.Errorf("older gfe was sent fast_path, or not the listener:\n%s", y)
	}
	if _, err := config.Parse(m.GetConfigYaml(), "old.yaml"); err != nil {
		t.Errorf("the older gfe's YAML does not parse: %v", err)
	}
	ack(t, old, oldV1, m.GetNonce())
	ns := r.waitNode(t, "gfe-old", "acked", func(n NodeStatus) bool { return n.Acked == oldV1 })
	if want := []string{"listeners[0].fast_path"}; !slices.Equal(ns.Dropped, want) || ns.DeclaredFields != len(older) || ns.Lagging {
		t.Errorf("older gfe's status: dropped %q, declared %d, lagging %v; want %q, %d, false", ns.Dropped, ns.DeclaredFields, ns.Lagging, want, len(older))
	}
	for _, id := range []string{"gfe-new", "gfe-baseline"} {
		if n := r.waitNode(t, id, "acked", func(n NodeStatus) bool { return n.Acked == v1.Version }); len(n.Dropped) != 0 {
			t.Errorf("%s: dropped %q, want none", id, n.Dropped)
		}
	}
	if got, want := gfeGauges(t, r.svc, "gfe_dropped_fields"), map[string]float64{"gfe=gfe-baseline": 0, "gfe=gfe-new": 0, "gfe=gfe-old": 1}; !maps.Equal(got, want) {
		t.Errorf("gfe_dropped_fields = %v, want %v", got, want)
	}
	info := gfeGauges(t, r.svc, "gfe_info")
	for _, want := range []string{
		"build_version=test gfe-baseline,gfe=gfe-baseline,schema=baseline,site=paris",
		"build_version=test gfe-old,gfe=gfe-old,schema=declared,site=paris",
	} {
		if info[want] != 1 {
			t.Errorf("gfe_info has no %s = 1: %v", want, info)
		}
	}

	// A health change reaches the older gfe under a new version of its
	// own; a second stream with its schema gets the same one.
	v2 := r.state(true, "127.0.0.1:20001")
	recv(t, cur, v2.Version, "2")
	m, err = old.Recv()
	if err != nil {
		t.Fatal(err)
	}
	oldV2 := m.GetVersion()
	if oldV2 == oldV1 || oldV2 == v2.Version || !strings.HasSuffix(oldV2, v2.healthHash) || !strings.HasPrefix(oldV2, strings.TrimSuffix(oldV1, v1.healthHash)) {
		t.Errorf("older gfe's version after the health change %s (before %s), want its config part and the new health part %s", oldV2, oldV1, v2.healthHash)
	}
	again := r.openAs(t, ctx, "gfe-old-2", "", older)
	recv(t, again, oldV2, "1")
	// Reconnecting with the version it serves, it is not pushed again.
	back := r.openAs(t, ctx, "gfe-old-3", oldV2, older)
	r.waitNode(t, "gfe-old-3", "announced", func(n NodeStatus) bool { return n.Acked == oldV2 && n.Pushed == "" })
	v3 := r.state(true)
	recv(t, back, strings.TrimSuffix(oldV1, v1.healthHash)+v3.healthHash, "1")
}

// TestNackedGFEIsLagging: a gfe that refuses the snapshot is named as
// lagging — NACKs in a row, its error, the lagging gauge — until it
// accepts one again; one refusal is enough, since a refused snapshot is
// not pushed again until its content changes.
func TestNackedGFEIsLagging(t *testing.T) {
	r := newSvcRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	v1 := r.state(true)
	s := r.openAs(t, ctx, "gfe-1", "", nil)
	recv(t, s, v1.Version, "1")
	ack(t, s, v1.Version, "1")
	r.waitNode(t, "gfe-1", "acked v1", func(n NodeStatus) bool { return n.Acked == v1.Version })
	nack := func(nonce string) {
		t.Helper()
		err := s.Send(&pb.SnapshotRequest{VersionInfo: v1.Version, ResponseNonce: nonce,
			ErrorDetail: &spb.Status{Code: int32(codes.InvalidArgument), Message: "cp.yaml: listeners[0].fast_path: unknown field"}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, down := range []string{"127.0.0.1:20001", "127.0.0.1:20002"} {
		v := r.state(true, down)
		nonce := []string{"2", "3"}[i]
		recv(t, s, v.Version, nonce)
		nack(nonce)
		ns := r.waitNode(t, "gfe-1", "nacked", func(n NodeStatus) bool { return n.NacksInARow == uint64(i+1) })
		if !ns.Lagging || ns.Acked != v1.Version || ns.LastNack == nil || !strings.Contains(ns.LastNack.Error, "fast_path: unknown field") {
			t.Errorf("after NACK %d: %+v, want lagging on v1 with the error", i+1, ns)
		}
	}
	if got := gfeGauges(t, r.svc, "gfe_snapshot_nacks_in_a_row"); got["gfe=gfe-1"] != 2 {
		t.Errorf("gfe_snapshot_nacks_in_a_row = %v, want gfe-1 at 2", got)
	}
	if got := gfeGauges(t, r.svc, "lagging_gfes"); got[""] != 1 {
		t.Errorf("lagging_gfes = %v, want 1", got)
	}
	v4 := r.state(true)
	recv(t, s, v4.Version, "4")
	ack(t, s, v4.Version, "4")
	ns := r.waitNode(t, "gfe-1", "acked again", func(n NodeStatus) bool { return n.Acks == 2 })
	if ns.Lagging || ns.NacksInARow != 0 || ns.Nacks != 2 {
		t.Errorf("after the ACK: %+v, want not lagging, 0 in a row, 2 NACKs in all", ns)
	}
	if got := gfeGauges(t, r.svc, "lagging_gfes"); got[""] != 0 {
		t.Errorf("lagging_gfes = %v after the ACK, want 0", got)
	}
}

// TestWireFormsAreBounded: schemas come from the gfes, so the forms kept
// for one configuration stay at most maxForms however many schemas are
// stated, and each form is still right.
func TestWireFormsAreBounded(t *testing.T) {
	cfg := loaded(t, manyGroups(1).yaml()+"listeners:\n  - {name: alt, protocol: http, port: 8081, fast_path: false}\n", "cfghash")
	var w wireForms
	lacking := slices.DeleteFunc(config.Fields(), func(p string) bool { return p == "listeners[].fast_path" })
	for i := range 3 * maxForms {
		f := w.form(cfg, config.NewFieldSet(append(slices.Clone(lacking), fmt.Sprintf("made.up[%d]", i))))
		if !slices.Equal(f.dropped, []string{"listeners[0].fast_path"}) {
			t.Fatalf("form %d dropped %q, want listeners[0].fast_path", i, f.dropped)
		}
		if n := len(w.by); n > maxForms {
			t.Fatalf("%d forms kept after %d schemas, want at most %d", n, i+1, maxForms)
		}
	}
}
