package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// Scenario is a validated simulation scenario: regions with their instance
// groups, and sites with their demand. It is read-only after ParseScenario
// returns it; callers must not change it.
type Scenario struct {
	// Regions in file order. Names are unique.
	Regions []Region
	// Sites in file order. Names are unique.
	Sites []Site
	// Timeline is the scenario's dynamics for `lbsim bench`; nil when the
	// file has none (a one-step steady state, see DefaultTimeline). `lbsim
	// plan` ignores it.
	Timeline *Timeline
}

// Region is one region of a Scenario.
type Region struct {
	// Name is unique among the scenario's regions.
	Name string
	// Groups in file order; at least one.
	Groups []Group
}

// Group is one instance group of a Region.
type Group struct {
	// Name is unique among all groups of the scenario.
	Name string
	// Zone is informational; empty when the file omits it.
	Zone string
	// Instances is the number of instances in the group, ≥ 0.
	Instances int
	// Healthy is how many instances pass health checks, 0 ≤ Healthy ≤ Instances.
	Healthy int
	// RatePerInstance is the RATE capacity of one healthy instance, in
	// requests/s, ≥ 0.
	RatePerInstance float64
	// CapacityScaler scales the group's capacity, in [0,1]. 1 when the file
	// omits it; 0 drains the group.
	CapacityScaler float64
}

// Capacity returns the group's serving capacity in requests/s:
// Healthy × RatePerInstance × CapacityScaler.
func (g Group) Capacity() float64 {
	return RateCapacity(g.Healthy, g.RatePerInstance, g.CapacityScaler)
}

// RateCapacity is the RATE capacity of healthy instances of rate requests/s
// each, scaled by scaler: the gfe's own formula (config.Backend.Capacity),
// so that the simulator plans with the capacities a gfe would.
func RateCapacity(healthy int, rate, scaler float64) float64 {
	b := config.Backend{MaxRatePerInstance: rate, CapacityScaler: scaler}
	return b.Capacity(config.ModeRate, healthy, healthy)
}

// Site is one edge site of a Scenario.
type Site struct {
	// Name is unique among the scenario's sites.
	Name string
	// DemandRPS is the demand arriving at the site, in requests/s, ≥ 0.
	DemandRPS float64
	// RTTms maps a region name to the round trip from the site, in
	// milliseconds, ≥ 0. It names at least one region, and only regions of
	// the scenario; a region missing from it is unreachable from the site.
	RTTms map[string]float64
}

// ErrInvalidScenario is wrapped by every error ParseScenario and Validate
// return for a bad scenario; test for it with errors.Is.
var ErrInvalidScenario = errors.New("invalid scenario")

// ScenarioError lists every problem found in one scenario. Each problem is
// also a *config.FieldError (file, field path, message), the error type of
// operator configurations, so config.FieldErrors lists them the same way.
type ScenarioError struct {
	// File is the name the scenario was parsed under; may be empty.
	File string
	// Problems are "path: message" strings (or "line N: message" for YAML
	// syntax and type errors), in file order.
	Problems []string
}

// Error returns one line per problem, each prefixed with the file name.
func (e *ScenarioError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		if e.File != "" {
			b.WriteString(e.File)
			b.WriteString(": ")
		}
		b.WriteString(p)
	}
	return b.String()
}

// Unwrap returns ErrInvalidScenario and one *config.FieldError per problem,
// in order.
func (e *ScenarioError) Unwrap() []error {
	out := []error{ErrInvalidScenario}
	for _, p := range e.Problems {
		path, msg, ok := strings.Cut(p, ": ")
		if !ok {
			path, msg = "", p
		}
		out = append(out, &config.FieldError{File: e.File, Path: path, Msg: msg})
	}
	return out
}

// The file format. Numeric fields are pointers so that a missing required
// field can be told from an explicit zero (yaml.v3 loses KnownFields inside
// custom unmarshalers, so defaults are applied after decoding instead).
type fileScenario struct {
	Regions  []fileRegion  `yaml:"regions"`
	Sites    []fileSite    `yaml:"sites"`
	Timeline *fileTimeline `yaml:"timeline"`
}

type fileRegion struct {
	Name   string      `yaml:"name"`
	Groups []fileGroup `yaml:"groups"`
}

