package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// prequalYAML is minimal.good.yaml with the service's policy and extra
// service keys (indented under the service).
func prequalYAML(t *testing.T, policy, extra string) []byte {
	t.Helper()
	s := mustRead(t, "testdata/minimal.good.yaml")
	out := strings.Replace(s, "  - name: web\n", "  - name: web\n    policy: "+policy+"\n"+extra, 1)
	if out == s {
		t.Fatal("fixture changed: nothing replaced")
	}
	return []byte(out)
}

// TestPrequalSection checks policy prequal and its prequal section:
// defaults, accepted values, and every refusal with its path.
func TestPrequalSection(t *testing.T) {
	c, err := Parse(prequalYAML(t, "prequal", ""), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Services[0]; got.Policy != PolicyPrequal || got.Prequal != DefaultPrequal() {
		t.Fatalf("policy %q prequal %+v, want prequal with defaults %+v", got.Policy, got.Prequal, DefaultPrequal())
	}
	c, err = Parse(prequalYAML(t, "prequal", "    prequal: {probe_path: /probe, probe_rate: 50, probe_timeout: 2s}\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Prequal{ProbePath: "/probe", ProbeRate: 50, ProbeTimeout: 2 * time.Second}); c.Services[0].Prequal != want {
		t.Errorf("prequal %+v, want %+v", c.Services[0].Prequal, want)
	}
	for _, tt := range []struct{ name, policy, extra, want string }{
		{"relative path", "prequal", "    prequal: {probe_path: probe}\n", "services[0].prequal.probe_path: must start with /"},
		{"dot segment", "prequal", "    prequal: {probe_path: /a/../b}\n", "services[0].prequal.probe_path: must be a canonical path"},
		{"query", "prequal", "    prequal: {probe_path: \"/p?x=1\"}\n", "services[0].prequal.probe_path: must be a canonical path"},
		{"rate zero", "prequal", "    prequal: {probe_rate: 0}\n", "services[0].prequal.probe_rate: must be in [1, 100000]"},
		{"rate huge", "prequal", "    prequal: {probe_rate: 1e9}\n", "services[0].prequal.probe_rate: must be in [1, 100000]"},
		{"timeout zero", "prequal", "    prequal: {probe_timeout: 0s}\n", "services[0].prequal.probe_timeout: must be > 0"},
		{"timeout long", "prequal", "    prequal: {probe_timeout: 1m}\n", "services[0].prequal.probe_timeout"},
		{"other policy", "least_request", "    prequal: {probe_rate: 10}\n", "services[0].prequal: only valid with policy prequal, not least_request"},
		{"unknown key", "prequal", "    prequal: {probes_per_query: 5}\n", "services[0].prequal.probes_per_query"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(prequalYAML(t, tt.policy, tt.extra), "p.yaml")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestPrequalNotOnTCP: the probes are HTTP requests, so a service behind
// a tcp listener cannot have policy prequal.
func TestPrequalNotOnTCP(t *testing.T) {
	s := mustRead(t, "testdata/listeners.good.yaml")
	bad := strings.Replace(s, "    balancing_mode: CONNECTION\n    policy: hash5\n", "    balancing_mode: CONNECTION\n    policy: prequal\n", 1)
	if bad == s {
		t.Fatal("fixture changed: nothing replaced")
	}
	want := `listeners[2].service: service "db" has policy prequal, whose probes are HTTP requests; a tcp listener's service cannot use it`
	if _, err := Parse([]byte(bad), "p.yaml"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Parse = %v, want an error containing %q", err, want)
	}
}

// TestMarshalForPrequalOldReader: a gfe of a release before policy
// prequal (its schema states neither services[].policy=prequal nor
// services[].prequal; the baseline's too) is
// sent least_request instead, which it parses, and the policy counts as
// dropped; a reader that knows it gets prequal as it is.
func TestMarshalForPrequalOldReader(t *testing.T) {
	c, err := Parse(prequalYAML(t, "prequal", "    prequal: {probe_rate: 50}\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lacking := slices.DeleteFunc(Fields(), func(p string) bool {
		return strings.HasPrefix(p, "services[].prequal") || p == "services[].policy=prequal"
	})
	for name, fs := range map[string]*FieldSet{"baseline": BaselineFields(), "previous": NewFieldSet(lacking)} {
		out, dropped, err := MarshalFor(c, fs)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(dropped, "services[0].policy=prequal") || !slices.Contains(dropped, "services[0].prequal") {
			t.Errorf("%s: dropped %q, want services[0].policy=prequal and services[0].prequal", name, dropped)
		}
		if strings.Contains(string(out), "prequal") {
			t.Errorf("%s: MarshalFor kept prequal:\n%s", name, out)
		}
		back, err := Parse(out, "old.yaml")
		if err != nil {
			t.Fatalf("%s: Parse(MarshalFor): %v\n%s", name, err, out)
		}
		if back.Services[0].Policy != PolicyLeastRequest {
			t.Errorf("%s: Parse(MarshalFor) has policy %v, want least_request", name, back.Services[0].Policy)
		}
	}
	out, dropped, err := MarshalFor(c, NewFieldSet(Fields()))
	if err != nil || len(dropped) != 0 || !strings.Contains(string(out), "policy: prequal") {
		t.Errorf("MarshalFor(every field) = dropped %q, %v:\n%s; want policy prequal kept", dropped, err, out)
	}
}
