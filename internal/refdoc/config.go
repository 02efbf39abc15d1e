package refdoc

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/config"
)

// units gives the unit of every number of the schema that is not a
// duration, by path. TestUnitsCoverSchema fails when a number has none or
// an entry names no key.
var units = map[string]string{
	"regions[].zones[].groups[].instances[].max_concurrency":              "requests in flight",
	"regions[].zones[].groups[].autoscaling.min_instances":                "instances",
	"regions[].zones[].groups[].autoscaling.max_instances":                "instances",
	"regions[].zones[].groups[].autoscaling.initial_instances":            "instances",
	"regions[].zones[].groups[].autoscaling.cpus_per_instance":            "CPU cores",
	"regions[].zones[].groups[].autoscaling.max_concurrency_per_instance": "requests in flight",
	"regions[].zones[].groups[].autoscaling.cpu_target":                   "fraction of cpus_per_instance",
	"regions[].zones[].groups[].autoscaling.concurrency_target":           "fraction of max_concurrency_per_instance",
	"regions[].zones[].groups[].autoscaling.act_high_cpu":                 "fraction of cpus_per_instance",
	"regions[].zones[].groups[].autoscaling.act_low_cpu":                  "fraction of cpus_per_instance",
	"regions[].zones[].groups[].autoscaling.tolerance":                    "fraction of the target",
	"regions[].zones[].groups[].autoscaling.demoted_idle_utilization":     "fraction of capacity",
	"regions[].zones[].groups[].autoscaling.demoted_keep_fraction":        "fraction of the instances demoted at once",
	"regions[].zones[].groups[].autoscaling.pending_wait_cold_starts":     "multiple of cold_start",
	"services[].backends[].max_rate_per_instance":                         "requests/s",
	"services[].backends[].max_rate":                                      "requests/s",
	"services[].backends[].max_connections_per_instance":                  "connections or requests in flight",
	"services[].backends[].max_connections":                               "connections or requests in flight",
	"services[].backends[].max_utilization":                               "utilization (1 = 100%)",
	"services[].backends[].utilization_rate_per_instance":                 "requests/s at 100% utilization",
	"services[].backends[].capacity_scaler":                               "factor",
	"services[].health_check.port":                                        "TCP port",
	"services[].health_check.healthy_threshold":                           "consecutive checks",
	"services[].health_check.unhealthy_threshold":                         "consecutive checks",
	"services[].health_check.jitter":                                      "fraction of interval",
	"services[].spill.threshold":                                          "fraction of the region's instances healthy",
	"services[].spill.slope":                                              "share kept per unit of healthy fraction",
	"services[].outlier_detection.consecutive_5xx":                        "responses",
	"services[].outlier_detection.consecutive_connect_failures":           "connection attempts",
	"services[].outlier_detection.max_ejection_percent":                   "percent of a group's healthy instances",
	"services[].target_utilization":                                       "fraction of capacity",
	"services[].max_pending_requests":                                     "requests waiting at one gfe",
	"services[].feedback.reject_fraction":                                 "fraction of requests",
	"services[].feedback.decrease":                                        "fraction of the group's load",
	"services[].feedback.recover_rate":                                    "fraction of capacity per second",
	"services[].feedback.min_factor":                                      "fraction of declared capacity",
	"services[].feedback.max_shrink":                                      "fraction of effective capacity",
	"services[].feedback.confirm_utilization":                             "reported utilization (1 = 100%)",
	"services[].load_aware.utilization_weight":                            "factor",
	"services[].overload.admit":                                           "fraction of the plan's capacity",
	"services[].overload.max_shed":                                        "fraction of the service's arrivals at one gfe",
	"services[].prequal.probe_rate":                                       "probes per second per gfe",
	"routes[].retries":                                                    "attempts",
	"listeners[].port":                                                    "TCP port",
	"listeners[].max_connections":                                         "connections",
	"listeners[].max_connections_per_client":                              "connections per client IP address",
	"listeners[].max_header_bytes":                                        "bytes",
	"listeners[].max_request_body_bytes":                                  "bytes",
	"quota.metrics[].default_limit":                                       "the metric's unit per consumer per minute",
	"quota.charges[].cost":                                                "the metric's unit per request (requests) or per byte (bytes)",
	"quota.producer_overrides[].limit":                                    "the metric's unit per minute",
	"quota.consumer_overrides[].limit":                                    "the metric's unit per minute",
}

