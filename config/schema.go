package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file walks the raw YAML tree (maps, lists and scalars as viper reads
// them) alongside the Go types of this package, using the mapstructure tags
// that viper decodes with. It does what viper cannot do precisely:
//
//   - report every unknown key and every value of the wrong type with its full
//     path ("services[0].polcy: unknown field"); viper's UnmarshalExact only
//     says "'services[0]' has invalid keys: polcy" and stops typing at the
//     first mismatch per field,
//   - fill defaults into list elements, where "absent" and "zero" differ
//     (capacity_scaler: 0 drains, an absent capacity_scaler is 1),
//   - apply SPILLWAY_* environment overrides to fields inside lists, which
//     viper's AutomaticEnv cannot address,
//   - encode a Config back to YAML that Parse reads into the same Config
//     (marshal.go).

var durationType = reflect.TypeFor[time.Duration]()

// field is one decodable struct field.
type field struct {
	key   string // mapstructure tag: the YAML key
	index int
	typ   reflect.Type
}

// fieldsOf returns the tagged, exported fields of struct type t in order.
func fieldsOf(t reflect.Type) []field {
	var fs []field
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("mapstructure")
		if !sf.IsExported() || tag == "" || tag == "-" {
			continue
		}
		fs = append(fs, field{key: tag, index: i, typ: sf.Type})
	}
	return fs
}

// isStruct reports whether t is decoded from a YAML map.
func isStruct(t reflect.Type) bool { return t.Kind() == reflect.Struct }

// isList reports whether t is decoded from a YAML list of maps.
func isList(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && isStruct(t.Elem())
}

// defaultsFor returns the defaults of a struct type that appears as a list
// element or at the top level. Nested sections take their defaults from their
// parent's default (DefaultService().HealthCheck), so they need no entry.
// protocol is the element's protocol, for types whose defaults depend on it
// (Listener); other types ignore it.
func defaultsFor(t reflect.Type, protocol string) reflect.Value {
	switch t {
	case reflect.TypeFor[Service]():
		return reflect.ValueOf(DefaultService())
	case reflect.TypeFor[Backend]():
		return reflect.ValueOf(DefaultBackend())
	case reflect.TypeFor[Route]():
		return reflect.ValueOf(DefaultRoute())
	case reflect.TypeFor[Listener]():
		return reflect.ValueOf(DefaultListener(ListenerProtocol(protocol)))
	case reflect.TypeFor[QuotaMetric]():
		return reflect.ValueOf(DefaultQuotaMetric())
	case reflect.TypeFor[QuotaCharge]():
		return reflect.ValueOf(DefaultQuotaCharge())
	}
	return reflect.Zero(t)
}

// optionalDefaults returns the defaults of an optional section: a struct
// field whose absence leaves it zero (off) and whose presence fills its
// absent keys from these defaults. ok is false for other types, whose
// absent sections take their parent's defaults.
func optionalDefaults(t reflect.Type) (def reflect.Value, ok bool) {
	if t == reflect.TypeFor[Autoscaling]() {
		return reflect.ValueOf(DefaultAutoscaling()), true
	}
	return reflect.Value{}, false
}

// rawProtocol returns the protocol key of a raw list element, "" if absent
// or not a string (the checker reports the latter).
func rawProtocol(m map[string]any) string {
	s, _ := m["protocol"].(string)
	return s
}

// valueProtocol returns the Protocol field of a decoded list element, ""
// for types without one.
func valueProtocol(v reflect.Value) string {
	if v.Type() == reflect.TypeFor[Listener]() {
		return string(v.Interface().(Listener).Protocol)
	}
	return ""
}

// checker checks a raw tree against the schema. It removes what it reports
// (unknown keys, values of the wrong type) so that decoding the rest cannot
// fail, and remembers the paths of removed values so that validation does not
// report them a second time.
type checker struct {
	p   *problems
	bad []string
	// unknown, when not nil, receives the paths of unknown keys instead
	// of p (ParseSnapshot: tolerant on the wire).
	unknown *[]string
}

