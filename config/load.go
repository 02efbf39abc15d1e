package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/viper"
)

// Load reads the YAML file at path through viper, applies SPILLWAY_*
// environment overrides (see the package documentation), fills in defaults,
// decodes with viper.UnmarshalExact and validates. It returns a read-only
// Config, or every problem found, joined: each a *FieldError whose message
// starts with path and the field path ("configs/x.yaml: services[0].polcy:
// unknown field"), all matching ErrInvalid. A file that cannot be read gives
// the os error (errors.Is(err, fs.ErrNotExist) works).
func Load(path string) (*Config, error) {
	return load(path, os.Environ())
}

// load is Load with the environment given as "KEY=value" strings.
func load(path string, environ []string) (*Config, error) {
	v := viper.New()
	v.SetConfigFile(path)
	v.SetConfigType("yaml") // whatever the extension
	if err := v.ReadInConfig(); err != nil {
		return nil, readError(path, err)
	}
	return decodeWith(v, path, environ, filepath.Dir(path), nil)
}

// Parse is Load for a configuration held in memory, as it arrives over gRPC;
// name stands for the file name in error messages. Parse applies no
// environment overrides: the result depends on data alone.
func Parse(data []byte, name string) (*Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, readError(name, err)
	}
	return decodeWith(v, name, nil, "", nil)
}

// New validates a Config built in Go and returns a read-only deep copy of it
// with its lookup index, as Load would. It applies no defaults: start each
// section from its Default* function. Hash policies with an empty HashScope
// get HashScopeGlobal.
func New(c Config) (*Config, error) {
	out := cloneValue(reflect.ValueOf(c)).Interface().(Config)
	out.source, out.idx = "", nil
	if err := out.Validate(); err != nil {
		return nil, err
	}
	out.finish()
	return &out, nil
}

// readError turns a viper read error into a FieldError (YAML syntax) or
// wraps it (I/O).
func readError(name string, err error) error {
	var pe viper.ConfigParseError
	if errors.As(err, &pe) {
		inner := pe.Unwrap()
		msg := strings.ReplaceAll(inner.Error(), "\n ", "") // one line per problem
		return &FieldError{File: name, Msg: "parsing yaml: " + msg, Err: inner}
	}
	return fmt.Errorf("config: %w", err)
}

// decode turns what viper read into a validated Config:
//
//  1. take the raw tree from viper (keys already lower-cased by viper),
//  2. apply environment overrides to it,
//  3. check it against the schema: report unknown keys and ill-typed values
//     with their paths, remove them, and fill in defaults,
//  4. decode it with viper.UnmarshalExact, which can no longer fail on
//     unknown keys but stays the decoder of record,
//  5. read the secret files (Load only: secretDir is the configuration
//     file's directory; "" for Parse, which reads no file),
//  6. validate, leaving out problems under a path already reported in 3.
//
// Every problem from 2, 3, 5 and 6 is returned together. With unknown not
// nil (ParseSnapshot), an unknown key is not a problem: it is left out in
// 3 and its path appended to *unknown.
func decodeWith(v *viper.Viper, name string, environ []string, secretDir string, unknown *[]string) (*Config, error) {
	raw := map[string]any{}
	var dotted []string
	for _, k := range v.AllKeys() {
		top, _, nested := strings.Cut(k, ".")
		raw[top] = deepCopy(v.Get(top))
		if nested {
			dotted = append(dotted, k)
		}
	}
	p := &problems{file: name}
	// viper reads a top-level key "a.b" as b inside a. Under a map the
	// checker sees it; under a list viper drops it, so report it here.
	// (An unknown top-level key is reported by the checker.)
	schema := fieldsOf(reflect.TypeFor[Config]())
	for _, k := range dotted {
		top, _, _ := strings.Cut(k, ".")
		known := slices.ContainsFunc(schema, func(f field) bool { return f.key == top })
		if _, isMap := raw[top].(map[string]any); known && !isMap {
			if unknown != nil {
				*unknown = append(*unknown, k)
				continue
			}
			p.add(k, "unknown field")
		}
	}
	// viper leaves empty maps out of AllKeys ("services: {}"); fetch the
	// schema's own keys directly so that such a value is type-checked.
	for _, f := range schema {
		if _, ok := raw[f.key]; !ok && v.IsSet(f.key) {
			raw[f.key] = deepCopy(v.Get(f.key))
		}
	}

	applyEnv(raw, environ, p)
	ch := &checker{p: p, unknown: unknown}
	ch.checkStruct("", reflect.TypeFor[Config](), raw, reflect.Zero(reflect.TypeFor[Config]()))

	dv := viper.New()
	if err := dv.MergeConfigMap(raw); err != nil {
		return nil, fmt.Errorf("%s: config: %w", name, err)
	}
	var c Config
	if err := dv.UnmarshalExact(&c); err != nil {
		// The checker removed everything the decoder could reject; this is
		// a bug in the checker, reported rather than hidden.
		p.errs = append(p.errs, &FieldError{File: name, Msg: "decoding: " + err.Error(), Err: err})
		return nil, p.err()
	}
	c.source = name
	readSecretFiles(&c, secretDir, p)
	vp := &problems{file: name}
	c.validate(vp)
	for _, e := range vp.errs {
		if fe, ok := e.(*FieldError); ok && under(fe.Path, ch.bad) {
			continue
		}
		p.errs = append(p.errs, e)
	}
	if len(p.errs) > 0 {
		return nil, p.err()
	}
	c.finish()
	return &c, nil
}

// under reports whether path is one of paths or inside one of them.
func under(path string, paths []string) bool {
	for _, b := range paths {
		if path == b || strings.HasPrefix(path, b+".") || strings.HasPrefix(path, b+"[") {
			return true
		}
	}
	return false
}

// finish completes a valid Config: it resolves the hash scope default and
// builds the lookup index. After finish, c is read-only.
func (c *Config) finish() {
	for i := range c.Services {
		s := &c.Services[i]
		if s.Policy.IsHash() && s.HashScope == "" {
			s.HashScope = HashScopeGlobal
		}
	}
	c.idx = buildIndex(c)
}

// cloneValue deep-copies slices inside v (our types hold no maps or pointers).
func cloneValue(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(cloneValue(v.Index(i)))
		}
		return out
	case reflect.Struct:
		out := reflect.New(v.Type()).Elem()
		out.Set(v)
		for i := range v.NumField() {
			if out.Field(i).CanSet() {
				out.Field(i).Set(cloneValue(v.Field(i)))
			}
		}
		return out
	}
	return v
}
