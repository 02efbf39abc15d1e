package refdoc

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/config"
)

// probeYAML is a valid configuration that holds every section of the
// schema at least once: a fixed and an autoscaled group, a service of each
// balancing mode, a listener of each protocol and every list of the quota
// section. bounds hands its fields values out of range.
const probeYAML = `
regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - name: g1
            instances: [{address: "127.0.0.1:9001", max_concurrency: 10}]
          - name: g2
            instances: [{address: "127.0.0.1:9002"}]
          - name: g3
            instances: [{address: "127.0.0.1:9003"}]
          - name: g4
            autoscaling: {max_instances: 4, min_instances: 1}
services:
  - name: web
    backends: [{group: g1, max_rate_per_instance: 10}, {group: g4, max_rate: 100}]
    session_affinity: {type: generated_cookie, cookie_name: s, cookie_ttl: 1h, cookie_secret: 0123456789abcdef0123456789abcdef}
  - name: db
    balancing_mode: CONNECTION
    backends: [{group: g2, max_connections_per_instance: 10}, {group: g1, max_connections: 100}]
  - name: util
    balancing_mode: UTILIZATION
    backends: [{group: g3, max_utilization: 0.8, utilization_rate_per_instance: 100}]
    health_check: {port: 8080}
  - name: hashed
    policy: hash5
    hash_scope: nearest_region
    backends: [{group: g2, max_rate_per_instance: 5}]
    session_affinity: {type: header, header_name: x-user}
    health_check: {protocol: grpc, grpc_service: app}
routes:
  - {service: web, per_try_timeout: 1s}
listeners:
  - {name: web, protocol: http, port: 80, max_request_body_bytes: 1024, max_connection_age: 1m}
  - {name: tls, protocol: https, port: 443, certificates: [{cert_file: a.crt, key_file: a.key}]}
  - {name: db, protocol: tcp, port: 5432, service: db}
quota:
  metrics: [{name: calls, default_limit: 60}]
  charges: [{service: web, metric: calls}]
  consumers: [{api_key: key-0123456789, project: acme}]
  producer_overrides: [{project: acme, metric: calls, limit: 100}]
  consumer_overrides: [{project: acme, metric: calls, limit: 50}]
`

// badString is the string probe: invalid for every string field with rules.
const badString = "Zz z!"

// verdict is what the validator says of one key's out-of-range values.
type verdict struct {
	bounds   []string // the ranges and rules it enforces
	required string   // "required", "required for type header", ... ("" if not)
	values   []string // an enumerated string's valid values
	only     []string // where the key applies: "protocol tcp", "type header", ...
}

// probe returns the validator's verdict on key k: every location of k in
// probeYAML is given a value below any lower bound and one above any upper
// bound (numbers), or an invalid and an empty string (strings), and the
// messages reported at that location are kept, minus those that say k does
// not apply there (a tcp-only key on an http listener) and minus the
// offending value ("got ...").
func probe(k config.SchemaKey) (verdict, error) {
	var v verdict
	values, ok := probeValues(k.Type)
	if !ok {
		return v, nil
	}
	for _, val := range values {
		c, err := config.Parse([]byte(probeYAML), "probe.yaml")
		if err != nil {
			return v, fmt.Errorf("probe configuration: %w", err)
		}
		for _, loc := range locate(reflect.ValueOf(c).Elem(), strings.Split(k.Path, "."), "") {
			old := reflect.New(loc.v.Type()).Elem()
			old.Set(loc.v)
			loc.v.Set(val.Convert(loc.v.Type()))
			for _, m := range messages(c.Validate(), loc.path) {
				v.add(m)
			}
			loc.v.Set(old)
		}
	}
	return v, nil
}

var (
	notApplicable = regexp.MustCompile(`not valid with|uses routes`)
	onlyWith      = regexp.MustCompile(`only valid with (.*?)(?:;|$)`)
	oneOf         = regexp.MustCompile(`^(?:must be|required:) one of (.*)$`)
	either        = regexp.MustCompile(`^must be "([a-z]+)" or "([a-z]+)"$`)
	invalid       = regexp.MustCompile(`^invalid ([a-z: ]+) "` + regexp.QuoteMeta(badString) + `": (.*)$`)
	unknown       = regexp.MustCompile(`^unknown ([a-z ]+) "` + regexp.QuoteMeta(badString) + `"(?:: .*)?$`)
	gotTail       = regexp.MustCompile(`[;,] got .*$| \(got [^)]*\)`)
	probeContext  = regexp.MustCompile(`([a-z_]{3,}) \(([^;()]*)(\)|; )`)
	longDuration  = regexp.MustCompile(`\b(\d+h)0m0s\b|\b(\d+m)0s\b`)
)

