package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/lb/quota"
)

// TestQuotaLookups: the effective limit of every case of docs/design.md §7 as
// configured in quota.good.yaml, the project of an API key, and the charges
// a request matches.
func TestQuotaLookups(t *testing.T) {
	c, err := Load("testdata/quota.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	limits := []struct {
		project, metric string
		want            int64
		source          quota.Source
	}{
		{"acme", "upload-bytes", 1_000_000, quota.SourceDefault},    // no override
		{"acme", "read-requests", 6000, quota.SourceProducer},       // producer only: raises 600
		{"initech", "read-requests", 600, quota.SourceConsumer},     // consumer only: min(900, 600)
		{"initech", "upload-bytes", 50, quota.SourceBoth},           // both: min(50, 100)
		{"someone-else", "read-requests", 600, quota.SourceDefault}, // no consumer: the default
	}
	for _, tt := range limits {
		l, src, ok := c.QuotaLimit(tt.project, tt.metric)
		if !ok || l != tt.want || src != tt.source {
			t.Errorf("QuotaLimit(%s, %s) = %d, %s, %v; want %d, %s", tt.project, tt.metric, l, src, ok, tt.want, tt.source)
		}
	}
	if _, _, ok := c.QuotaLimit("acme", "writes"); ok {
		t.Error("QuotaLimit of an unknown metric reported ok")
	}
	for key, want := range map[string]string{"acme-key-0002": "acme", "initech-key-01": "initech", "nope-nope-nope": "", "": ""} {
		got, ok := c.QuotaProject(key)
		if got != want || ok != (want != "") {
			t.Errorf("QuotaProject(%q) = %q, %v; want %q", key, got, ok, want)
		}
	}
	c.Quota.AllowAnonymous = true
	if got, ok := c.QuotaProject(""); got != AnonymousProject || !ok {
		t.Errorf("QuotaProject(\"\") with allow_anonymous = %q, %v; want %q", got, ok, AnonymousProject)
	}
	metrics := func(chs []QuotaCharge) []string {
		var out []string
		for _, ch := range chs {
			out = append(out, ch.Metric)
		}
		return out
	}
	if diff := cmp.Diff([]string{"read-requests", "upload-bytes", "read-requests"}, metrics(c.QuotaCharges("web", "POST", "/upload/a"))); diff != "" {
		t.Errorf("charges of POST /upload/a (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"read-requests"}, metrics(c.QuotaCharges("web", "GET", "/upload/a"))); diff != "" {
		t.Errorf("charges of GET /upload/a (-want +got):\n%s", diff)
	}
	if got := c.QuotaCharges("other", "GET", "/"); got != nil {
		t.Errorf("charges of another service: %v, want none", got)
	}
	if ch := c.QuotaCharges("web", "POST", "/x")[1]; ch.Cost != 5 || ch.PathPrefix != "/" {
		t.Errorf("POST charge %+v: want cost 5 and the default path prefix /", ch)
	}
	if m := c.Quota.Metrics[0]; m.Unit != QuotaRequests {
		t.Errorf("metric without unit: %q, want the default %q", m.Unit, QuotaRequests)
	}
}

// TestQuotaAPIKeysRedacted: API keys are credentials; a redacted config
// carries none, and a gfe refuses it with "withheld".
func TestQuotaAPIKeysRedacted(t *testing.T) {
	c, err := Load("testdata/quota.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := Redact(c)
	for i, k := range r.Quota.Consumers {
		if k.APIKey != RedactedSecret {
			t.Errorf("consumer %d: api_key %q in a redacted config", i, k.APIKey)
		}
	}
	if c.Quota.Consumers[0].APIKey != "acme-key-0001" {
		t.Error("Redact changed the original config")
	}
	err = r.Validate()
	if err == nil || !strings.Contains(err.Error(), "quota.consumers[0].api_key: withheld") {
		t.Errorf("Validate(redacted) = %v, want quota.consumers[0].api_key: withheld", err)
	}
}

// TestQuotaProjectIndexed: a loaded Config finds an API key's project in
// its index without allocating, and answers as a Config built without an
// index (which scans the consumers) does, for every key and for none.
func TestQuotaProjectIndexed(t *testing.T) {
	c, err := Load("testdata/quota.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plain := Config{Quota: c.Quota} // no index
	keys := []string{"", "nope-nope-nope"}
	for _, k := range c.Quota.Consumers {
		keys = append(keys, k.APIKey)
	}
	for _, anonymous := range []bool{false, true} {
		c.Quota.AllowAnonymous, plain.Quota.AllowAnonymous = anonymous, anonymous
		for _, k := range keys {
			gp, gok := c.QuotaProject(k)
			wp, wok := plain.QuotaProject(k)
			if gp != wp || gok != wok {
				t.Errorf("anonymous %v: QuotaProject(%q) = %q, %v indexed, %q, %v scanning", anonymous, k, gp, gok, wp, wok)
			}
		}
	}
	key := c.Quota.Consumers[len(c.Quota.Consumers)-1].APIKey
	if n := testing.AllocsPerRun(100, func() { c.QuotaProject(key) }); n != 0 {
		t.Errorf("QuotaProject allocates %v times, want 0", n)
	}
}
