// Package reqpath is the gfe's one canonical form of a request path, and
// the one rule by which route and quota-charge prefixes match it. The
// HTTP proxy normalises every request's path once, before routing, on
// every path a request can take (the HTTP/1.1 fast path, and net/http's
// HTTP/1.1 and HTTP/2): the route, the quota charges and the backend then
// all see the same path, or the request is refused with 400. Pure: no I/O.
//
// # The canonical form
//
// Normalize takes the escaped path of a request target (what precedes
// '?') and returns it in canonical form, Path.Escaped, the path the
// backend receives, and that path percent-decoded once, Path.Decoded,
// what prefixes match:
//
//   - runs of '/' are merged into one ("//api/x" is "/api/x");
//   - percent-encoded unreserved characters (RFC 3986 §2.3: letters,
//     digits, '-', '.', '_', '~') are decoded ("/%61pi" is "/api",
//     "%2e" is "."), and the hex digits of the other escapes are upper
//     case (RFC 3986 §6.2.2): two spellings of one path are one string;
//   - other escapes stay: "%2F" is not '/' to a backend that keeps it
//     (GitLab's "group%2Fproject"), so it is never decoded in Escaped.
//
// It refuses (an error wrapping ErrRefused, and the gfe answers 400):
//
//   - a path that does not start with '/' (asterisk or authority form,
//     or empty);
//   - '\' and "%5C": some backends read it as '/';
//   - a control character, raw or escaped ("%00", "%0A"), and a raw
//     space;
//   - a malformed escape ("%zz", "%u002e");
//   - a dot segment ("." or ".."), in Escaped or in Decoded, with or
//     without segment parameters ("..;x": servlet containers drop
//     ";x" and then resolve ".."): "/a/%2e%2e/", "/a/..%2F..%2F";
//   - a double escape, "%25" followed by two hex digits ("%252e"): a
//     backend that decodes again would see what this package never
//     checked;
//   - an empty segment in Decoded ("/a%2F%2Fb", "/%2F"), or a segment
//     that has parameters and no name ("/;x/"): a backend that decodes
//     "%2F" or drops parameters, then merges slashes, would serve a path
//     no prefix was matched against.
//
// So neither Escaped nor Decoded holds "//", '\', a dot segment or an
// escaped '.', and Normalize(Escaped) is Path itself (FuzzNormalizePath).
//
// # Matching
//
// HasPrefix(decoded, prefix) is how a route's or a charge's path_prefix
// matches a path: a plain string prefix of Decoded, ASCII
// case-insensitive, with each segment's parameters (";" up to the next
// '/') left out. Case-insensitive because the gfe cannot know whether a
// backend is: one that is not (IIS, ASP.NET, Spring with case-insensitive
// matching, a case-insensitive file system) serves "/API/x" as "/api/x",
// so a charge on "/api/" must charge both; a case-sensitive backend
// serves "/API/x" as something else or 404, and the charge then costs a
// request that found nothing, which is the safe side. Parameters are left
// out for the same reason: servlet containers serve "/api;v=1/x" as
// "/api/x". The path the backend receives keeps its case and parameters.
package reqpath

import (
	"errors"
	"strings"
)

// Path is a request path in canonical form.
type Path struct {
	// Escaped is the canonical escaped path: what the backend receives.
	Escaped string
	// Decoded is Escaped percent-decoded once: what prefixes match.
	Decoded string
}

// ErrRefused is wrapped by every error of Normalize: the path is refused.
var ErrRefused = errors.New("request path refused")

// The errors of Normalize, each wrapping ErrRefused. Their text says what
// a client can fix and nothing internal.
var (
	ErrNotOrigin    = refused("it does not start with /")
	ErrBackslash    = refused(`it holds a backslash (\ or %5C)`)
	ErrControl      = refused("it holds a space or a control character")
	ErrBadEscape    = refused("it holds a malformed percent-encoding")
	ErrDotSegment   = refused("it has a dot segment (. or ..)")
	ErrDoubleEscape = refused("it is percent-encoded twice (%25 before hex digits)")
	ErrEmptySegment = refused("an encoded slash or segment parameters leave an empty segment")
)

// refusal is an error of Normalize.
type refusal struct{ why string }

func refused(why string) error     { return &refusal{why} }
func (e *refusal) Error() string   { return "request path refused: " + e.why }
func (e *refusal) Unwrap() error   { return ErrRefused }
func (e *refusal) Is(t error) bool { return t == ErrRefused }

