package routing_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/affinity"
	"github.com/spillway-lb/spillway/lb/outlier"
	"github.com/spillway-lb/spillway/lb/routing"
)

const testSecret = "session-test-secret-0123456789abcdef"

func TestOutlierConfig(t *testing.T) {
	tests := []struct {
		name string
		in   config.OutlierDetection
		want outlier.Config
	}{
		{"defaults", config.DefaultOutlierDetection(), outlier.Config{Consecutive5xx: 5, ConsecutiveConnectFailures: 3, BaseEjectionTime: 30 * time.Second, MaxEjectionTime: 300 * time.Second, MaxEjectionPercent: 50}},
		{"triggers disabled", config.OutlierDetection{BaseEjectionTime: time.Second, MaxEjectionTime: time.Second, MaxEjectionPercent: 100},
			outlier.Config{Consecutive5xx: math.MaxInt, ConsecutiveConnectFailures: math.MaxInt, BaseEjectionTime: time.Second, MaxEjectionTime: time.Second, MaxEjectionPercent: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := routing.OutlierConfig(tt.in)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("outlierConfig(%+v) mismatch (-want +got):\n%s", tt.in, d)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("outlierConfig(%+v) invalid: %v", tt.in, err)
			}
		})
	}
}

func TestAffinityConfig(t *testing.T) {
	def := affinity.DefaultConfig()
	tests := []struct {
		name string
		in   config.SessionAffinity
		want affinity.Config
	}{
		{"none", config.SessionAffinity{Type: config.AffinityNone}, def},
		{"client ip", config.SessionAffinity{Type: config.AffinityClientIPPortProto},
			with(def, func(c *affinity.Config) { c.Mode = affinity.ModeClientIPPortProto })},
		{"generated cookie", config.SessionAffinity{Type: config.AffinityGeneratedCookie, CookieName: "S", CookieTTL: time.Minute, CookieSecret: testSecret},
			with(def, func(c *affinity.Config) {
				c.Mode, c.CookieName, c.CookieTTL = affinity.ModeGeneratedCookie, "S", time.Minute
			})},
		{"session cookie never expires", config.SessionAffinity{Type: config.AffinityGeneratedCookie, CookieName: "S", CookieSecret: testSecret},
			with(def, func(c *affinity.Config) {
				c.Mode, c.CookieName, c.CookieTTL = affinity.ModeGeneratedCookie, "S", routing.SessionCookieTTL
			})},
		{"http cookie", config.SessionAffinity{Type: config.AffinityHTTPCookie, CookieName: "sid"},
			with(def, func(c *affinity.Config) { c.Mode, c.HTTPCookie = affinity.ModeHTTPCookie, "sid" })},
		{"header", config.SessionAffinity{Type: config.AffinityHeader, HeaderName: "x-user"},
			with(def, func(c *affinity.Config) { c.Mode, c.HeaderName = affinity.ModeHeader, "x-user" })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := routing.AffinityConfig(tt.in)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("affinityConfig(%+v) mismatch (-want +got):\n%s", tt.in, d)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("affinityConfig(%+v) is invalid: %v", tt.in, err)
			}
		})
	}
}

func with(c affinity.Config, f func(*affinity.Config)) affinity.Config {
	f(&c)
	return c
}

func TestDeriveCookieKey(t *testing.T) {
	k := routing.DeriveCookieKey(testSecret, "web")
	if len(k) != affinity.MinKeyLen {
		t.Fatalf("key length %d, want %d", len(k), affinity.MinKeyLen)
	}
	if !bytes.Equal(k, routing.DeriveCookieKey(testSecret, "web")) {
		t.Error("the same secret and service give different keys")
	}
	if bytes.Equal(k, routing.DeriveCookieKey(testSecret, "api")) {
		t.Error("two services share a key")
	}
	if bytes.Equal(k, routing.DeriveCookieKey(testSecret+"x", "web")) {
		t.Error("two secrets give the same key")
	}
}
