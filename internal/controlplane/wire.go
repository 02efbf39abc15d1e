package controlplane

import (
	"bytes"
	"sync"

	"github.com/spillway-lb/spillway/config"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// wireForm is the configuration as one kind of gfe is sent it: the
// canonical YAML, or (for a gfe of an earlier release that reads fewer
// fields) that YAML without the fields the gfe does not read.
type wireForm struct {
	// yaml and redacted are the forms with and without secrets
	// (LoadedConfig.YAML and RedactedYAML). Read-only.
	yaml, redacted []byte
	// hash identifies yaml as LoadedConfig.Hash does the canonical form.
	hash string
	// dropped are the paths of the fields the configuration sets that
	// this form leaves out (config.MarshalFor): settings the gfe cannot
	// honour. Nil for the canonical form. Read-only.
	dropped []string
}

// canonicalForm is cfg's form for a gfe that reads every field.
func canonicalForm(cfg *LoadedConfig) *wireForm {
	return &wireForm{yaml: cfg.YAML, redacted: cfg.RedactedYAML, hash: cfg.Hash}
}

// readerSchema returns the schema of the gfe n to marshal for: nil when it
// reads every field this build has (the canonical form serves it), the
// fields it states (Node.config_fields), or, for a gfe that states none (a
// release before the field existed, before 0.1.0),
// config.BaselineFields. declared reports whether the gfe stated them.
func readerSchema(n *pb.Node) (schema *config.FieldSet, declared bool) {
	fs := config.BaselineFields()
	if f := n.GetConfigFields(); len(f) > 0 {
		fs, declared = config.NewFieldSet(f), true
	}
	if fs.Covers() {
		return nil, declared
	}
	return fs, declared
}

// maxForms bounds the forms kept for one configuration: schemas are what
// gfes state, and a fleet runs two or three releases at a time, but a gfe
// (or, with --insecure-plaintext, anyone) could state a new one at every
// connection.
const maxForms = 32

// wireForms makes and keeps the forms of the configuration being served
// for the schemas of the gfes connected (one per distinct schema, at most
// maxForms), so that a push to a gfe of an earlier release costs a marshal
// only when the configuration changes. Safe for concurrent use.
type wireForms struct {
	mu sync.Mutex
	// Guarded by mu.
	cfg *LoadedConfig        // the configuration of the forms in by
	by  map[string]*wireForm // by config.FieldSet.Key
}

// form returns cfg's form for schema (nil: the canonical form). A form
// that drops nothing is the canonical form: the same bytes, hash and
// version. If marshalling fails (it cannot for a valid configuration) the
// canonical form is returned, which the gfe may refuse, visibly.
func (w *wireForms) form(cfg *LoadedConfig, schema *config.FieldSet) *wireForm {
	if schema == nil {
		return canonicalForm(cfg)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cfg != cfg || len(w.by) >= maxForms {
		w.cfg, w.by = cfg, map[string]*wireForm{}
	}
	if f, ok := w.by[schema.Key()]; ok {
		return f
	}
	f := marshalForm(cfg, schema)
	w.by[schema.Key()] = f
	return f
}

// marshalForm makes cfg's form for schema.
func marshalForm(cfg *LoadedConfig, schema *config.FieldSet) *wireForm {
	yaml, dropped, err := config.MarshalFor(cfg.Config, schema)
	if err != nil || len(dropped) == 0 {
		return canonicalForm(cfg)
	}
	redacted := yaml
	if !bytes.Equal(cfg.RedactedYAML, cfg.YAML) { // a form without secrets has none to redact
		redacted, err = redactedYAML(cfg.Config, yaml, func(c *config.Config) ([]byte, error) {
			y, _, err := config.MarshalFor(c, schema)
			return y, err
		})
		if err != nil {
			return canonicalForm(cfg)
		}
	}
	return &wireForm{yaml: yaml, redacted: redacted, hash: configHash(yaml), dropped: dropped}
}
