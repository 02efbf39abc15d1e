package config

import (
	"strings"
	"testing"
)

// TestRedact checks that a redacted configuration carries no secret, that
// the original is untouched, and that a gfe parsing the redacted form
// rejects it naming the withheld fields.
func TestRedact(t *testing.T) {
	c, err := Load("testdata/full.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"full-good-example-secret-0123456789abcdef", "full-good-previous-secret-0123456789abcdef"}
	full, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	r := Redact(c)
	red, err := Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if !strings.Contains(string(full), s) {
			t.Fatalf("the full form lacks %q; the fixture changed", s)
		}
		if strings.Contains(string(red), s) {
			t.Errorf("the redacted form shows the secret %q", s)
		}
	}
	if got := c.Services[0].SessionAffinity.CookieSecret; got != secrets[0] {
		t.Errorf("Redact changed the original: cookie_secret %q", got)
	}
	if r.Source() != c.Source() {
		t.Errorf("Redact source = %q, want %q", r.Source(), c.Source())
	}
	_, err = Parse(red, "snapshot")
	for _, want := range []string{
		"session_affinity.cookie_secret: withheld: the control plane serves secrets only over mutual TLS",
		"session_affinity.previous_cookie_secret: withheld",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(redacted) = %v, want an error containing %q", err, want)
		}
	}
}
