package config

import (
	"bytes"
	"fmt"
	"reflect"
	"time"

	"go.yaml.in/yaml/v3"
)

// Marshal encodes c as YAML that Parse decodes back into an equal Config:
// the fields whose value differs from their default, in schema order.
// Fields at their default are left out (Parse fills them in again), lists
// that are nil are left out (an empty list that is not nil is written as
// []), a present optional section (autoscaling) stays even when every key
// in it is at its default, and a listener's protocol, which decides its
// other defaults, is always written. Use it to send the effective config
// (after env overrides and defaults) to another process: what it carries
// is what the operator set, so a reader of another release applies its
// own defaults to the rest and is not sent a field it may not know only
// because that field has a default.
func Marshal(c *Config) ([]byte, error) {
	out, _, err := MarshalFor(c, nil)
	return out, err
}

// MarshalFor is Marshal for a reader that knows only the fields in known
// (a gfe of an earlier release; nil: every field). A field Marshal would
// write and known lacks is left out, and its path in c ("listeners[0].
// fast_path", a whole section when the reader lacks the section) is
// returned in dropped, in schema order: a setting that reader cannot
// honour. So is a field holding a value added after the reader's release
// (negotiatedValues) that known does not state: it is returned as
// "<path>=<value>" ("services[0].policy=envoy_priority") and the reader
// takes the field's default (a service under envoy_priority runs
// waterfall on it). With nothing dropped the YAML is exactly Marshal's.
func MarshalFor(c *Config, known *FieldSet) (out []byte, dropped []string, err error) {
	e := &encoder{known: known}
	n := e.encodeStruct(reflect.ValueOf(c).Elem(), reflect.Zero(reflect.TypeFor[Config]()), "", "")
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, nil, fmt.Errorf("config: marshal: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, nil, fmt.Errorf("config: marshal: %w", err)
	}
	return buf.Bytes(), e.dropped, nil
}

// encoder turns a Config into a YAML tree, leaving out what its reader
// does not know.
type encoder struct {
	known   *FieldSet // nil: every field
	dropped []string
}

// discriminator returns the key of struct type t whose value selects the
// defaults of the others (defaultsFor's protocol), "" for types without
// one. It is written whenever it is set, even when it equals the default
// it selected.
func discriminator(t reflect.Type) string {
	if t == reflect.TypeFor[Listener]() {
		return "protocol"
	}
	return ""
}

// encodeStruct encodes struct value v whose defaults are def; path is v's
// path in the Config ("services[0].feedback") and schema its path in the
// schema ("services[].feedback", as Fields writes it).
func (e *encoder) encodeStruct(v, def reflect.Value, path, schema string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	disc := discriminator(v.Type())
	for _, f := range fieldsOf(v.Type()) {
		fv, dv := v.Field(f.index), def.Field(f.index)
		fp, fs := join(path, f.key), join(schema, f.key)
		if e.known != nil && !e.known.Has(fs) {
			// Encode it for a reader that knows everything, only to
			// tell whether it would have been written.
			if (&encoder{}).encodeField(f, fv, dv, fp, fs, disc) != nil {
				e.dropped = append(e.dropped, fp)
			}
			continue
		}
		if nv, ok := lacksValue(e.known, fs, fv); ok {
			// A value the reader's release does not know: it reads the
			// value negotiated in its place, or the field's default.
			e.dropped = append(e.dropped, fp+"="+nv.value)
			if nv.instead == "" {
				continue
			}
			sub := reflect.New(fv.Type()).Elem()
			sub.SetString(nv.instead)
			fv = sub
		}
		if val := e.encodeField(f, fv, dv, fp, fs, disc); val != nil {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.key}, val)
		}
	}
	return n
}

// encodeField encodes field f of value fv and default dv, or returns nil
// when it is left out.
func (e *encoder) encodeField(f field, fv, dv reflect.Value, path, schema, disc string) *yaml.Node {
	switch {
	case isList(f.typ):
		if fv.IsNil() {
			return nil
		}
		// An empty list that was present ("instances: []", an autoscaled
		// group at zero) stays present, so that Parse gives back the same
		// empty, non-nil slice.
		val := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if fv.Len() == 0 {
			val.Style = yaml.FlowStyle
		}
		for i := range fv.Len() {
			ev := fv.Index(i)
			val.Content = append(val.Content, e.encodeStruct(ev, defaultsFor(f.typ.Elem(), valueProtocol(ev)),
				fmt.Sprintf("%s[%d]", path, i), schema+"[]"))
		}
		return val
	case isStruct(f.typ):
		od, optional := optionalDefaults(f.typ)
		if optional {
			if fv.IsZero() {
				return nil // absent
			}
			dv = od
		}
		val := e.encodeStruct(fv, dv, path, schema)
		if len(val.Content) == 0 && !optional { // a present optional section stays, even as {}
			return nil
		}
		return val
	}
	if f.key == disc {
		if fv.IsZero() {
			return nil
		}
	} else if fv.Equal(dv) {
		return nil
	}
	return encodeScalar(fv)
}

// encodeScalar encodes a string, integer, float, bool or duration field.
func encodeScalar(v reflect.Value) *yaml.Node {
	var x any
	switch {
	case v.Type() == durationType:
		x = time.Duration(v.Int()).String()
	case v.Kind() == reflect.String:
		x = v.String()
	case v.Kind() == reflect.Int, v.Kind() == reflect.Int64:
		x = v.Int()
	case v.Kind() == reflect.Float64:
		x = v.Float()
	case v.Kind() == reflect.Bool:
		x = v.Bool()
	default:
		x = v.Interface()
	}
	var n yaml.Node
	if err := n.Encode(x); err != nil {
		// Encode fails only for types yaml cannot represent; ours are
		// strings and numbers.
		panic(fmt.Sprintf("config: encoding %v: %v", x, err))
	}
	return &n
}