// add files one validator message into v.
func (v *verdict) add(m string) {
	if s := onlyWith.FindStringSubmatch(m); s != nil {
		if !slices.Contains(v.only, s[1]) {
			v.only = append(v.only, s[1])
		}
		return
	}
	if notApplicable.MatchString(m) {
		return
	}
	m = gotTail.ReplaceAllString(m, "")
	// "must be in 0..max_instances (4)": the 4 is probeYAML's, not a bound.
	m = probeContext.ReplaceAllStringFunc(m, func(s string) string {
		sub := probeContext.FindStringSubmatch(s)
		if sub[3] == "; " {
			return sub[1] + " ("
		}
		return sub[1]
	})
	m = longDuration.ReplaceAllString(m, "$1$2")
	switch sub := oneOf.FindStringSubmatch(m); {
	case sub != nil:
		if v.values == nil {
			v.values = strings.Split(sub[1], ", ")
		}
		if strings.HasPrefix(m, "required") {
			v.required = "required"
		}
		return
	case either.MatchString(m):
		s := either.FindStringSubmatch(m)
		v.values = []string{s[1], s[2]}
		return
	case strings.HasPrefix(m, "required"):
		req, rest, _ := strings.Cut(m, ", ")
		req, _, _ = strings.Cut(req, " (")
		if v.required == "" || v.required == "required" {
			v.required = req
		}
		if rest == "" {
			return
		}
		m = "must be " + rest
	}
	if s := invalid.FindStringSubmatch(m); s != nil {
		m = s[2]
		if !regexp.MustCompile(`^(use|want|must)`).MatchString(m) {
			m = "must be a valid " + s[1]
		}
	} else if s := unknown.FindStringSubmatch(m); s != nil {
		m = "must name a known " + s[1]
	}
	if !slices.Contains(v.bounds, m) {
		v.bounds = append(v.bounds, m)
	}
}

// probeValues returns the out-of-range values to hand a field of type t;
// false for a type that is not a scalar with rules.
func probeValues(t reflect.Type) ([]reflect.Value, bool) {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return []reflect.Value{reflect.ValueOf(-time.Nanosecond), reflect.ValueOf(time.Duration(math.MaxInt64 / 2))}, true
	case t.Kind() == reflect.Int, t.Kind() == reflect.Int64:
		return []reflect.Value{reflect.ValueOf(int64(-1)), reflect.ValueOf(int64(1) << 62)}, true
	case t.Kind() == reflect.Float64:
		return []reflect.Value{reflect.ValueOf(-1.0), reflect.ValueOf(1e300)}, true
	case t.Kind() == reflect.String:
		return []reflect.Value{reflect.ValueOf(badString), reflect.ValueOf("")}, true
	}
	return nil, false
}

// location is one place of a key in a decoded configuration.
type location struct {
	path string // with indexes: services[1].backends[0].max_rate
	v    reflect.Value
}

// locate returns every settable value at the dotted path segs under v
// (segments ending in "[]" are lists: every element).
func locate(v reflect.Value, segs []string, prefix string) []location {
	if len(segs) == 0 {
		return []location{{path: prefix, v: v}}
	}
	seg, list := strings.CutSuffix(segs[0], "[]")
	f, ok := fieldByKey(v.Type(), seg)
	if !ok {
		return nil
	}
	fv := v.FieldByIndex(f.Index)
	p := seg
	if prefix != "" {
		p = prefix + "." + seg
	}
	if !list {
		return locate(fv, segs[1:], p)
	}
	var out []location
	for i := range fv.Len() {
		out = append(out, locate(fv.Index(i), segs[1:], fmt.Sprintf("%s[%d]", p, i))...)
	}
	return out
}

// fieldByKey returns the field of struct type t whose mapstructure tag is key.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); f.Tag.Get("mapstructure") == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// messages returns the messages of err's field errors at path.
func messages(err error, path string) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		if fe, ok := e.(*config.FieldError); ok {
			if fe.Path == path {
				out = append(out, fe.Msg)
			}
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}
