package reqpath

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// TestNormalize: the canonical form and each refusal, by a table of the
// paths the security review sent and their neighbours.
func TestNormalize(t *testing.T) {
	for _, tt := range []struct {
		in, esc, dec string
		err          error
	}{
		{"/", "/", "/", nil},
		{"/api/x", "/api/x", "/api/x", nil},
		{"/api/x/", "/api/x/", "/api/x/", nil},
		{"/API/x", "/API/x", "/API/x", nil}, // case kept; matching folds it
		{"//api/x", "/api/x", "/api/x", nil},
		{"//api//secret///", "/api/secret/", "/api/secret/", nil},
		{"/%61pi/x", "/api/x", "/api/x", nil},
		{"/a%2eb/%7euser", "/a.b/~user", "/a.b/~user", nil},
		{"/a%2fb", "/a%2Fb", "/a/b", nil}, // an encoded slash stays encoded
		{"/group%2Fproject/x", "/group%2Fproject/x", "/group/project/x", nil},
		{"/a%20b", "/a%20b", "/a b", nil},
		{"/a%3bb", "/a%3Bb", "/a;b", nil},
		{"/100%25", "/100%25", "/100%", nil},
		{"/100%25zz", "/100%25zz", "/100%zz", nil},
		{"/a;jsessionid=1/b", "/a;jsessionid=1/b", "/a;jsessionid=1/b", nil},
		{"/x..y/.z/...", "/x..y/.z/...", "/x..y/.z/...", nil},
		{"/caf%C3%A9", "/caf%C3%A9", "/café", nil},
		{"/caf%c3%a9", "/caf%C3%A9", "/café", nil},

		{"*", "", "", ErrNotOrigin},
		{"", "", "", ErrNotOrigin},
		{"api/x", "", "", ErrNotOrigin},
		{`/api\x`, "", "", ErrBackslash},
		{`/a\..\x`, "", "", ErrBackslash},
		{"/api%5cx", "", "", ErrBackslash},
		{"/api%5Cx", "", "", ErrBackslash},
		{"/a\x00b", "", "", ErrControl},
		{"/a b", "", "", ErrControl},
		{"/a%00b", "", "", ErrControl},
		{"/a%0Ab", "", "", ErrControl},
		{"/a%7f", "", "", ErrControl},
		{"/a%zz", "", "", ErrBadEscape},
		{"/a%2", "", "", ErrBadEscape},
		{"/a%", "", "", ErrBadEscape},
		{"/%u002e%u002e/", "", "", ErrBadEscape},
		{"/a/../x", "", "", ErrDotSegment},
		{"/a/./x", "", "", ErrDotSegment},
		{"/a/..", "", "", ErrDotSegment},
		{"/..", "", "", ErrDotSegment},
		{"/a/%2e%2e/x", "", "", ErrDotSegment},
		{"/a/.%2E/x", "", "", ErrDotSegment},
		{"/a/..%2fx", "", "", ErrDotSegment},
		{"/a/x%2F..", "", "", ErrDotSegment},
		{"/a/..;/x", "", "", ErrDotSegment},
		{"/a/.;x/y", "", "", ErrDotSegment},
		{"/a/..%3b/x", "", "", ErrDotSegment},
		{"/a//..//x", "", "", ErrDotSegment},
		{"/a/%252e%252e/x", "", "", ErrDoubleEscape},
		{"/a/%252E", "", "", ErrDoubleEscape},
		{"/a/%255c", "", "", ErrDoubleEscape},
		{"/a/%25%32%65", "", "", ErrDoubleEscape}, // %252e once %32 and %65 are decoded
		{"/%2F/api/x", "", "", ErrEmptySegment},
		{"/api%2F%2Fx", "", "", ErrEmptySegment},
		{"/api/%2F", "", "", ErrEmptySegment},
		{"/;x/api/y", "", "", ErrEmptySegment},
		{"/a/;/b", "", "", ErrEmptySegment},
	} {
		got, err := Normalize(tt.in)
		if tt.err != nil {
			if !errors.Is(err, tt.err) || !errors.Is(err, ErrRefused) {
				t.Errorf("Normalize(%q) = %+v, %v; want %v", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got.Escaped != tt.esc || got.Decoded != tt.dec {
			t.Errorf("Normalize(%q) = %q, %q, %v; want %q, %q", tt.in, got.Escaped, got.Decoded, err, tt.esc, tt.dec)
		}
	}
}

// TestNormalizeAllocs: a canonical path costs nothing; a path with an
// escape costs its decoded copy only.
func TestNormalizeAllocs(t *testing.T) {
	for _, tt := range []struct {
		p    string
		want float64
	}{
		{"/api/items/42", 0},
		{"/a%2Fb", 1},
		{"//api/x", 1},
	} {
		if got := testing.AllocsPerRun(100, func() { Normalize(tt.p) }); got != tt.want {
			t.Errorf("Normalize(%q) allocates %v times, want %v", tt.p, got, tt.want)
		}
	}
}

// TestHasPrefix: case-insensitive, parameters left out, plain prefix.
func TestHasPrefix(t *testing.T) {
	for _, tt := range []struct {
		p, prefix string
		want      bool
	}{
		{"/api/x", "/api/", true},
		{"/API/x", "/api/", true},
		{"/Api/X", "/aPI/x", true},
		{"/api", "/api/", false},
		{"/apiary", "/api", true},
		{"/apiary", "/api/", false},
		{"/api;v=1/x", "/api/", true},
		{"/api;v=1/x", "/api/x", true},
		{"/api;v=1", "/api/", false},
		{"/api;v=1", "/api", true},
		{"/a;x/b;y/c", "/a/b/c", true},
		{"/other", "/api/", false},
		{"/", "/", true},
		{"/x", "", true},
		{"/café", "/CAFÉ", false}, // ASCII folding only
	} {
		if got := HasPrefix(tt.p, tt.prefix); got != tt.want {
			t.Errorf("HasPrefix(%q, %q) = %v, want %v", tt.p, tt.prefix, got, tt.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { HasPrefix("/api;v=1/x", "/api/") }); n != 0 {
		t.Errorf("HasPrefix allocates %v times, want 0", n)
	}
}

// FuzzNormalizePath: whatever the path, a canonical one holds no "//",
// no '\', no dot segment (with or without parameters) and no escaped
// '.', in Escaped or Decoded; Decoded is Escaped decoded once; and
// Normalize of a canonical path is that path.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "//api/x", "/API/x", `/api\x`, `/a\..\x`, "/a/..;/x", "/a/%252e%252e/x",
		"/a/%2e%2e/", "/a%2Fb", "/%61pi", "/a;b/c", "/a/%25%32%65", "/x%2F%2F", "/;x/", "/a%3B/..%3b/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := Normalize(in)
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("Normalize(%q): error %v does not wrap ErrRefused", in, err)
			}
			return
		}
		for _, s := range []string{p.Escaped, p.Decoded} {
			if !strings.HasPrefix(s, "/") || strings.Contains(s, "//") || strings.Contains(s, `\`) {
				t.Fatalf("Normalize(%q) = %q, %q: not rooted, or has // or \\", in, p.Escaped, p.Decoded)
			}
			for seg := range strings.SplitSeq(s, "/") {
				if name, _, _ := strings.Cut(seg, ";"); name == "." || name == ".." {
					t.Fatalf("Normalize(%q) = %q, %q: dot segment %q", in, p.Escaped, p.Decoded, seg)
				}
			}
		}
		low := strings.ToLower(p.Escaped)
		if strings.Contains(low, "%2e") || strings.Contains(low, "%25") && doubleEscape(strings.ToUpper(p.Escaped)) {
			t.Fatalf("Normalize(%q) = %q: an escaped dot", in, p.Escaped)
		}
		if d, err := url.PathUnescape(p.Escaped); err != nil || d != p.Decoded {
			t.Fatalf("Normalize(%q): Decoded %q, but Escaped %q decodes to %q (%v)", in, p.Decoded, p.Escaped, d, err)
		}
		again, err := Normalize(p.Escaped)
		if err != nil || again != p {
			t.Fatalf("Normalize(%q) = %+v, but Normalize of that = %+v, %v: not idempotent", in, p, again, err)
		}
	})
}
