// Package benchpolicy names the rows of the two policy benchmarks, the
// simulated one (`lbsim bench`, sim/policybench) and the real one
// (`lbbench`, internal/realbench): which load-balancing policy a row's
// service runs and, for a baseline, over which scope. Its vocabulary is the
// operator's (config.Policy, config.HashScope); it adds the row, its label,
// the default rows, the service options a row may turn on (Options), the
// selection by label that both commands' --policies flags take, and the
// question both ask of their results (Compare: does waterfall beat every
// hashing row?). It does no I/O.
package benchpolicy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spillway-lb/spillway/config"
)

// Row is one row of a policy benchmark: the policy of the benchmark's one
// service (config.Service.Policy), for a baseline its scope, and the
// service options the row turns on. Row is comparable: two rows are the
// same row exactly when they are ==.
type Row struct {
	// Policy is the service's policy: a planned one (waterfall, min_rtt),
	// whose gfes plan, damp and pick by their site's plan row, or a
	// baseline (round_robin, least_request, hash2, hash3, hash5, prequal).
	Policy config.Policy
	// Scope is a baseline's scope, global or nearest_region; empty for the
	// planned policies and envoy_priority (which order regions themselves). Only the hash policies honour nearest_region (the
	// service's hash_scope); round_robin and least_request run global, as
	// the gfe runs them.
	Scope config.HashScope
	// Options are the service options the row turns on; the zero value
	// turns none on (every default row). Only a planned policy takes any,
	// as the config does (config.Service.LoadAware and Overload).
	Options
}

// Options are the service options a row turns on, every other key of
// their block at its default. In a result row's JSON they are the keys
// load_aware and shed, present only when true.
type Options struct {
	// LoadAware turns the load-aware choice of an instance inside the
	// plan's group on (config load_aware: {enabled: true}).
	LoadAware bool `json:"load_aware,omitempty"`
	// Shed turns the shedding of global overload on (config overload:
	// {shed: true}).
	Shed bool `json:"shed,omitempty"`
}

// Option names, as they appear in a row's label after a "+".
const (
	OptionLoadAware = "load_aware"
	OptionShed      = "shed"
)

// Suffix returns the options' part of a row's label: "+load_aware" and
// then "+shed" for each that is on, "" for none.
func (o Options) Suffix() string {
	s := ""
	if o.LoadAware {
		s += "+" + OptionLoadAware
	}
	if o.Shed {
		s += "+" + OptionShed
	}
	return s
}

// Any reports whether any option is on.
func (o Options) Any() bool { return o != Options{} }

// ID returns the row's label: the policy, with "/scope" when Scope is set,
// then the options' Suffix ("waterfall", "hash5/nearest_region",
// "waterfall+load_aware+shed").
func (r Row) ID() string {
	id := string(r.Policy)
	if r.Scope != "" {
		id += "/" + string(r.Scope)
	}
	return id + r.Suffix()
}

// Label returns the policy column of a result row: the policy with the
// options' Suffix ("waterfall+load_aware"), the scope being a column of
// its own.
func (r Row) Label() string { return string(r.Policy) + r.Suffix() }

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
		// Prequal's probing (lb/prequal), a baseline of scope global.
		{Policy: config.PolicyPrequal, Scope: config.HashScopeGlobal},
	}
}

// aliases are the names Select takes for a row besides its ID and policy:
// p2c is least_request/global, the power of two choices over least
// requests (not a policy of its own: the gfe's least_request is P2C).
var aliases = map[string]string{"p2c": "least_request/global"}

// optionSets are the option sets a planned row may turn on, in the order
// Known lists them.
var optionSets = []Options{{LoadAware: true}, {Shed: true}, {LoadAware: true, Shed: true}}

// Known returns every row the benchmarks can run: Defaults in their order,
// each planned one followed by its variants with options (+load_aware,
// +shed, +load_aware+shed), then Extras (envoy_priority, prequal/global).
func Known() []Row {
	var out []Row
	for _, r := range Defaults() {
		out = append(out, r)
		if r.Policy.IsPlanned() {
			for _, o := range optionSets {
				out = append(out, Row{Policy: r.Policy, Scope: r.Scope, Options: o})
			}
		}
	}
	return append(out, Extras()...)
}

// Select returns the known rows (Known) whose ID or alias (p2c: the
// least_request/global row) is in the comma-separated list, or, for a bare
// policy, its rows without options (a bare "hash2" selects both scopes, a
// bare "waterfall" not waterfall+shed), in Known's order; every default row
// for a list of only spaces. It fails on a name that is none of these, and
// when the list names none.
func Select(list string) ([]Row, error) {
	if strings.TrimSpace(list) == "" {
		return Defaults(), nil
	}
	all := Known()
	bare := func(r Row, item string) bool { return !r.Any() && string(r.Policy) == item }
	want := map[string]bool{}
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if id, ok := aliases[item]; ok {
			item = id
		}
		if !slices.ContainsFunc(all, func(r Row) bool { return r.ID() == item || bare(r, item) }) {
			ids := make([]string, 0, len(all))
			for _, r := range append(Defaults(), Extras()...) {
				ids = append(ids, r.ID())
			}
			return nil, fmt.Errorf("unknown policy %q (want one of %s, or p2c; a planned policy may add +%s, +%s or +%s+%s)",
				item, strings.Join(ids, ", "), OptionLoadAware, OptionShed, OptionLoadAware, OptionShed)
		}
		want[item] = true
	}
	out := slices.DeleteFunc(all, func(r Row) bool { return !want[r.ID()] && !(want[string(r.Policy)] && !r.Any()) })
	if len(out) == 0 {
		return nil, errors.New("no policy named")
	}
	return out, nil
}
