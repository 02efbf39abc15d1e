package config

import (
	"reflect"
)

// SchemaKey is one key of the operator schema, as the configuration
// reference (docs/config.md, written by cmd/refdoc) lists it: where it is,
// the Go field that carries it and the value an absent key takes, exactly
// as Load fills it.
type SchemaKey struct {
	// Path is the key's place in the YAML, list elements written "[]":
	// "services[].feedback.confirm_utilization".
	Path string
	// Key is the YAML key itself ("confirm_utilization").
	Key string
	// Depth is the number of maps above the key: 0 for a top-level key.
	Depth int
	// Type is the Go type of the field: a struct for a map of keys, a
	// slice of structs for a list of maps, a scalar otherwise.
	Type reflect.Type
	// Owner is the struct type that declares the field, and Field its Go
	// name there: where its doc comment is.
	Owner reflect.Type
	Field string
	// Default is the value an absent key takes in a present parent (a
	// zero value where the key has no default). For a listener's keys,
	// whose defaults depend on its protocol, ByProtocol has them.
	Default reflect.Value
	// ByProtocol is, for the keys of a listener, the default under each
	// protocol (DefaultListener); nil for other keys.
	ByProtocol map[ListenerProtocol]reflect.Value
	// Optional marks a section that is off while absent and takes Default
	// for its absent keys once present (autoscaling).
	Optional bool
}

// Schema returns every key of the operator schema in schema order (the
// order of the Go fields, depth first), with the defaults Load fills in.
func Schema() []SchemaKey {
	var out []SchemaKey
	walkSchema(&out, "", 0, reflect.TypeFor[Config](), reflect.Zero(reflect.TypeFor[Config]()), nil)
	return out
}

// walkSchema appends the keys of struct type t at path to out. def is the
// value of t whose fields are the keys' defaults; byProto, for a Listener,
// the defaults of each protocol.
func walkSchema(out *[]SchemaKey, path string, depth int, t reflect.Type, def reflect.Value, byProto map[ListenerProtocol]reflect.Value) {
	for _, f := range fieldsOf(t) {
		k := SchemaKey{
			Path: join(path, f.key), Key: f.key, Depth: depth, Type: f.typ,
			Owner: t, Field: t.Field(f.index).Name, Default: def.Field(f.index),
		}
		if byProto != nil {
			k.ByProtocol = map[ListenerProtocol]reflect.Value{}
			for p, v := range byProto {
				k.ByProtocol[p] = v.Field(f.index)
			}
		}
		switch {
		case isList(f.typ):
			elem := f.typ.Elem()
			var sub map[ListenerProtocol]reflect.Value
			if elem == reflect.TypeFor[Listener]() {
				sub = map[ListenerProtocol]reflect.Value{}
				for _, p := range ListenerProtocols() {
					sub[p] = defaultsFor(elem, string(p))
				}
			}
			*out = append(*out, k)
			// An element's own defaults are those of an absent protocol
			// (a listener's protocol has none); sub has each protocol's.
			walkSchema(out, k.Path+"[]", depth+1, elem, defaultsFor(elem, ""), sub)
		case isStruct(f.typ):
			sub := def.Field(f.index)
			if od, ok := optionalDefaults(f.typ); ok {
				sub, k.Optional = od, true
			}
			*out = append(*out, k)
			walkSchema(out, k.Path, depth+1, f.typ, sub, nil)
		default:
			*out = append(*out, k)
		}
	}
}