// examples has one example per top-level section, in schema order. Joined,
// they are one valid configuration (TestExamplesAreOneValidConfig).
var examples = []struct{ key, yaml string }{
	{"regions", `regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: us-east-b-web
            instances:
              - address: 10.0.1.21:9001
                max_concurrency: 80
              - address: 10.0.1.22:9001
          - name: us-east-b-burst                # scaled from zero by the control plane
            autoscaling: {max_instances: 10, cold_start: 5s}
  - name: eu-west
    zones:
      - name: eu-west-b
        groups:
          - name: eu-west-b-web
            instances:
              - address: 10.0.2.21:9001
`},
	{"services", `services:
  - name: web
    policy: waterfall
    balancing_mode: RATE
    backends:
      - {group: us-east-b-web, max_rate_per_instance: 100}
      - {group: us-east-b-burst, max_rate_per_instance: 100}
      - {group: eu-west-b-web, max_rate_per_instance: 100, capacity_scaler: 0.5}
    session_affinity:
      type: generated_cookie
      cookie_name: SPILLWAY
      cookie_ttl: 1h
      cookie_secret_file: secrets/cookie        # relative to this file
    health_check: {protocol: http, path: /healthz, interval: 5s, timeout: 1s}
    feedback: {confirm_utilization: 0.8}
  - name: db
    policy: hash5
    balancing_mode: CONNECTION
    backends:
      - {group: us-east-b-web, max_connections_per_instance: 200}
    health_check: {protocol: tcp}
`},
	{"routes", `routes:
  - {host: api.example.com, path_prefix: /v1/, service: web, timeout: 5s, retries: 2, per_try_timeout: 1s}
  - {host: "*", service: web}
`},
	{"listeners", `listeners:
  - {name: public-http, protocol: http, port: 80}
  - name: public-https
    protocol: https
    port: 443
    certificates:
      - {cert_file: /etc/spillway/tls/www.crt, key_file: /etc/spillway/tls/www.key}
    max_connection_age: 10m
  - {name: db, protocol: tcp, port: 5432, service: db, idle_timeout: 1h}
`},
	{"quota", `quota:
  metrics: [{name: calls, default_limit: 600}]
  charges: [{service: web, path_prefix: /v1/, metric: calls}]
  consumers: [{api_key: acme-key-0001, project: acme}]
  producer_overrides: [{project: acme, metric: calls, limit: 6000}]
  consumer_overrides: [{project: acme, metric: calls, limit: 3000}]
`},
}

