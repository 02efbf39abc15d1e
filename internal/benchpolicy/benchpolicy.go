// Package benchpolicy names the rows of the two policy benchmarks, the
// simulated one (`lbsim bench`, sim/policybench) and the real one
// (`lbbench`, internal/realbench): which load-balancing policy a row's
// service runs and, for a baseline, over which scope. Its vocabulary is the
// operator's (config.Policy, config.HashScope); it adds the row, its label,
// the default rows, the selection by label that both commands' --policies
// flags take, and the question both ask of their results (Compare: does
// waterfall beat every hashing row?). It does no I/O.
package benchpolicy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spillway-lb/spillway/config"
)

// Row is one row of a policy benchmark: the policy of the benchmark's one
// service (config.Service.Policy) and, for a baseline, its scope.
type Row struct {
	// Policy is the service's policy: a planned one (waterfall, min_rtt),
	// whose gfes plan, damp and pick by their site's plan row, or a
	// baseline (round_robin, least_request, hash2, hash3, hash5).
	Policy config.Policy
	// Scope is a baseline's scope, global or nearest_region; empty for the
	// planned policies and envoy_priority (which order regions themselves). Only the hash policies honour nearest_region (the
	// service's hash_scope); round_robin and least_request run global, as
	// the gfe runs them.
	Scope config.HashScope
}

// ID returns the row's label: the policy, with "/scope" when Scope is set
// ("waterfall", "hash5/nearest_region").
func (r Row) ID() string {
	if r.Scope == "" {
		return string(r.Policy)
	}
	return string(r.Policy) + "/" + string(r.Scope)
}

// HashScope returns the hash_scope the service's config gets for r: Scope
// for the hash policies, empty for every other.
func (r Row) HashScope() config.HashScope {
	if r.Policy.IsHash() {
		return r.Scope
	}
	return ""
}

// Defaults returns the benchmarks' 10 rows: waterfall; min_rtt (least
// total RTT under the same constraints, run by the gfes exactly like
// waterfall); round_robin and least_request (scope global, as the gfe runs
// them: least_request/global is the P2C baseline, the power of two choices
// over least requests that Envoy, Istio and HAProxy default to); then
// hash2, hash3 and hash5 with scope global and then nearest_region.
func Defaults() []Row {
	rs := []Row{
		{Policy: config.PolicyWaterfall},
		{Policy: config.PolicyMinRTT},
		{Policy: config.PolicyRoundRobin, Scope: config.HashScopeGlobal},
		{Policy: config.PolicyLeastRequest, Scope: config.HashScopeGlobal},
	}
	for _, sc := range config.HashScopes() {
		for _, h := range []config.Policy{config.PolicyHash2, config.PolicyHash3, config.PolicyHash5} {
			rs = append(rs, Row{Policy: h, Scope: sc})
		}
	}
	return rs
}

// Extras returns the rows a benchmark runs only when named (Select): the
// baselines that are not Defaults, so that the default stories keep their
// rows and their run time. envoy_priority is Envoy's priority model
// (config.PolicyEnvoyPriority).
func Extras() []Row {
	return []Row{
		{Policy: config.PolicyEnvoyPriority},
	}
}

// Selectable returns every row Select can name: Defaults, then Extras.
func Selectable() []Row { return append(Defaults(), Extras()...) }

// aliases are the names Select takes for a row besides its ID and policy:
// p2c is least_request/global, the power of two choices over least
// requests (not a policy of its own: the gfe's least_request is P2C).
var aliases = map[string]string{"p2c": "least_request/global"}

// Select returns the rows whose ID, policy or alias (p2c: the
// least_request/global row) is in the comma-separated list, in Selectable
// order (a bare "hash2" selects both scopes); every default row for a list
// of only spaces. It fails on a name that is none of these, and when the
// list names none.
func Select(list string) ([]Row, error) {
	if strings.TrimSpace(list) == "" {
		return Defaults(), nil
	}
	all := Selectable()
	want := map[string]bool{}
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if id, ok := aliases[item]; ok {
			item = id
		}
		if !slices.ContainsFunc(all, func(r Row) bool { return r.ID() == item || string(r.Policy) == item }) {
			ids := make([]string, len(all))
			for i, r := range all {
				ids[i] = r.ID()
			}
			return nil, fmt.Errorf("unknown policy %q (want one of %s, or p2c)", item, strings.Join(ids, ", "))
		}
		want[item] = true
	}
	out := slices.DeleteFunc(all, func(r Row) bool { return !want[r.ID()] && !want[string(r.Policy)] })
	if len(out) == 0 {
		return nil, errors.New("no policy named")
	}
	return out, nil
}
