package config

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/viper"
)

// This file is the configuration as it travels from a control plane to a
// gfe (docs/design.md §5, "Snapshot wire format"): strict for the
// operator, tolerant on the wire. A file an operator writes is parsed by
// Load and Parse, which refuse an unknown field with its path. What a
// control plane sends is parsed by ParseSnapshot, which ignores a field it
// does not know and says which, so that a gfe one release behind keeps
// applying snapshots; and a control plane sends a gfe only the fields that
// gfe says it reads (Fields, MarshalFor), so that even a gfe of a release
// before ParseSnapshot, which is strict, is never sent one it cannot read.

// ParseSnapshot is Parse for configuration that a control plane sent: a
// key the schema does not know is not an error but left out, and its path
// is returned in unknown (in the document's order, sections before their
// keys; a section the schema does not know is one path). Everything else
// is checked exactly as Parse checks it: a value of the wrong type or a
// failed validation is an error with its path.
func ParseSnapshot(data []byte, name string) (c *Config, unknown []string, err error) {
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, nil, readError(name, err)
	}
	var found []string
	c, err = decodeWith(v, name, nil, "", &found)
	if err != nil {
		return nil, nil, err
	}
	return c, found, nil
}

// Fields returns the path of every field of the schema, in schema order:
// keys joined with dots, the elements of a list written "[]"
// ("services[].feedback.confirm_utilization"), each section before its
// keys; then every negotiated value (negotiatedValues) as
// "<path>=<value>" ("services[].policy=envoy_priority"). It is what a gfe
// states it reads (Node.config_fields) and what MarshalFor keeps to.
func Fields() []string {
	fieldsOnce.Do(func() {
		var walk func(prefix string, t reflect.Type)
		walk = func(prefix string, t reflect.Type) {
			for _, f := range fieldsOf(t) {
				p := join(prefix, f.key)
				allFields = append(allFields, p)
				switch {
				case isList(f.typ):
					walk(p+"[]", f.typ.Elem())
				case isStruct(f.typ):
					walk(p, f.typ)
				}
			}
		}
		walk("", reflect.TypeFor[Config]())
		for _, v := range negotiatedValues {
			allFields = append(allFields, v.path+"="+v.value)
		}
	})
	return slices.Clone(allFields)
}

var (
	fieldsOnce sync.Once
	allFields  []string
)

// negotiatedValue is a value of an enumerated field that a reader reads
// only if its schema states "<path>=<value>". A reader that does not is
// sent instead in its place when that is set (the nearest value it
// knows), or nothing (the field's default) when it is empty.
type negotiatedValue struct{ path, value, instead string }

// negotiatedValues are the values of enumerated fields added after the
// schema negotiation existed, one per line: a gfe of an earlier release
// knows the field but would refuse the value (its validation lists only
// its own release's values), which would strand every service of the
// snapshot on it. MarshalFor leaves a field holding such a value out for
// a reader whose schema does not state it, so that the reader takes the
// field's default (or the value negotiated in its place), and names it in
// dropped as "<path>=<value>".
var negotiatedValues = []negotiatedValue{
	{"services[].policy", string(PolicyEnvoyPriority), ""},
	// prequal's nearest known policy: a flat pool over every region,
	// chosen by load.
	{"services[].policy", string(PolicyPrequal), string(PolicyLeastRequest)},
}

// lacksValue reports whether reader known (nil: every field) cannot read
// value v of the field at schema path schema: v is a negotiated value
// known does not state. It returns the negotiated value.
func lacksValue(known *FieldSet, schema string, v reflect.Value) (negotiatedValue, bool) {
	if known == nil || v.Kind() != reflect.String {
		return negotiatedValue{}, false
	}
	for _, nv := range negotiatedValues {
		if nv.path == schema && nv.value == v.String() && !known.Has(nv.path+"="+nv.value) {
			return nv, true
		}
	}
	return negotiatedValue{}, false
}

// FieldSet is a set of field paths as Fields writes them: the schema of
// one reader. Immutable; safe for concurrent use.
type FieldSet struct {
	has map[string]bool
	key string
}

// NewFieldSet returns the set of paths (duplicates and order do not
// matter).
func NewFieldSet(paths []string) *FieldSet {
	s := &FieldSet{has: make(map[string]bool, len(paths))}
	for _, p := range paths {
		s.has[p] = true
	}
	sorted := make([]string, 0, len(s.has))
	for p := range s.has {
		sorted = append(sorted, p)
	}
	slices.Sort(sorted)
	sum := sha256.Sum256([]byte(strings.Join(sorted, "\n")))
	s.key = hex.EncodeToString(sum[:8])
	return s
}

// Has reports whether path is in s.
func (s *FieldSet) Has(path string) bool { return s.has[path] }

// Len returns the number of paths in s.
func (s *FieldSet) Len() int { return len(s.has) }

// Key identifies the set's content: two sets with the same paths have the
// same Key.
func (s *FieldSet) Key() string { return s.key }

// Covers reports whether s has every field of this build's schema
// (Fields): MarshalFor then drops nothing.
func (s *FieldSet) Covers() bool {
	for _, p := range Fields() {
		if !s.has[p] {
			return false
		}
	}
	return true
}

// baselineFields is the schema of the baseline (commit b242d36, main just before 0.1.0), the last
// whose gfes do not state theirs. Frozen: never regenerate it.
//
//go:embed fields-baseline.txt
var baselineFields string

// BaselineFields returns the schema of the baseline (b242d36): what a control plane
// assumes of a gfe that states no schema of its own (every gfe of a
// release before Node.config_fields existed). Those gfes parse
// configuration strictly, so they must never be sent a field outside it.
func BaselineFields() *FieldSet {
	baselineOnce.Do(func() {
		var paths []string
		for _, l := range strings.Split(baselineFields, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				paths = append(paths, l)
			}
		}
		baseline = NewFieldSet(paths)
	})
	return baseline
}

var (
	baselineOnce sync.Once
	baseline     *FieldSet
)