// ConfigPage returns docs/config.md, reading config's doc comments from
// the module at root.
func ConfigPage(root string) (string, error) {
	docs, err := parseDocs(filepath.Join(root, "config"))
	if err != nil {
		return "", err
	}
	keys := config.Schema()
	qualified := map[string]string{} // "Region.Name" → "regions[].name"
	for _, k := range keys {
		q := k.Owner.Name() + "." + k.Field
		if _, ok := qualified[q]; !ok {
			qualified[q] = k.Path
		}
	}
	var b strings.Builder
	b.WriteString(configIntro)
	b.WriteString("\n## Contents\n\n")
	for _, k := range keys {
		if isSection(k.Type) {
			fmt.Fprintf(&b, "%s- [`%s`](#%s)\n", strings.Repeat("  ", k.Depth), k.Path, anchor(k.Path))
		}
	}
	for _, k := range keys {
		if k.Depth == 0 {
			b.WriteString("\n---\n")
		}
		if isSection(k.Type) {
			if err := writeSection(&b, k, docs, qualified); err != nil {
				return "", err
			}
			continue
		}
		if err := writeKey(&b, k, docs, qualified); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

const configIntro = `# Configuration reference

<!-- Generated by go run ./cmd/refdoc (go generate ./docs/) from package config: do not edit. -->

Every key of the operator configuration, the YAML file the control plane loads (` + "`controlplane --config FILE`" + `)
and a gfe may serve on its own (` + "`gfe --config FILE`" + `), in the order of the schema. Each key has its path
(list elements written ` + "`[]`" + `), its type, unit, the value it takes when absent, the bounds the validator
enforces (what it answers when a value is out of range) and its doc comment from
[` + "`config`" + `](../config/). ` + "`controlplane --check-config FILE`" + ` checks a file as the daemon would load it.

- Unknown keys are errors; every problem is reported at once, each with its file and path
  (` + "`services[0].polcy: unknown field (did you mean \"policy\"?)`" + `).
- Durations are strings in Go's syntax (` + "`300ms`, `5s`, `1m30s`" + `); a bare number is rejected.
- A key with no value (` + "`spill:`" + `) is the same as an absent key. Keys are case-insensitive.
- Any scalar can be overridden from the environment: ` + "`SPILLWAY_`" + ` and the path with list indexes as
  numbers, every separator an underscore, upper case
  (` + "`SPILLWAY_SERVICES_0_BACKENDS_1_CAPACITY_SCALER=0`" + `); an override changes only entries that exist in
  the file.

[configuration.md](configuration.md) explains how the pieces work together (units, the closed loop,
demoted instances, quota); the example files are in [` + "`configs/`" + `](../configs/).
`

// isSection reports whether t is a map of keys or a list of maps.
func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t != reflect.TypeFor[time.Duration]() ||
		t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct
}

// anchor is GitHub's anchor for a heading that is the code span `path`.
func anchor(path string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(path) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// ownKeys maps the Go field names of struct t to their YAML keys.
func ownKeys(t reflect.Type) map[string]string {
	m := map[string]string{}
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("mapstructure"); tag != "" && tag != "-" {
			m[t.Field(i).Name] = tag
		}
	}
	return m
}

func writeSection(b *strings.Builder, k config.SchemaKey, docs *sourceDocs, qualified map[string]string) error {
	level := "###"
	if k.Depth == 0 {
		level = "##"
	}
	fmt.Fprintf(b, "\n%s `%s`\n\n", level, k.Path)
	kind := "map"
	elem := k.Type
	if k.Type.Kind() == reflect.Slice {
		kind, elem = "list of maps", k.Type.Elem()
	}
	line := "**" + kind + "**"
	if k.Optional {
		line += " · absent: off; present: absent keys take the defaults below"
	}
	b.WriteString(line + "\n\n")
	if doc := docs.fields[k.Owner.Name()][k.Field]; doc != "" {
		b.WriteString(markdown(doc, ownKeys(k.Owner), qualified) + "\n\n")
	}
	if doc := docs.types[elem.Name()]; doc != "" && elem.Name() != "Config" {
		b.WriteString(markdown(doc, ownKeys(elem), qualified) + "\n\n")
	}
	for _, ex := range examples {
		if ex.key == k.Path {
			fmt.Fprintf(b, "Example:\n\n```yaml\n%s```\n", ex.yaml)
		}
	}
	return nil
}

func writeKey(b *strings.Builder, k config.SchemaKey, docs *sourceDocs, qualified map[string]string) error {
	v, err := probe(k)
	if err != nil {
		return err
	}
	fmt.Fprintf(b, "\n#### `%s`\n\n", k.Path)
	parts := []string{"**" + typeName(k.Type, v.values) + "**"}
	if u, ok := units[k.Path]; ok {
		parts = append(parts, "unit: "+u)
	}
	if len(v.only) > 0 {
		parts = append(parts, "only with "+strings.Join(v.only, ", "))
	}
	parts = append(parts, defaultText(k, v))
	if len(v.bounds) > 0 {
		parts = append(parts, "bounds: "+strings.Join(v.bounds, "; "))
	}
	b.WriteString(strings.Join(parts, " · ") + "\n\n")
	doc := docs.fields[k.Owner.Name()][k.Field]
	if doc == "" {
		return fmt.Errorf("%s (%s.%s) has no doc comment", k.Path, k.Owner.Name(), k.Field)
	}
	b.WriteString(markdown(doc, ownKeys(k.Owner), qualified) + "\n")
	return nil
}

// typeName names a scalar type for operators.
func typeName(t reflect.Type, values []string) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "duration"
	case len(values) > 0:
		return "string: one of `" + strings.Join(values, "`, `") + "`"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() == reflect.Int, t.Kind() == reflect.Int64:
		return "integer"
	case t.Kind() == reflect.Float64:
		return "number"
	case t.Kind() == reflect.Bool:
		return "boolean"
	}
	return t.String()
}

// defaultText says what an absent key is.
func defaultText(k config.SchemaKey, v verdict) string {
	if v.required != "" && (k.Default.IsZero() || k.ByProtocol != nil && k.ByProtocol[config.ListenerHTTP].IsZero() && k.ByProtocol[config.ListenerTCP].IsZero()) {
		return v.required
	}
	if k.ByProtocol != nil {
		seen := map[string][]string{}
		var order []string
		for _, p := range config.ListenerProtocols() {
			if len(v.only) > 0 && !strings.Contains(strings.Join(v.only, " "), string(p)) {
				continue // the key does not apply to p
			}
			s := format(k.ByProtocol[p])
			if _, ok := seen[s]; !ok {
				order = append(order, s)
			}
			seen[s] = append(seen[s], string(p))
		}
		if len(order) == 1 {
			return "default: " + order[0]
		}
		var parts []string
		for _, s := range order {
			parts = append(parts, s+" ("+strings.Join(seen[s], ", ")+")")
		}
		return "default: " + strings.Join(parts, ", ")
	}
	return "default: " + format(k.Default)
}

// format writes a default value as it would be written in the file.
func format(v reflect.Value) string {
	if v.Type() == reflect.TypeFor[time.Duration]() {
		return "`" + shortDuration(time.Duration(v.Int())) + "`"
	}
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return `""`
		}
		return "`" + v.String() + "`"
	case reflect.Float64:
		return "`" + strconv.FormatFloat(v.Float(), 'g', -1, 64) + "`"
	}
	return fmt.Sprintf("`%v`", v.Interface())
}

// shortDuration writes d as an operator would: 1m, not 1m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