type fileGroup struct {
	Name            string   `yaml:"name"`
	Zone            string   `yaml:"zone"`
	Instances       *float64 `yaml:"instances"` // float: yaml.v3 truncates 1.5 into an int
	Healthy         *float64 `yaml:"healthy"`
	RatePerInstance *float64 `yaml:"rate_per_instance"`
	CapacityScaler  *float64 `yaml:"capacity_scaler"`
}

type fileSite struct {
	Name      string             `yaml:"name"`
	DemandRPS *float64           `yaml:"demand_rps"`
	RTTms     map[string]float64 `yaml:"rtt_ms"`
}

// LoadScenario reads the file at path and parses it with ParseScenario,
// naming it by path in errors.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	return ParseScenario(data, path)
}

// ParseScenario decodes and validates one scenario document:
//
//	regions:
//	  - name: us-east
//	    groups:
//	      - name: us-east-b          # unique in the scenario
//	        zone: us-east-b          # optional, informational
//	        instances: 10            # instances in the group
//	        healthy: 10              # of which pass health checks
//	        rate_per_instance: 100   # requests/s per healthy instance
//	        capacity_scaler: 1.0     # optional, default 1.0, in [0,1]
//	sites:
//	  - name: nyc
//	    demand_rps: 1500
//	    rtt_ms: {us-east: 5, eu-west: 80}
//	timeline:                  # optional; see Timeline and `lbsim bench`
//	  duration_s: 60
//	  feedback: true           # the gfes' closed loop (default true)
//	  model: {load_reports: true}  # instances send load reports (default true)
//	  demand:
//	    - {site: nyc, kind: step, at_s: 20, rps: 2500}
//	  events:
//	    - {at_s: 30, group: us-east-b, healthy: 4}
//
// All keys but zone, capacity_scaler and timeline are required; inside
// timeline, only duration_s is (docs/simulator.md and Timeline's fields give
// every key and its default). Unknown or duplicate
// keys, wrong types and extra YAML documents are errors. On failure it
// returns a *ScenarioError (wrapping ErrInvalidScenario) that lists every
// problem found, each prefixed with filename.
func ParseScenario(data []byte, filename string) (*Scenario, error) {
	fail := func(problems ...string) (*Scenario, error) {
		return nil, &ScenarioError{File: filename, Problems: problems}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f fileScenario
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return fail("empty scenario file")
		}
		return fail(YAMLProblems(err)...)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fail("more than one YAML document; a scenario is a single document")
	}
	s, issues := f.scenario()
	if problems := s.problems(issues); len(problems) > 0 {
		return fail(problems...)
	}
	return s, nil
}

var (
	notFoundRE = regexp.MustCompile(`^(line \d+): field (.+) not found in type \S+$`)
	intoTypeRE = regexp.MustCompile(`^(.* into )(\S+)$`)
)

// typeNames names the Go types of the file form for operators, in the
// "cannot unmarshal X into T" messages of yaml.v3.
var typeNames = strings.NewReplacer(
	"[]sim.fileRegion", "a list of regions",
	"[]sim.fileGroup", "a list of groups",
	"[]sim.fileSite", "a list of sites",
	"sim.fileScenario", "a scenario (a mapping with regions and sites)",
	"sim.fileRegion", "a region (a mapping)",
	"sim.fileGroup", "a group (a mapping)",
	"sim.fileSite", "a site (a mapping)",
	"sim.fileTimeline", "a timeline (a mapping)",
	"sim.fileModel", "a model (a mapping)",
	"[]sim.fileDemand", "a list of demand changes",
	"[]sim.fileEvent", "a list of events",
	"sim.fileDemand", "a demand change (a mapping)",
	"sim.fileEvent", "an event (a mapping)",
	"map[string]float64", "a mapping of region to milliseconds",
	"float64", "a number",
	"bool", "true or false",
	"string", "a string",
)

