package affinity

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzParseCookie feeds arbitrary values to ParseCookie and to a Picker in
// generated-cookie mode. It checks that neither panics, that errors are the
// documented sentinels, and that the only values ever accepted (or honoured
// by the Picker) are the exact values this keyring signed in the seed corpus:
// anything else accepted would be a forgery.
func FuzzParseCookie(f *testing.F) {
	kr := mustKeyring(f, 1)
	bs := backendNames(4)
	signed := map[string]bool{}
	for i, b := range bs {
		v := kr.Encode(Cookie{Backend: BackendID(b), Expires: t0.Add(time.Duration(i+1) * time.Hour)})
		signed[v] = true
		f.Add(v)
	}
	valid := kr.Encode(Cookie{Backend: BackendID(bs[0]), Expires: t0.Add(time.Hour)})
	for _, v := range []string{
		"", "=", strings.Repeat("A", encodedLen), strings.Repeat("_", encodedLen),
		valid[:encodedLen-1] + "B", valid[:10] + "\r\n" + valid[12:], valid + "==",
		mustKeyring(f, 2).Encode(Cookie{Backend: BackendID(bs[0]), Expires: t0.Add(time.Hour)}),
		kr.Encode(Cookie{Backend: BackendID(bs[0]), Expires: t0}), // expired
		forge(BackendID(bs[0]), t0.Add(time.Hour), make([]byte, macLen)),
	} {
		f.Add(v)
	}
	p, err := New(config(ModeGeneratedCookie), bs, &fakeFallback{backends: bs}, Options{Keyring: kr})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, value string) {
		c, key, err := kr.ParseCookie(value, t0)
		if err != nil {
			if !errors.Is(err, ErrMalformedCookie) && !errors.Is(err, ErrBadSignature) && !errors.Is(err, ErrExpiredCookie) {
				t.Fatalf("ParseCookie(%q) error = %v, want a documented sentinel", value, err)
			}
			if key != -1 || c != (Cookie{}) {
				t.Fatalf("ParseCookie(%q) = %+v, %d with error %v, want zero values", value, c, key, err)
			}
		} else {
			if !signed[value] {
				t.Fatalf("ParseCookie(%q) accepted a value the keyring did not sign: %+v", value, c)
			}
			if got := kr.Encode(c); got != value || key != 0 {
				t.Fatalf("ParseCookie(%q) = %+v by key %d; Encode gives %q, want the same value by key 0", value, c, key, got)
			}
		}
		res, err := p.Pick(Request{Cookie: value}, t0)
		if err != nil {
			t.Fatalf("Pick(%q) error = %v", value, err)
		}
		if res.Pinned != signed[value] {
			t.Fatalf("Pick(%q) Pinned = %v, want %v", value, res.Pinned, signed[value])
		}
		if !res.Pinned && !res.SetCookie {
			t.Fatalf("Pick(%q) unpinned without a new cookie", value)
		}
	})
}
