package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMarshalWritesOnlyWhatDiffersFromDefaults: the canonical YAML the
// control plane sends carries what the operator set, not every default —
// a field at its default would break a gfe of a release that does not
// know the field (the snapshot of every service refused) although the
// operator never set it. The minimal fixture comes back as it was
// written, a listener keeps its protocol (which selects its defaults),
// and a value set to something other than its default stays.
func TestMarshalWritesOnlyWhatDiffersFromDefaults(t *testing.T) {
	out, err := Marshal(loadT(t, "testdata/minimal.good.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := `regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - name: g1
            instances:
              - address: 127.0.0.1:9001
services:
  - name: web
    backends:
      - group: g1
        max_rate_per_instance: 10
routes:
  - service: web
`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("Marshal(minimal) (-want +got):\n%s", diff)
	}

	out, err = Marshal(loadT(t, "testdata/listeners.good.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		text string
		want int
	}{
		{"protocol: http\n", 1}, // kept, though it is the default of an http listener
		{"protocol: https\n", 1},
		{"protocol: tcp\n", 2},
		{"fast_path: false\n", 1}, // set to other than its default
		{"fast_path: true", 0},    // the default, left out
		{"idle_timeout: 1h0m0s\n", 1},
		{"idle_timeout: 10m0s", 0}, // tcp's default
		{"read_header_timeout: 10s", 0},
		{"capacity_scaler", 0},
		{"policy: waterfall", 0},
	} {
		if got := strings.Count(string(out), tt.text); got != tt.want {
			t.Errorf("Marshal(listeners) has %q %d times, want %d:\n%s", tt.text, got, tt.want, out)
		}
	}
}

// TestMarshalForLeavesOutWhatTheReaderCannotRead: for a reader that lacks
// fields, MarshalFor leaves them out and names each one the config sets;
// for a reader that knows every field it is Marshal byte for byte.
func TestMarshalForLeavesOutWhatTheReaderCannotRead(t *testing.T) {
	c := loadT(t, "testdata/listeners.good.yaml")
	full, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	same, dropped, err := MarshalFor(c, NewFieldSet(Fields()))
	if err != nil {
		t.Fatal(err)
	}
	if string(same) != string(full) || len(dropped) != 0 {
		t.Errorf("MarshalFor(every field) dropped %v and differs from Marshal: %v", dropped, string(same) != string(full))
	}

	lacking := slices.DeleteFunc(Fields(), func(p string) bool {
		return p == "listeners[].fast_path" || p == "services[].outlier_detection" || strings.HasPrefix(p, "services[].outlier_detection.")
	})
	out, dropped, err := MarshalFor(c, NewFieldSet(lacking))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"services[0].outlier_detection", "listeners[1].fast_path"}
	if !slices.Equal(dropped, want) {
		t.Errorf("dropped %q, want %q", dropped, want)
	}
	if strings.Contains(string(out), "fast_path") || strings.Contains(string(out), "outlier_detection") {
		t.Errorf("MarshalFor kept a field the reader lacks:\n%s", out)
	}
	// What is left is what the reader reads, strictly.
	back, err := Parse(out, "for-old-reader.yaml")
	if err != nil {
		t.Fatalf("Parse(MarshalFor): %v\n%s", err, out)
	}
	if back.Listeners[1].FastPath != true || back.Listeners[1].IdleTimeout != c.Listeners[1].IdleTimeout {
		t.Errorf("listener public after MarshalFor: fast_path %v idle %v, want the default true and %v", back.Listeners[1].FastPath, back.Listeners[1].IdleTimeout, c.Listeners[1].IdleTimeout)
	}
}

// TestParseSnapshotToleratesUnknownFields: a snapshot's config may carry
// fields of a newer release; ParseSnapshot applies the rest and names the
// unknown ones, where Parse (an operator's file) refuses them. Values of
// the wrong type and failed validation are errors in both.
func TestParseSnapshotToleratesUnknownFields(t *testing.T) {
	base := mustRead(t, "testdata/listeners.good.yaml")
	newer := strings.Replace(base, "    fast_path: false\n", "    fast_path: false\n    zero_rtt: true\n", 1)
	newer = strings.Replace(newer, "routes:\n", "tracing:\n  sample: 0.1\nroutes:\n", 1)
	newer = strings.Replace(newer, "      max_ejection_percent: 100\n", "      max_ejection_percent: 100\n      success_rate: {minimum_hosts: 5}\n", 1)
	if newer == base {
		t.Fatal("fixture changed: nothing replaced")
	}

	if _, err := Parse([]byte(newer), "cp.yaml"); err == nil || !strings.Contains(err.Error(), "listeners[1].zero_rtt: unknown field") {
		t.Fatalf("Parse (strict) = %v, want listeners[1].zero_rtt: unknown field", err)
	}
	got, unknown, err := ParseSnapshot([]byte(newer), "cp.yaml")
	if err != nil {
		t.Fatalf("ParseSnapshot: %v", err)
	}
	wantUnknown := []string{"services[0].outlier_detection.success_rate", "listeners[1].zero_rtt", "tracing"}
	slices.Sort(unknown)
	slices.Sort(wantUnknown)
	if !slices.Equal(unknown, wantUnknown) {
		t.Errorf("unknown = %q, want %q", unknown, wantUnknown)
	}
	want, err := Parse([]byte(base), "cp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, ignoreIndex); diff != "" {
		t.Errorf("ParseSnapshot applied something other than the known fields (-want +got):\n%s", diff)
	}
	if _, unknown, err := ParseSnapshot([]byte(base), "cp.yaml"); err != nil || unknown != nil {
		t.Errorf("ParseSnapshot(known fields only) = %v, %v; want no unknown field", unknown, err)
	}

	for _, tt := range []struct{ name, yaml, want string }{
		{"wrong type", strings.Replace(newer, "port: 8443", "port: high", 1), "listeners[1].port: expected an integer"},
		{"invalid", strings.Replace(newer, "max_ejection_percent: 100", "max_ejection_percent: 101", 1), "max_ejection_percent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseSnapshot([]byte(tt.yaml), "cp.yaml")
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseSnapshot = %v, want an ErrInvalid naming %q", err, tt.want)
			}
		})
	}
}

// TestBaselineFieldsAreB242d36: the frozen schema a control plane
// assumes of a gfe that states none is the baseline's, which had listeners'
// fast_path and instances' demoted, and every path in it is well formed.
func TestBaselineFieldsAreB242d36(t *testing.T) {
	b := BaselineFields()
	if b.Len() != 134 {
		t.Errorf("BaselineFields has %d paths, want the baseline's 134", b.Len())
	}
	for _, p := range []string{"listeners[].fast_path", "regions[].zones[].groups[].instances[].demoted", "services[].feedback.confirm_utilization", "quota.consumers[].api_key"} {
		if !b.Has(p) {
			t.Errorf("BaselineFields lacks %s", p)
		}
	}
	for _, l := range strings.Split(baselineFields, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		for _, seg := range strings.Split(l, ".") {
			if name := strings.TrimSuffix(seg, "[]"); name == "" || strings.ContainsAny(name, " []\t") {
				t.Errorf("baseline path %q: malformed segment %q", l, seg)
			}
		}
	}
}

// TestMarshalForLeavesOutAValueTheReaderCannotRead: a policy added after
// the schema negotiation (envoy_priority) is a value a gfe of an earlier
// release would refuse, and with it the whole snapshot. For a reader
// whose schema does not state the value (an earlier release's, or the
// baseline's) MarshalFor leaves the policy out, so that the reader runs
// the default (waterfall) and every other service as configured, and
// names it; a reader that states it gets Marshal's YAML.
func TestMarshalForLeavesOutAValueTheReaderCannotRead(t *testing.T) {
	src := strings.Replace(mustRead(t, "testdata/minimal.good.yaml"), "  - name: web\n", "  - name: web\n    policy: envoy_priority\n", 1)
	c, err := Parse([]byte(src), "envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(Fields(), "services[].policy=envoy_priority") {
		t.Fatalf("Fields() does not state envoy_priority: %q", Fields())
	}
	full, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	same, dropped, err := MarshalFor(c, NewFieldSet(Fields()))
	if err != nil || string(same) != string(full) || len(dropped) != 0 {
		t.Errorf("MarshalFor(every field) = dropped %v, err %v, same as Marshal %v", dropped, err, string(same) == string(full))
	}
	earlier := slices.DeleteFunc(Fields(), func(p string) bool { return p == "services[].policy=envoy_priority" })
	for name, known := range map[string]*FieldSet{"earlier release": NewFieldSet(earlier), "baseline": BaselineFields()} {
		out, dropped, err := MarshalFor(c, known)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"services[0].policy=envoy_priority"}; !slices.Equal(dropped, want) {
			t.Errorf("%s: dropped %q, want %q", name, dropped, want)
		}
		if strings.Contains(string(out), "envoy_priority") {
			t.Errorf("%s: sent envoy_priority:\n%s", name, out)
		}
		back, err := Parse(out, "for-old-reader.yaml")
		if err != nil {
			t.Fatalf("%s: Parse(MarshalFor): %v\n%s", name, err, out)
		}
		if p := back.Services[0].Policy; p != PolicyWaterfall {
			t.Errorf("%s: policy %s after MarshalFor, want the default waterfall", name, p)
		}
	}
	// A policy every release knows is sent as it is.
	c.Services[0].Policy = PolicyLeastRequest
	out, dropped, err := MarshalFor(c, NewFieldSet(earlier))
	if err != nil || len(dropped) != 0 || !strings.Contains(string(out), "policy: least_request") {
		t.Errorf("least_request for an earlier release: dropped %v, err %v:\n%s", dropped, err, out)
	}
}
