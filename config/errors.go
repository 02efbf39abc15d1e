package config

import "errors"

// ErrInvalid is matched, with errors.Is, by every error about the content of a
// configuration (syntax, unknown key, wrong type, failed check), as opposed to
// an I/O error such as a missing file. A control plane that hot-reloads keeps
// its last good config on any error; the distinction only matters for what it
// logs.
var ErrInvalid = errors.New("invalid config")

// FieldError is one problem with a configuration, located by file and field
// path. Load, Parse, New and Validate return every problem they find as
// FieldErrors joined with errors.Join; FieldErrors recovers them.
type FieldError struct {
	// File is the file name given to Load or Parse; "" for New and for a
	// Config built by hand.
	File string
	// Path locates the field, in the YAML's terms:
	// "services[1].backends[0].group". "" for problems with the whole
	// document (YAML syntax), "env SPILLWAY_X" for a bad environment
	// override.
	Path string
	// Msg says what is wrong, with the offending value.
	Msg string
	// Err is the underlying error, if any (e.g. the YAML parser's).
	Err error
}

// Error returns "file: path: msg", leaving out empty parts.
func (e *FieldError) Error() string {
	s := e.Msg
	if e.Path != "" {
		s = e.Path + ": " + s
	}
	if e.File != "" {
		s = e.File + ": " + s
	}
	return s
}

// Unwrap returns the underlying error, or nil.
func (e *FieldError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// FieldErrors returns every *FieldError in err's tree (through errors.Join and
// %w wrapping), in order. It returns nil if err holds none.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if fe, ok := err.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// problems collects FieldErrors for one file.
type problems struct {
	file string
	errs []error
}

func (p *problems) add(path, msg string) {
	p.errs = append(p.errs, &FieldError{File: p.file, Path: path, Msg: msg})
}

func (p *problems) err() error { return errors.Join(p.errs...) }
