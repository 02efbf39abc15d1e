package main

import (
	"errors"
	"fmt"
	"math"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/svgchart"
	"github.com/spillway-lb/spillway/sim/policybench"
)

// errNoSeries is returned when a time-series chart is asked of a result
// without series (policybench.Options.Series unset).
var errNoSeries = errors.New("bench result has no region series")

// timeAxis is the x axis of the time-series charts: the run, from 0 to the
// start of its last step.
func timeAxis(res *policybench.Result) svgchart.Axis {
	return svgchart.Axis{Label: "simulated time (s)", Max: float64(res.Steps-1) * res.StepS}
}

// sharesFigure draws one stacked-area panel per policy: each region's share
// of all requests routed in each step, in percent.
func sharesFigure(res *policybench.Result) (*svgchart.Figure, error) {
	fig := &svgchart.Figure{
		Title: fmt.Sprintf("%s: share of all routed requests per region, by policy", res.Scenario),
		X:     timeAxis(res),
		Y:     svgchart.Axis{Label: "share of requests (%)", Max: 100},
	}
	for _, row := range res.Policies {
		if len(row.Series) == 0 {
			return nil, fmt.Errorf("%s: %w", row.ID(), errNoSeries)
		}
		p := svgchart.Panel{Title: row.ID(), Kind: svgchart.StackedArea}
		for ri, region := range res.Regions {
			s := svgchart.Series{Name: region}
			for _, st := range row.Series {
				s.X = append(s.X, st.TS)
				s.Y = append(s.Y, 100*st.Shares[ri])
			}
			p.Series = append(p.Series, s)
		}
		fig.Panels = append(fig.Panels, p)
	}
	return fig, nil
}

// utilizationFigure draws one panel per policy: each region's load over its
// capacity in each step, in percent, with the 100% line. Steps in which a
// region has no capacity are left out of its line (utilization is
// undefined there); a region that never has capacity has no line.
func utilizationFigure(res *policybench.Result) (*svgchart.Figure, error) {
	fig := &svgchart.Figure{
		Title: fmt.Sprintf("%s: region load / capacity, by policy", res.Scenario),
		X:     timeAxis(res),
		Y:     svgchart.Axis{Label: "utilization (%)", Max: 100},
	}
	for _, row := range res.Policies {
		if len(row.Series) == 0 {
			return nil, fmt.Errorf("%s: %w", row.ID(), errNoSeries)
		}
		p := svgchart.Panel{Title: row.ID(), RefLines: []svgchart.RefLine{{Y: 100, Label: "capacity"}}}
		for ri, region := range res.Regions {
			s := svgchart.Series{Name: region}
			for _, st := range row.Series {
				if st.CapacityRPS[ri] > 0 {
					s.X = append(s.X, st.TS)
					s.Y = append(s.Y, 100*st.LoadRPS[ri]/st.CapacityRPS[ri])
				}
			}
			if len(s.X) > 0 {
				p.Series = append(p.Series, s)
			}
		}
		fig.Panels = append(fig.Panels, p)
	}
	return fig, nil
}

// errBadCDF is returned for a policybench.Row.CDF that is not a distribution or
// contradicts the row's own P50Ms and P99Ms: charting it would publish
// wrong numbers.
var errBadCDF = errors.New("latency CDF inconsistent")

// checkCDF checks that row.CDF rises with P and agrees with P50Ms and
// P99Ms at P = 0.5 and 0.99 (to 1e-6 ms), when it has those points.
func checkCDF(row policybench.Row) error {
	for i, pt := range row.CDF {
		if i > 0 && (pt.P <= row.CDF[i-1].P || pt.Ms < row.CDF[i-1].Ms) {
			return fmt.Errorf("%s: %w: point %d (p %g, %g ms) after (p %g, %g ms)", row.ID(), errBadCDF, i, pt.P, pt.Ms, row.CDF[i-1].P, row.CDF[i-1].Ms)
		}
		for _, q := range []struct {
			p    float64
			ms   float64
			name string
		}{{0.5, row.P50Ms, "P50Ms"}, {0.99, row.P99Ms, "P99Ms"}} {
			if pt.P == q.p && math.Abs(pt.Ms-q.ms) > 1e-6 {
				return fmt.Errorf("%s: %w: %g ms at p %g, but %s = %g ms", row.ID(), errBadCDF, pt.Ms, pt.P, q.name, q.ms)
			}
		}
	}
	return nil
}

// cdfFigure draws the latency distribution of served requests of every
// policy in one panel, on a logarithmic axis: color by policy name, dashed
// for scope nearest_region, waterfall bold and on top. A policy that served
// nothing has no line. A CDF that fails checkCDF is an error.
func cdfFigure(res *policybench.Result) (*svgchart.Figure, error) {
	p := svgchart.Panel{}
	for _, row := range res.Policies {
		if err := checkCDF(row); err != nil {
			return nil, err
		}
		s := svgchart.Series{
			Name:     row.ID(),
			ColorKey: row.Policy,
			Dashed:   row.Scope == config.HashScopeNearestRegion,
			Bold:     row.Policy == string(config.PolicyWaterfall),
		}
		for _, pt := range row.CDF {
			if pt.Ms > 0 {
				s.X = append(s.X, pt.Ms)
				s.Y = append(s.Y, 100*pt.P)
			}
		}
		if len(s.X) > 0 {
			p.Series = append(p.Series, s)
		}
	}
	if len(p.Series) == 0 {
		return nil, errors.New("no policy served a request")
	}
	return &svgchart.Figure{
		Title:       fmt.Sprintf("%s: latency of served requests (CDF), by policy", res.Scenario),
		X:           svgchart.Axis{Label: "latency (ms, log scale)", Log: true},
		Y:           svgchart.Axis{Label: "requests at or below (%)", Max: 100},
		Panels:      []svgchart.Panel{p},
		PanelWidth:  640,
		PanelHeight: 380,
	}, nil
}