// checkStruct checks map m against struct type t, reports unknown keys and
// ill-typed values (deleting them), and fills every absent field from def.
func (c *checker) checkStruct(path string, t reflect.Type, m map[string]any, def reflect.Value) {
	fs := fieldsOf(t)
	known := make(map[string]field, len(fs))
	for _, f := range fs {
		known[f.key] = f
	}
	// Known keys in schema order, then unknown ones sorted, so that
	// messages come out in a stable order close to the file's.
	keys := make([]string, 0, len(m))
	for _, f := range fs {
		if _, ok := m[f.key]; ok {
			keys = append(keys, f.key)
		}
	}
	var unknown []string
	for k := range m {
		if _, ok := known[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	keys = append(keys, unknown...)
	for _, k := range keys {
		f, ok := known[k]
		if !ok && c.unknown != nil {
			*c.unknown = append(*c.unknown, join(path, k))
			delete(m, k)
			continue
		}
		if !ok {
			msg := "unknown field"
			if s := suggest(k, fs); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			c.p.add(join(path, k), msg)
			delete(m, k)
			continue
		}
		if m[k] == nil { // "key:" with no value: same as absent
			delete(m, k)
			continue
		}
		v, ok := c.checkValue(join(path, k), f.typ, m[k], def.Field(f.index))
		if !ok {
			c.bad = append(c.bad, join(path, k))
			delete(m, k)
			continue
		}
		m[k] = v
	}
	for _, f := range fs {
		if _, ok := m[f.key]; ok {
			continue
		}
		d := def.Field(f.index)
		if _, optional := optionalDefaults(f.typ); optional {
			continue // absent: stays zero, i.e. off
		}
		switch {
		case isStruct(f.typ):
			sub := map[string]any{}
			c.checkStruct(join(path, f.key), f.typ, sub, d)
			m[f.key] = sub
		case !d.IsZero():
			m[f.key] = d.Interface()
		}
	}
}

// checkValue checks one present value v against type t and returns it in the
// form the decoder takes, or reports a problem and returns false.
func (c *checker) checkValue(path string, t reflect.Type, v any, def reflect.Value) (any, bool) {
	fail := func(want string) (any, bool) {
		c.p.add(path, fmt.Sprintf("expected %s, got %s", want, describe(v)))
		return nil, false
	}
	switch {
	case t == durationType:
		s, ok := v.(string)
		if !ok {
			return fail(`a duration such as "5s"`)
		}
		if _, err := time.ParseDuration(s); err != nil {
			return fail(`a duration such as "5s"`)
		}
		return s, true
	case isStruct(t):
		m, ok := asMap(v)
		if !ok {
			return fail("a map")
		}
		if od, optional := optionalDefaults(t); optional {
			def = od
		}
		c.checkStruct(path, t, m, def)
		return m, true
	case isList(t):
		l, ok := v.([]any)
		if !ok {
			return fail("a list")
		}
		out := l[:0:0]
		for i, e := range l {
			if e == nil {
				e = map[string]any{}
			}
			p := fmt.Sprintf("%s[%d]", path, i)
			m, ok := asMap(e)
			if !ok {
				c.p.add(p, "expected a map, got "+describe(e))
				c.bad = append(c.bad, p)
				m = map[string]any{} // keep indexes stable
			}
			c.checkStruct(p, t.Elem(), m, defaultsFor(t.Elem(), rawProtocol(m)))
			out = append(out, m)
		}
		return out, true
	case t.Kind() == reflect.String:
		s, ok := v.(string)
		if !ok {
			if _, scalar := v.([]any); !scalar && !isMapValue(v) {
				return fail("a string (quote the value)")
			}
			return fail("a string")
		}
		return s, true
	case t.Kind() == reflect.Int:
		n, ok := asInt(v)
		if !ok {
			return fail("an integer")
		}
		return n, true
	case t.Kind() == reflect.Int64:
		n, ok := asInt64(v)
		if !ok {
			return fail("an integer")
		}
		return n, true
	case t.Kind() == reflect.Float64:
		f, ok := asFloat(v)
		if !ok {
			return fail("a number")
		}
		return f, true
	case t.Kind() == reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			return fail("true or false")
		}
		return b, true
	}
	// Unreachable for this package's types; a new field kind needs a case.
	return fail("a value of Go type " + t.String())
}

// asMap returns v as a string-keyed map. viper turns every map into
// map[string]any; map[any]any is handled in case a key was not a string.
func asMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, e := range m {
			ks, ok := k.(string)
			if !ok {
				return nil, false
			}
			out[strings.ToLower(ks)] = e
		}
		return out, true
	}
	return nil, false
}

// isMapValue reports whether v is a raw YAML map.
func isMapValue(v any) bool {
	_, ok := asMap(v)
	return ok
}

// asInt accepts any integer, and a float with an integral value, in int range.
func asInt(v any) (int, bool) {
	n, ok := asInt64(v)
	return int(n), ok && int64(int(n)) == n
}

// asInt64 accepts any integer, and a float with an integral value, in int64
// range.
func asInt64(v any) (int64, bool) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n := rv.Uint()
		return int64(n), n <= math.MaxInt64
	case reflect.Float32, reflect.Float64:
		f := rv.Float()
		if f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			return 0, false
		}
		return int64(f), true
	}
	return 0, false
}

// asFloat accepts any number.
func asFloat(v any) (float64, bool) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(rv.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return float64(rv.Uint()), true
	case reflect.Float32, reflect.Float64:
		return rv.Float(), true
	}
	return 0, false
}