// YAMLProblems turns a yaml.v3 error into problems ("line N: message"),
// replacing the scenario format's Go type names with words an operator
// knows. The simulators' other file formats (sim/autoscalebench's traces)
// report their YAML errors with it too.
func YAMLProblems(err error) []string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	out := make([]string, 0, len(te.Errors))
	for _, msg := range te.Errors {
		if m := notFoundRE.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("%s: unknown field %q", m[1], m[2])
		} else if m := intoTypeRE.FindStringSubmatch(msg); m != nil {
			msg = m[1] + typeNames.Replace(m[2])
		}
		out = append(out, msg)
	}
	return out
}

// scenario converts the file form, applying defaults. Fields that are
// missing or not whole numbers are left zero and reported in issues, keyed by
// path, so that problems can list them in file order.
func (f *fileScenario) scenario() (s *Scenario, issues map[string]string) {
	issues = map[string]string{}
	s = &Scenario{}
	count := func(path string, v *float64) int {
		switch {
		case v == nil:
			issues[path] = "required"
		case *v != math.Trunc(*v): // also NaN
			issues[path] = fmt.Sprintf("must be a whole number, got %v", *v)
		case *v < 0:
			issues[path] = fmt.Sprintf("must be >= 0, got %v", *v)
		case *v > maxCount:
			issues[path] = fmt.Sprintf("must be at most %d, got %v", int64(maxCount), *v)
		default:
			return int(*v)
		}
		return 0
	}
	number := func(path string, v *float64) float64 {
		if v == nil {
			issues[path] = "required"
			return 0
		}
		return *v
	}
	for i, fr := range f.Regions {
		r := Region{Name: fr.Name}
		for j, fg := range fr.Groups {
			path := fmt.Sprintf("regions[%d].groups[%d]", i, j)
			g := Group{
				Name:            fg.Name,
				Zone:            fg.Zone,
				Instances:       count(path+".instances", fg.Instances),
				Healthy:         count(path+".healthy", fg.Healthy),
				RatePerInstance: number(path+".rate_per_instance", fg.RatePerInstance),
				CapacityScaler:  1,
			}
			if fg.CapacityScaler != nil {
				g.CapacityScaler = *fg.CapacityScaler
			}
			r.Groups = append(r.Groups, g)
		}
		s.Regions = append(s.Regions, r)
	}
	for i, fs := range f.Sites {
		s.Sites = append(s.Sites, Site{
			Name:      fs.Name,
			DemandRPS: number(fmt.Sprintf("sites[%d].demand_rps", i), fs.DemandRPS),
			RTTms:     fs.RTTms,
		})
	}
	if f.Timeline != nil {
		s.Timeline = f.Timeline.timeline(issues)
	}
	return s, issues
}

// maxCount bounds instance counts so they convert to int exactly.
const maxCount = 1 << 53

// Validate checks every invariant documented on Scenario's types and returns
// a *ScenarioError (without a file name) listing all violations, or nil. It
// lets code that builds a Scenario by hand check it like a parsed one.
func (s *Scenario) Validate() error {
	if p := s.problems(nil); len(p) > 0 {
		return &ScenarioError{Problems: p}
	}
	return nil
}