// Normalize returns escaped path p (a request target before '?') in
// canonical form, or the reason it is refused (see the package
// documentation); an empty p (CONNECT's authority form) is refused. It
// allocates only when p is not canonical already (then
// Escaped is new) or holds an escape (then Decoded is new): for a
// canonical path without '%', Escaped and Decoded are p itself.
func Normalize(p string) (Path, error) {
	if p == "" || p[0] != '/' {
		return Path{}, ErrNotOrigin
	}
	// b is the canonical form once it differs from p (copied then): a
	// canonical p is returned as it is.
	var b strings.Builder
	differs := false
	differ := func(i int) {
		if !differs {
			differs = true
			b.Grow(len(p))
			b.WriteString(p[:i])
		}
	}
	escapes := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\':
			return Path{}, ErrBackslash
		case c <= ' ' || c == 0x7f:
			return Path{}, ErrControl
		case c == '/' && i > 0 && p[i-1] == '/':
			differ(i)
			continue // merged
		case c != '%':
			if differs {
				b.WriteByte(c)
			}
			continue
		}
		if i+2 >= len(p) || !ishex(p[i+1]) || !ishex(p[i+2]) {
			return Path{}, ErrBadEscape
		}
		v := unhex(p[i+1])<<4 | unhex(p[i+2])
		switch {
		case v == '\\':
			return Path{}, ErrBackslash
		case v < 0x20 || v == 0x7f:
			return Path{}, ErrControl
		case unreserved(v):
			differ(i)
			b.WriteByte(v)
		default:
			escapes = true
			if p[i+1] != upper(p[i+1]) || p[i+2] != upper(p[i+2]) {
				differ(i)
			}
			if differs {
				b.WriteByte('%')
				b.WriteByte(upper(p[i+1]))
				b.WriteByte(upper(p[i+2]))
			}
		}
		i += 2
	}
	esc := p
	if differs {
		// The merge looked at p, not at b: "/%2e/" would not merge, but
		// it is a dot segment, refused below; a decoded unreserved byte is
		// never '/'.
		esc = b.String()
	}
	if doubleEscape(esc) {
		// Checked on the result: "%25%32%65" is "%252e" once "%32" and
		// "%65" are decoded.
		return Path{}, ErrDoubleEscape
	}
	if err := checkSegments(esc, false); err != nil {
		return Path{}, err
	}
	dec := esc
	if escapes {
		dec = decode(esc)
		if err := checkSegments(dec, true); err != nil {
			return Path{}, err
		}
	}
	return Path{Escaped: esc, Decoded: dec}, nil
}

// checkSegments refuses a dot segment in path p (with or without
// parameters), and, in a decoded path, an empty segment other than the
// last (a trailing '/'). In an escaped path runs of '/' are merged
// already; a segment of parameters without a name is refused in both.
func checkSegments(p string, decoded bool) error {
	rest := p[1:]
	for {
		seg, more, found := strings.Cut(rest, "/")
		name, _, params := strings.Cut(seg, ";")
		switch {
		case name == "." || name == "..":
			return ErrDotSegment
		case name == "" && params:
			return ErrEmptySegment
		case decoded && seg == "" && found:
			return ErrEmptySegment
		}
		if !found {
			return nil
		}
		rest = more
	}
}

// doubleEscape reports whether p holds "%25" followed by two hex digits.
func doubleEscape(p string) bool {
	for {
		i := strings.Index(p, "%25")
		if i < 0 {
			return false
		}
		if i+4 < len(p) && ishex(p[i+3]) && ishex(p[i+4]) {
			return true
		}
		p = p[i+3:]
	}
}

// decode percent-decodes p, whose escapes are all well formed.
func decode(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '%' {
			b.WriteByte(unhex(p[i+1])<<4 | unhex(p[i+2]))
			i += 2
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// HasPrefix reports whether prefix matches decoded path p: p, with every
// segment's parameters (from ';' to the next '/') left out, starts with
// prefix, ASCII case-insensitively. A prefix with ';' never matches (the
// config refuses one). It does not allocate.
func HasPrefix(p, prefix string) bool {
	j := 0
	for i := 0; j < len(prefix); i++ {
		if i >= len(p) {
			return false
		}
		c := p[i]
		if c == ';' {
			for i < len(p) && p[i] != '/' {
				i++
			}
			if i == len(p) {
				return false
			}
			c = '/'
		}
		if lower(c) != lower(prefix[j]) {
			return false
		}
		j++
	}
	return true
}

// unreserved reports whether c is an unreserved character (RFC 3986
// §2.3), whose escape is decoded in the canonical form.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c - 'A' + 'a'
	}
	return c
}