// describe names a raw value for an error message.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return "string " + strconv.Quote(x)
	case bool:
		return fmt.Sprintf("boolean %t", x)
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "a map"
	case time.Time:
		return "timestamp " + x.Format(time.RFC3339)
	}
	if _, ok := asFloat(v); ok {
		return fmt.Sprintf("number %v", v)
	}
	return fmt.Sprintf("%T", v)
}

// join appends key to path with a dot.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// suggest returns the known key closest to an unknown one, if it is close
// enough to be a typo.
func suggest(key string, fs []field) string {
	best, bestD := "", 3 // at most 2 edits
	for _, f := range fs {
		if d := editDistance(key, f.key); d < bestD {
			best, bestD = f.key, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt // not a typo of any of our keys
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// deepCopy copies the maps and lists of a raw tree, so that the checker may
// edit it without touching viper's own copy.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case map[any]any:
		out := make(map[any]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// EnvPrefix is the prefix of environment variables that override config
// fields. See the package documentation for how names map to fields.
const EnvPrefix = "SPILLWAY_"

// envName is the environment variable that overrides the field at segs.
func envName(segs []string) string {
	return EnvPrefix + strings.ToUpper(strings.Join(segs, "_"))
}

// envApplier applies environment overrides to a raw tree.
type envApplier struct {
	p    *problems
	vars map[string]string // SPILLWAY_* variables
	used map[string]bool
}

// applyEnv overrides scalar fields of raw from the SPILLWAY_* variables in
// environ ("KEY=value" strings, as os.Environ returns). Variables that name a
// top-level key of the schema but match no field are reported; other SPILLWAY_*
// variables are left to other components.
func applyEnv(raw map[string]any, environ []string, p *problems) {
	a := &envApplier{p: p, vars: map[string]string{}, used: map[string]bool{}}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, EnvPrefix) {
			a.vars[k] = v
		}
	}
	if len(a.vars) == 0 {
		return
	}
	t := reflect.TypeFor[Config]()
	a.walk(nil, "", t, raw)
	var prefixes []string
	for _, f := range fieldsOf(t) {
		prefixes = append(prefixes, envName([]string{f.key}))
	}
	names := make([]string, 0, len(a.vars))
	for k := range a.vars {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if a.used[k] {
			continue
		}
		for _, pre := range prefixes {
			if k == pre || strings.HasPrefix(k, pre+"_") {
				p.add("", fmt.Sprintf("env %s: matches no config field (list entries must exist in the file)", k))
				break
			}
		}
	}
}

// walk applies overrides to the fields of struct type t held in map m, whose
// path is segs (env name parts) and path (YAML path).
func (a *envApplier) walk(segs []string, path string, t reflect.Type, m map[string]any) {
	for _, f := range fieldsOf(t) {
		fs := append(slices.Clip(segs), f.key)
		fp := join(path, f.key)
		switch {
		case isList(f.typ):
			l, _ := m[f.key].([]any)
			for i, e := range l {
				if em, ok := e.(map[string]any); ok {
					a.walk(append(slices.Clip(fs), strconv.Itoa(i)), fmt.Sprintf("%s[%d]", fp, i), f.typ.Elem(), em)
				}
			}
		case isStruct(f.typ):
			sub, ok := m[f.key].(map[string]any)
			if !ok {
				if m[f.key] != nil || !a.anyUnder(envName(fs)) {
					continue // wrong type (the checker reports it), or nothing to set
				}
				sub = map[string]any{}
				m[f.key] = sub
			}
			a.walk(fs, fp, f.typ, sub)
		default:
			name := envName(fs)
			s, ok := a.vars[name]
			if !ok {
				continue
			}
			a.used[name] = true
			v, err := envValue(s, f.typ)
			if err != nil {
				a.p.add(fp, fmt.Sprintf("env %s: %v", name, err))
				continue
			}
			m[f.key] = v
		}
	}
}

// anyUnder reports whether some variable overrides a field below prefix.
func (a *envApplier) anyUnder(prefix string) bool {
	for k := range a.vars {
		if strings.HasPrefix(k, prefix+"_") {
			return true
		}
	}
	return false
}

// envValue converts an environment string to the raw form of type t.
func envValue(s string, t reflect.Type) (any, error) {
	switch {
	case t == durationType, t.Kind() == reflect.String:
		return s, nil
	case t.Kind() == reflect.Int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("expected an integer, got %q", s)
		}
		return n, nil
	case t.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("expected an integer, got %q", s)
		}
		return n, nil
	case t.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return nil, fmt.Errorf("expected a number, got %q", s)
		}
		return f, nil
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("expected true or false, got %q", s)
		}
		return b, nil
	}
	return nil, fmt.Errorf("cannot be set from the environment (Go type %s)", t)
}
