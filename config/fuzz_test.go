package config

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse: Parse never panics; every error it returns is a content error
// naming the input; a config it accepts validates again, answers lookups, and
// survives Marshal and Parse unchanged.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	examples, _ := filepath.Glob("../configs/*.yaml")
	for _, p := range append(files, examples...) {
		f.Add([]byte(mustRead(f, p)))
	}
	for _, s := range []string{
		"", "{}", "[]", "regions: 1", "routes: [~, 1, [], {}]", "a.b.c: 1",
		"services: [{name: web, backends: [{group: g, max_rate: .inf}]}]",
		"services: [{name: web, spill: {slope: .nan}}]",
		"regions: [{name: r, zones: [{name: z, groups: [{name: g, instances: [{address: '[::1]:1'}]}]}]}]",
		"&a [*a]", "? [a]\n: b", "1: 2", "services: [{1: 2}]",
		"listeners: [{name: a, protocol: tcp, port: 1, max_request_body_bytes: 9223372036854775807}]",
		"listeners: [{protocol: https, certificates: [~, {cert_file: 1}]}, 7]",
		"routes: [{retries: 1e3, timeout: 1ns}]\nservices: [{outlier_detection: {max_ejection_time: -1s}}]",
		// The upper bounds of the first security review, finding 7
		// (SECURITY.md).
		"services: [{name: web, backends: [{group: g, max_rate_per_instance: 1e308}]}]",
		"services: [{name: web, backends: [{group: g, max_rate: 1e9, max_connections: 9223372036854775807}]}]",
		"services: [{name: web, spill: {slope: 1e308}, session_affinity: {cookie_ttl: 2562047h}}]",
		"services: [{name: web, health_check: {interval: 2h, healthy_threshold: 101}, outlier_detection: {consecutive_5xx: 99999, base_ejection_time: 25h}}]",
		"listeners: [{name: a, protocol: http, port: 1, max_header_bytes: 9223372036854775807, idle_timeout: 2562047h}]",
		"listeners: [{name: a, protocol: tcp, port: 1, service: db, max_connections: 0, max_connections_per_client: 1000001, first_byte_timeout: 2h}]",
		"regions: [{name: r, zones: [{name: z, groups: [{name: g, instances: [{address: '1.2.3.4:1', max_concurrency: 9223372036854775807}]}]}]}]",
		// The lower bounds of the second security review.
		"services: [{name: web, health_check: {interval: 1ms, timeout: 500us}, feedback: {queue_delay: 1ns}, max_pending_requests: 0}]",
		"routes: [{service: web, timeout: 1ms, per_try_timeout: 1ns}]",
		"regions: [{name: r, zones: [{name: z, groups: [{name: g, autoscaling: {max_instances: 2, concurrency_window: 1ns, min_pending_wait: 1ms}}]}]}]",
		"services: [{name: web, session_affinity: {type: generated_cookie, cookie_name: s, cookie_secret_file: /proc/self/environ}}]",
		// Autoscaled groups that start empty, and demoted instances.
		"regions: [{name: r, zones: [{name: z, groups: [{name: g, instances: [], autoscaling: {max_instances: 2}}]}]}]",
		"regions: [{name: r, zones: [{name: z, groups: [{name: g, autoscaling: {max_instances: 2}}, {name: h, instances: [{address: '1.2.3.4:1', demoted: true}]}]}]}]",
		// Autoscaling blocks: absent, empty, on, and out of range.
		"regions: [{name: r, zones: [{name: z, groups: [{name: g, instances: [{address: '1.2.3.4:1'}], autoscaling: {}}]}]}]",
		"regions: [{name: r, zones: [{name: z, groups: [{name: g, instances: [{address: '1.2.3.4:1'}], autoscaling: {max_instances: 3, tolerance: 0}}]}]}]",
		"regions: [{name: r, zones: [{name: z, groups: [{name: g, instances: [{address: '1.2.3.4:1'}], autoscaling: {max_instances: 1e9, cpu_target: .nan, cold_start: 2562047h}}]}]}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse error is not ErrInvalid: %v", err)
			}
			fes := FieldErrors(err)
			if len(fes) == 0 {
				t.Fatalf("Parse error holds no FieldError: %v", err)
			}
			for _, fe := range fes {
				if fe.File != "fuzz.yaml" {
					t.Fatalf("FieldError without the file name: %v", fe)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config does not re-validate: %v", err)
		}
		for _, r := range c.Routes {
			if _, ok := c.Service(r.Service); !ok {
				t.Fatalf("route to missing service %q", r.Service)
			}
			if got, ok := c.Route(r.Host, r.PathPrefix); !ok {
				t.Fatalf("Route(%q, %q) found nothing, want a route", r.Host, r.PathPrefix)
			} else if _, ok := c.Service(got.Service); !ok {
				t.Fatalf("Route returned a route to missing service %q", got.Service)
			}
		}
		for _, g := range c.Groups() {
			if _, ok := c.Group(g.Group.Name); !ok {
				t.Fatalf("Group(%q) not found", g.Group.Name)
			}
		}
		out, err := Marshal(c)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		back, err := Parse(out, "fuzz.yaml")
		if err != nil {
			t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
		}
		if diff := cmp.Diff(c, back, ignoreIndex); diff != "" {
			t.Fatalf("Parse(Marshal(c)) differs (-c +reparsed):\n%s", diff)
		}
	})
}