// problems lists every violated invariant in file order. issues holds
// problems found while decoding, keyed by field path; a field with an issue
// reports it instead of its range check.
func (s *Scenario) problems(issues map[string]string) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	hasIssue := func(path string) bool {
		msg, ok := issues[path]
		if ok {
			add("%s: %s", path, msg)
		}
		return ok
	}
	nonNegative := func(path string, v float64) {
		if hasIssue(path) {
			return
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			add("%s: must be a finite number >= 0, got %v", path, v)
		}
	}

	if len(s.Regions) == 0 {
		add("regions: must list at least one region")
	}
	regionAt := map[string]int{}
	groupAt := map[string]string{}
	var totalCapacity float64
	for i, r := range s.Regions {
		path := fmt.Sprintf("regions[%d]", i)
		switch prev, dup := regionAt[r.Name]; {
		case r.Name == "":
			add("%s.name: required", path)
		case dup:
			add("%s.name: duplicate region %q (also regions[%d])", path, r.Name, prev)
		default:
			regionAt[r.Name] = i
		}
		if len(r.Groups) == 0 {
			add("%s.groups: must list at least one group", path)
		}
		for j, g := range r.Groups {
			gpath := fmt.Sprintf("%s.groups[%d]", path, j)
			switch prev, dup := groupAt[g.Name]; {
			case g.Name == "":
				add("%s.name: required", gpath)
			case dup:
				add("%s.name: duplicate group %q (also %s)", gpath, g.Name, prev)
			default:
				groupAt[g.Name] = gpath
			}
			instancesOK := !hasIssue(gpath + ".instances")
			if instancesOK && g.Instances < 0 {
				add("%s.instances: must be >= 0, got %d", gpath, g.Instances)
				instancesOK = false
			}
			switch {
			case hasIssue(gpath + ".healthy"):
			case g.Healthy < 0:
				add("%s.healthy: must be >= 0, got %d", gpath, g.Healthy)
			case instancesOK && g.Healthy > g.Instances:
				add("%s.healthy: %d > instances %d", gpath, g.Healthy, g.Instances)
			}
			nonNegative(gpath+".rate_per_instance", g.RatePerInstance)
			if g.RatePerInstance > config.MaxRate {
				add("%s.rate_per_instance: must be at most %g (the gfe's config bound), got %v", gpath, float64(config.MaxRate), g.RatePerInstance)
			}
			if g.Instances > config.MaxInstances {
				add("%s.instances: must be at most %d (the gfe's config bound), got %d", gpath, config.MaxInstances, g.Instances)
			}
			if !(g.CapacityScaler >= 0 && g.CapacityScaler <= 1) { // also catches NaN
				add("%s.capacity_scaler: must be in [0,1], got %v", gpath, g.CapacityScaler)
			}
			c := g.Capacity()
			if math.IsInf(c, 0) {
				add("%s: capacity healthy × rate_per_instance × capacity_scaler overflows", gpath)
			} else if !math.IsNaN(c) && c > 0 {
				totalCapacity += c
			}
		}
	}
	if math.IsInf(totalCapacity, 0) {
		add("regions: total capacity overflows")
	}

	if len(s.Sites) == 0 {
		add("sites: must list at least one site")
	}
	siteAt := map[string]int{}
	var totalDemand float64
	for i, st := range s.Sites {
		path := fmt.Sprintf("sites[%d]", i)
		switch prev, dup := siteAt[st.Name]; {
		case st.Name == "":
			add("%s.name: required", path)
		case dup:
			add("%s.name: duplicate site %q (also sites[%d])", path, st.Name, prev)
		default:
			siteAt[st.Name] = i
		}
		nonNegative(path+".demand_rps", st.DemandRPS)
		if st.DemandRPS > 0 && !math.IsInf(st.DemandRPS, 0) {
			totalDemand += st.DemandRPS
		}
		if len(st.RTTms) == 0 {
			add("%s.rtt_ms: must name at least one region", path)
		}
		for _, region := range slices.Sorted(maps.Keys(st.RTTms)) {
			if _, ok := regionAt[region]; !ok {
				add("%s.rtt_ms: unknown region %q", path, region)
				continue
			}
			nonNegative(fmt.Sprintf("%s.rtt_ms.%s", path, region), st.RTTms[region])
		}
	}
	if math.IsInf(totalDemand, 0) {
		add("sites: total demand_rps overflows")
	}
	return append(out, s.timelineProblems(issues)...)
}

// ToWorld returns the planner's view of s: every group with its Capacity,
// every site with a copy of its RTT map. Region and site order is kept.
func (s *Scenario) ToWorld() waterfall.World {
	w := waterfall.World{
		Regions: make([]waterfall.Region, 0, len(s.Regions)),
		Sites:   make([]waterfall.Site, 0, len(s.Sites)),
	}
	for _, r := range s.Regions {
		wr := waterfall.Region{Name: r.Name, Groups: make([]waterfall.Group, 0, len(r.Groups))}
		for _, g := range r.Groups {
			wr.Groups = append(wr.Groups, waterfall.Group{
				Name:      g.Name,
				Zone:      g.Zone,
				Instances: g.Instances,
				Healthy:   g.Healthy,
				Capacity:  g.Capacity(),
			})
		}
		w.Regions = append(w.Regions, wr)
	}
	for _, st := range s.Sites {
		w.Sites = append(w.Sites, waterfall.Site{Name: st.Name, Demand: st.DemandRPS, RTT: maps.Clone(st.RTTms)})
	}
	return w
}
