package config

import "reflect"

// RedactedSecret stands for every secret in a configuration Redact
// returns. Validation reports a secret with this value as withheld, so a
// gfe that receives a redacted configuration rejects it (NACK) with a
// message that says why rather than running without the secret.
const RedactedSecret = "(redacted: secrets are served only to gfes authenticated with mutual TLS)"

// Redact returns a copy of c in which every secret (each service's
// session_affinity.cookie_secret and previous_cookie_secret, and every
// quota consumer's api_key) that is set is replaced by RedactedSecret: what a control plane serves to a client it
// could not authenticate. The copy is read-only, as c is; Source is kept.
func Redact(c *Config) *Config {
	out := cloneValue(reflect.ValueOf(*c)).Interface().(Config)
	for i := range out.Services {
		a := &out.Services[i].SessionAffinity
		if a.CookieSecret != "" {
			a.CookieSecret = RedactedSecret
		}
		if a.PreviousCookieSecret != "" {
			a.PreviousCookieSecret = RedactedSecret
		}
	}
	for i := range out.Quota.Consumers {
		out.Quota.Consumers[i].APIKey = RedactedSecret
	}
	out.finish()
	return &out
}
