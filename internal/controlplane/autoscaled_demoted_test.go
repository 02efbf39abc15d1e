package controlplane

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/internal/gossip"
)

// TestWithAutoscaledDemoted: the autoscaler's instances join their group,
// an empty one included, with demoted: true where the autoscaler demoted
// them, in a configuration that survives Marshal and Parse (what a gfe
// reads); instances of a group that is not autoscaled are ignored.
func TestWithAutoscaledDemoted(t *testing.T) {
	base := loaded(t, autoscaledYAML, "hash1")
	got, err := withAutoscaled(base, map[string][]gossip.AutoscaledInstance{
		"auto": {{Address: "127.0.0.1:9500"}, {Address: "127.0.0.1:9501", Demoted: true}},
		"g00":  {{Address: "127.0.0.1:9502"}}, // not autoscaled: ignored
	})
	if err != nil {
		t.Fatal(err)
	}
	if got == base || got.Hash == base.Hash {
		t.Fatalf("withAutoscaled returned the base config (hash %s), want a new one", got.Hash)
	}
	type inst struct {
		Addr    string
		MaxConc int
		Demoted bool
	}
	list := func(group string) []inst {
		ref, ok := got.Config.Group(group)
		if !ok {
			t.Fatalf("no group %s", group)
		}
		var out []inst
		for _, in := range ref.Group.Instances {
			out = append(out, inst{in.Address, in.MaxConcurrency, in.Demoted})
		}
		return out
	}
	if diff := cmp.Diff([]inst{{"127.0.0.1:9500", 80, false}, {"127.0.0.1:9501", 80, true}}, list("auto")); diff != "" {
		t.Errorf("group auto (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]inst{{"127.0.0.1:20000", 0, false}, {"127.0.0.1:20001", 0, true}}, list("g00")); diff != "" {
		t.Errorf("group g00 (-want +got):\n%s", diff)
	}
	if capRPS, _ := got.Config.GroupCapacity("web", "auto", 1); capRPS != 100 {
		t.Errorf("auto's capacity with its active instance healthy = %v req/s, want 100", capRPS)
	}
}
