// Package svgchart draws small multiples of line and stacked-area charts as
// SVG: a figure is a title, one legend shared by every panel, and a grid of
// panels with the same axes. It lays the figure out and draws it with
// gonum.org/v1/plot's SVG canvas (vg/vgsvg), in Liberation Sans with Arial
// (metric-compatible) and sans-serif as fallbacks, so that a viewer without
// the font lays text out as it was measured.
//
// It is written for the benchmark charts of BENCHMARKS.md (cmd/benchchart)
// and does no I/O beyond writing to the io.Writer given to WriteSVG.
//
// # What gonum/plot draws and what is added here
//
// gonum/plot draws every panel: axes, ticks, grid, lines (plotter.Line),
// areas (plotter.Polygon), titles, and aligns the panels (plot.Align); the
// legend's swatches and labels are gonum Legends and Thumbnails, and the
// shared axis range is the union of gonum's data ranges. What it lacks, and
// this package adds, with the figure that needs it:
//
//   - A legend across the figure that wraps into rows: plot.Legend stacks
//     its entries in one column, which for the CDF figures' nine policies
//     would take nine lines; here they take two.
//   - Stacked areas (the shares figure): gonum stacks bars (BarChart.StackOn)
//     but not areas; each band is a Polygon from the running sum.
//   - Ticks at 1, 2 and 5 × 10^k (linearTicks, logTicks): on a latency
//     axis from 4 to 2400 ms plot.LogTicks labels only 10, 100 and 1000
//     (and 0.3–3 ms gets the single label 1); plot.DefaultTicks labels
//     0–89 as 0, 40, 80 and 0–1.26 as 0.0, 0.4, 0.8, 1.2, so a
//     utilization panel has no label at 1 (full).
//   - Dropping points that lie on a straight line (dropCollinear): vgsvg
//     writes every point, and the shares and utilization figures are long
//     plateaus; docs/bench/flash-crowd-shares.svg is 64 KB with it and 121
//     KB without (utilization 66 KB instead of 96 KB).
//   - Font fallbacks: vgsvg writes font-family:Liberation Sans and nothing
//     else, so a browser without that font falls back to its default
//     (often a serif) at other widths than those laid out.
//   - A labelled horizontal reference line (refLine, about 20 lines):
//     plotter.Function draws the line but neither labels it nor reports
//     its Y as a data range.
package svgchart

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Kind says how a Panel draws its series.
type Kind int

const (
	// Lines draws each series as a line.
	Lines Kind = iota
	// StackedArea stacks the series bottom-up in the order given and fills
	// the band each adds: the top of series i is the sum of series 0..i.
	// Every series of the panel must have the same X values, and Y ≥ 0.
	StackedArea
)

// Series is one named sequence of points.
type Series struct {
	// Name labels the series in the legend. Series with the same Name, in
	// one panel or in several, get one legend entry, so they should be
	// drawn alike (same ColorKey, Dashed and Bold).
	Name string
	// ColorKey picks the color: series with the same key share one color,
	// assigned from Palette in the order keys first appear in the figure.
	// Empty means Name.
	ColorKey string
	// X and Y are the coordinates, of equal length ≥ 1, finite; X > 0 on a
	// logarithmic axis, Y > 0 on a logarithmic Y axis.
	X, Y []float64
	// Dashed draws a line dashed (Lines only).
	Dashed bool
	// Bold draws a line thicker and beneath the panel's other lines (Lines
	// only), so that a line that coincides with it shows inside it.
	Bold bool
}

// RefLine is a horizontal reference line across a panel, drawn dashed in
// gray with its label below its right end.
type RefLine struct {
	Y     float64
	Label string
}

// Panel is one chart of a Figure.
type Panel struct {
	// Title is drawn above the panel; may be empty.
	Title    string
	Kind     Kind
	Series   []Series
	RefLines []RefLine
}

// Axis describes one axis, shared by every panel of a Figure.
type Axis struct {
	// Label is drawn along the axis (state the unit), on the bottom panel
	// of each column for X and the first panel of each row for Y.
	Label string
	// Log makes the axis logarithmic, with ticks at 1, 2 and 5 × 10^k.
	Log bool
	// Min and Max: the axis spans the smallest range that covers [Min,
	// Max] and every point and reference line of every panel (for a
	// stacked panel, the stacked tops). On a logarithmic axis a bound ≤ 0
	// is ignored. The zero values make a linear axis start at 0. On a
	// linear axis with Min < Max, data beyond a bound get 5% of the range
	// as headroom; a logarithmic axis gets 3% of its decades on each side.
	Min, Max float64
}

// Figure is a set of panels with shared axes and one legend.
type Figure struct {
	// Title is drawn at the top; may be empty.
	Title string
	X, Y  Axis
	// Panels are laid out in rows of Columns, left to right, top down.
	// At least one.
	Panels []Panel
	// Columns is the number of panels per row, ≥ 0; 0 means
	// min(len(Panels), 3).
	Columns int
	// PanelWidth and PanelHeight are each panel's size in points
	// (1/72 inch) including its title, ticks and labels, ≥ 0; 0 means
	// DefaultPanelWidth and DefaultPanelHeight.
	PanelWidth, PanelHeight float64
}

// Default panel size, in points.
const (
	DefaultPanelWidth  = 260
	DefaultPanelHeight = 180
)

// Palette holds the colors given to ColorKeys in order of first appearance
// (Tableau 10); keys past its end reuse it from the start.
func Palette() []color.Color {
	hex := []uint32{0x4e79a7, 0xf28e2b, 0x59a14f, 0xe15759, 0x76b7b2, 0xedc948, 0xb07aa1, 0xff9da7, 0x9c755f, 0xbab0ac}
	out := make([]color.Color, len(hex))
	for i, h := range hex {
		out[i] = color.RGBA{R: uint8(h >> 16), G: uint8(h >> 8), B: uint8(h), A: 0xff}
	}
	return out
}

// Layout constants, in points.
const (
	margin       = 8
	titleSize    = 13
	panelTitle   = 10
	labelSize    = 10
	tickSize     = 8.5
	legendSize   = 9.5
	swatchWidth  = 22
	legendSpace  = 14 // between legend entries
	legendLineH  = 15
	lineWidth    = 1.4
	boldWidth    = 2.6
	refLineWidth = 1
	headroom     = 0.05 // of the axis range, beyond data that pass Axis.Max or Min
)

var (
	sansFont   = font.Font{Typeface: "Liberation", Variant: "Sans"}
	gray       = color.Gray{Y: 0x55}
	lightGray  = color.Gray{Y: 0xe4}
	dashes     = []vg.Length{vg.Points(5), vg.Points(3)}
	refDashes  = []vg.Length{vg.Points(3), vg.Points(3)}
	familyFrom = []byte("font-family:Liberation Sans;")
	familyTo   = []byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")
)

// WriteSVG validates f and writes it to w as one SVG document.
//
// Errors: an invalid figure (no panel, a series without points or with
// X and Y of different lengths, a non-finite value, a value ≤ 0 on a
// logarithmic axis, a stacked panel whose series differ in X or have Y <
// 0, a negative size), or the writer's error, wrapped.
func (f *Figure) WriteSVG(w io.Writer) error {
	if err := f.validate(); err != nil {
		return fmt.Errorf("svgchart: %w", err)
	}
	svg, err := f.render()
	if err != nil {
		return fmt.Errorf("svgchart: %w", err)
	}
	if _, err := w.Write(svg); err != nil {
		return fmt.Errorf("svgchart: write: %w", err)
	}
	return nil
}

func (f *Figure) validate() error {
	if len(f.Panels) == 0 {
		return errors.New("figure has no panel")
	}
	if f.Columns < 0 || f.PanelWidth < 0 || f.PanelHeight < 0 || isBad(f.PanelWidth) || isBad(f.PanelHeight) {
		return fmt.Errorf("columns %d and panel size %g×%g must be ≥ 0 and finite", f.Columns, f.PanelWidth, f.PanelHeight)
	}
	for _, a := range []struct {
		name string
		ax   Axis
	}{{"x", f.X}, {"y", f.Y}} {
		if isBad(a.ax.Min) || isBad(a.ax.Max) {
			return fmt.Errorf("%s axis: bounds must be finite", a.name)
		}
	}
	for i, p := range f.Panels {
		if p.Kind != Lines && p.Kind != StackedArea {
			return fmt.Errorf("panel %d: unknown kind %d", i, p.Kind)
		}
		for j, s := range p.Series {
			if len(s.X) == 0 || len(s.X) != len(s.Y) {
				return fmt.Errorf("panel %d series %d (%s): %d x values and %d y values, want equal and ≥ 1", i, j, s.Name, len(s.X), len(s.Y))
			}
			if p.Kind == StackedArea && len(s.X) != len(p.Series[0].X) {
				return fmt.Errorf("panel %d series %d (%s): %d points, the first series has %d", i, j, s.Name, len(s.X), len(p.Series[0].X))
			}
			for k := range s.X {
				x, y := s.X[k], s.Y[k]
				switch {
				case isBad(x) || isBad(y):
					return fmt.Errorf("panel %d series %d (%s) point %d: (%g, %g) is not finite", i, j, s.Name, k, x, y)
				case f.X.Log && x <= 0, f.Y.Log && y <= 0:
					return fmt.Errorf("panel %d series %d (%s) point %d: (%g, %g) is not positive on a logarithmic axis", i, j, s.Name, k, x, y)
				case p.Kind == StackedArea && y < 0:
					return fmt.Errorf("panel %d series %d (%s) point %d: y = %g is negative in a stacked panel", i, j, s.Name, k, y)
				case p.Kind == StackedArea && x != p.Series[0].X[k]:
					return fmt.Errorf("panel %d series %d (%s) point %d: x = %g differs from the first series' in a stacked panel", i, j, s.Name, k, x)
				}
			}
		}
		for j, r := range p.RefLines {
			if isBad(r.Y) || (f.Y.Log && r.Y <= 0) {
				return fmt.Errorf("panel %d reference line %d: y = %g is not finite or not positive on a logarithmic axis", i, j, r.Y)
			}
		}
	}
	return nil
}

func isBad(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }

// legendEntry is one entry of the shared legend: its name and the
// thumbnail gonum/plot draws for its series (plotter.Line or
// plotter.Polygon, styled as in the panels).
type legendEntry struct {
	name  string
	thumb plot.Thumbnailer
}

// styles assigns colors to keys and collects the legend entries, both in
// order of first appearance.
func (f *Figure) styles() (colors map[string]color.Color, entries []legendEntry) {
	pal := Palette()
	colors = map[string]color.Color{}
	seen := map[string]bool{}
	for _, p := range f.Panels {
		for _, s := range p.Series {
			key := s.colorKey()
			if _, ok := colors[key]; !ok {
				colors[key] = pal[len(colors)%len(pal)]
			}
			if !seen[s.Name] {
				seen[s.Name] = true
				var thumb plot.Thumbnailer = &plotter.Line{LineStyle: lineStyle(colors[key], s.Dashed, s.Bold)}
				if p.Kind == StackedArea {
					thumb = &plotter.Polygon{Color: colors[key]}
				}
				entries = append(entries, legendEntry{name: s.Name, thumb: thumb})
			}
		}
	}
	return colors, entries
}

func (s Series) colorKey() string {
	if s.ColorKey != "" {
		return s.ColorKey
	}
	return s.Name
}

// ranges returns the range of both axes shared by plots: the union of the
// data ranges gonum/plot gathered as each plot's plotters were added (the
// stacked tops of an area panel are its polygons' tops; reference lines
// report their Y), widened to the Figure's Axis bounds.
func (f *Figure) ranges(plots []*plot.Plot) (xmin, xmax, ymin, ymax float64) {
	xmin, xmax, ymin, ymax = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	widen := func(lo, hi *float64, v float64) {
		*lo, *hi = math.Min(*lo, v), math.Max(*hi, v)
	}
	for _, pl := range plots {
		xmin, xmax = math.Min(xmin, pl.X.Min), math.Max(xmax, pl.X.Max)
		ymin, ymax = math.Min(ymin, pl.Y.Min), math.Max(ymax, pl.Y.Max)
	}
	for _, b := range []struct {
		ax     Axis
		lo, hi *float64
	}{{f.X, &xmin, &xmax}, {f.Y, &ymin, &ymax}} {
		dlo, dhi := *b.lo, *b.hi
		for _, v := range []float64{b.ax.Min, b.ax.Max} {
			if !b.ax.Log || v > 0 {
				widen(b.lo, b.hi, v)
			}
		}
		if !b.ax.Log && b.ax.Min < b.ax.Max && dhi > b.ax.Max {
			// the data pass the given Max: leave them headroom
			*b.hi += headroom * (*b.hi - *b.lo)
		}
		if !b.ax.Log && b.ax.Min < b.ax.Max && dlo < b.ax.Min {
			*b.lo -= headroom * (*b.hi - *b.lo)
		}
		if b.ax.Log && !math.IsInf(*b.lo, 0) && *b.lo < *b.hi {
			// leave the data a margin of 3% of the decades spanned
			pad := math.Pow(*b.hi / *b.lo, 0.03)
			*b.lo, *b.hi = *b.lo/pad, *b.hi*pad
		}
		if math.IsInf(*b.lo, 0) { // a logarithmic axis with no data
			*b.lo, *b.hi = 1, 10
		}
		if *b.lo == *b.hi {
			if b.ax.Log {
				*b.lo, *b.hi = *b.lo/2, *b.hi*2
			} else {
				*b.lo, *b.hi = *b.lo-1, *b.hi+1
			}
		}
	}
	return xmin, xmax, ymin, ymax
}

func (f *Figure) render() ([]byte, error) {
	n := len(f.Panels)
	cols := f.Columns
	if cols == 0 {
		cols = min(n, 3)
	}
	cols = min(cols, n)
	rows := (n + cols - 1) / cols
	pw, ph := f.PanelWidth, f.PanelHeight
	if pw == 0 {
		pw = DefaultPanelWidth
	}
	if ph == 0 {
		ph = DefaultPanelHeight
	}
	colors, entries := f.styles()

	width := vg.Points(2*margin + float64(cols)*pw)
	title := textStyle(titleSize, draw.XCenter, draw.YTop)
	titleH := vg.Length(0)
	if f.Title != "" {
		titleH = title.Height(f.Title) + vg.Points(6)
	}
	legendRows := layoutLegend(entries, width-2*vg.Points(margin))
	legendH := vg.Points(float64(len(legendRows))*legendLineH + 4)
	height := vg.Points(2*margin+float64(rows)*ph) + titleH + legendH

	c := vgsvg.New(width, height)
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	top := dc.Max.Y - vg.Points(margin)
	if f.Title != "" {
		dc.FillText(title, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: top}, f.Title)
		top -= titleH
	}
	drawLegend(dc, legendRows, top)
	top -= legendH

	plots := make([]*plot.Plot, n)
	for i, p := range f.Panels {
		pl, err := f.panelPlot(p, colors, i+cols >= n, i%cols == 0)
		if err != nil {
			return nil, fmt.Errorf("panel %d: %w", i, err)
		}
		plots[i] = pl
	}
	xmin, xmax, ymin, ymax := f.ranges(plots)
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
	}
	for i, pl := range plots {
		pl.X.Min, pl.X.Max, pl.Y.Min, pl.Y.Max = xmin, xmax, ymin, ymax
		grid[i/cols][i%cols] = pl
	}
	area := draw.Crop(dc, vg.Points(margin), -vg.Points(margin), vg.Points(margin), top-dc.Max.Y)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(14), PadY: vg.Points(8), PadTop: vg.Points(2)}
	canvases := plot.Align(grid, tiles, area)
	for r := range grid {
		for col, pl := range grid[r] {
			if pl != nil {
				pl.Draw(canvases[r][col])
			}
		}
	}

	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	return bytes.ReplaceAll(buf.Bytes(), familyFrom, familyTo), nil
}

// panelPlot builds the plot of one panel; xLabel and yLabel say whether it
// carries the axis labels.
func (f *Figure) panelPlot(p Panel, colors map[string]color.Color, xLabel, yLabel bool) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.Title.TextStyle = textStyle(panelTitle, draw.XCenter, draw.YTop)
	pl.Title.Padding = vg.Points(3)
	for _, ax := range []struct {
		a     *plot.Axis
		spec  Axis
		label bool
	}{{&pl.X, f.X, xLabel}, {&pl.Y, f.Y, yLabel}} {
		ax.a.Padding = 0
		ax.a.Tick.Length = vg.Points(4)
		ax.a.Tick.Label.Font = font.From(sansFont, tickSize)
		ax.a.Label.TextStyle.Font = font.From(sansFont, labelSize)
		ax.a.Label.Padding = vg.Points(3)
		if ax.label {
			ax.a.Label.Text = ax.spec.Label
		}
		ax.a.Tick.Marker = plot.TickerFunc(linearTicks)
		if ax.spec.Log {
			ax.a.Scale = plot.LogScale{}
			ax.a.Tick.Marker = plot.TickerFunc(logTicks)
		}
	}
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = lightGray, lightGray
	pl.Add(g)

	simplify := func(xy plotter.XYs) plotter.XYs { return xy }
	if !f.X.Log && !f.Y.Log {
		simplify = dropCollinear
	}
	switch p.Kind {
	case StackedArea:
		lower := make([]float64, len(p.Series[0].X))
		for _, s := range p.Series {
			upper := make(plotter.XYs, len(s.X))
			bottom := make(plotter.XYs, len(s.X))
			for k := range s.X {
				upper[k] = plotter.XY{X: s.X[k], Y: lower[k] + s.Y[k]}
				bottom[len(s.X)-1-k] = plotter.XY{X: s.X[k], Y: lower[k]}
				lower[k] += s.Y[k]
			}
			ring := append(simplify(upper), simplify(bottom)...)
			poly, err := plotter.NewPolygon(ring)
			if err != nil {
				return nil, fmt.Errorf("series %s: %w", s.Name, err)
			}
			poly.Color = colors[s.colorKey()]
			poly.LineStyle.Width = 0
			pl.Add(poly)
		}
	default:
		for _, bold := range []bool{true, false} { // bold lines beneath
			for _, s := range p.Series {
				if s.Bold != bold {
					continue
				}
				xy := make(plotter.XYs, len(s.X))
				for k := range s.X {
					xy[k] = plotter.XY{X: s.X[k], Y: s.Y[k]}
				}
				line, err := plotter.NewLine(simplify(xy))
				if err != nil {
					return nil, fmt.Errorf("series %s: %w", s.Name, err)
				}
				line.LineStyle = lineStyle(colors[s.colorKey()], s.Dashed, s.Bold)
				pl.Add(line)
			}
		}
	}
	for _, r := range p.RefLines {
		pl.Add(refLine(r))
	}
	return pl, nil
}

// dropCollinear returns xy without the points that lie on the straight
// line between their neighbours (to a relative 1e-9), which on linear axes
// changes nothing drawn but the size of the SVG.
func dropCollinear(xy plotter.XYs) plotter.XYs {
	if len(xy) < 3 {
		return xy
	}
	out := plotter.XYs{xy[0]}
	for k := 1; k < len(xy)-1; k++ {
		a, b, c := out[len(out)-1], xy[k], xy[k+1]
		cross := (b.X-a.X)*(c.Y-a.Y) - (b.Y-a.Y)*(c.X-a.X)
		scale := (math.Abs(c.X-a.X) + 1) * (math.Abs(a.Y) + math.Abs(b.Y) + math.Abs(c.Y) + 1)
		if math.Abs(cross) > 1e-9*scale {
			out = append(out, b)
		}
	}
	return append(out, xy[len(xy)-1])
}

func textStyle(size float64, xa draw.XAlignment, ya draw.YAlignment) text.Style {
	return text.Style{
		Color:   color.Black,
		Font:    font.From(sansFont, vg.Points(size)),
		XAlign:  xa,
		YAlign:  ya,
		Handler: plot.DefaultTextHandler,
	}
}

func lineStyle(c color.Color, dashed, bold bool) draw.LineStyle {
	ls := draw.LineStyle{Color: c, Width: vg.Points(lineWidth)}
	if bold {
		ls.Width = vg.Points(boldWidth)
	}
	if dashed {
		ls.Dashes = dashes
	}
	return ls
}

// refLine is a plot.Plotter for a RefLine.
type refLine RefLine

// DataRange reports the line's Y and no X range (plot.DataRanger), so that
// the Y axis covers it.
func (r refLine) DataRange() (xmin, xmax, ymin, ymax float64) {
	return math.Inf(1), math.Inf(-1), r.Y, r.Y
}

func (r refLine) Plot(c draw.Canvas, pl *plot.Plot) {
	_, trY := pl.Transforms(&c)
	y := trY(r.Y)
	c.StrokeLine2(draw.LineStyle{Color: gray, Width: vg.Points(refLineWidth), Dashes: refDashes}, c.Min.X, y, c.Max.X, y)
	if r.Label != "" {
		st := textStyle(tickSize, draw.XRight, draw.YTop)
		st.Color = gray
		c.FillText(st, vg.Point{X: c.Max.X - vg.Points(3), Y: y - vg.Points(2)}, r.Label)
	}
}

// linearTicks labels multiples of a step of 1, 2 or 5 × 10^k, the smallest
// that gives at most 8 labels in [lo, hi], with a minor tick halfway
// between labels.
func linearTicks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', 6, 64)}}
	}
	mag := math.Pow(10, math.Floor(math.Log10((hi-lo)/7)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if (hi-lo)/(m*mag) <= 7 {
			step = m * mag
			break
		}
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo/step*2 - 1e-9); i/2*step <= hi+1e-9*step; i++ {
		v := i / 2 * step
		t := plot.Tick{Value: v}
		if math.Mod(i, 2) == 0 {
			if math.Abs(v) < 1e-9*step {
				v = 0 // no "-0" or 1e-17
			}
			t.Label = strconv.FormatFloat(v, 'g', 6, 64)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// logTicks labels 1, 2 and 5 × 10^k in [lo, hi] and marks the other
// integer multiples of 10^k as minor ticks.
func logTicks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		base := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * base
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// layoutLegend splits the entries into rows that fit in width.
// gonum/plot's Legend stacks its entries in one column (a line per
// series); the figure's legend runs across the page and wraps, so the
// rows are laid out here and each entry is drawn by a one-entry Legend.
func layoutLegend(entries []legendEntry, width vg.Length) [][]legendEntry {
	var rows [][]legendEntry
	var cur []legendEntry
	var used vg.Length
	for _, e := range entries {
		w := entryWidth(e)
		if len(cur) > 0 && used+vg.Points(legendSpace)+w > width {
			rows = append(rows, cur)
			cur, used = nil, 0
		}
		if len(cur) > 0 {
			used += vg.Points(legendSpace)
		}
		cur = append(cur, e)
		used += w
	}
	if len(cur) > 0 {
		rows = append(rows, cur)
	}
	return rows
}

// legend returns the one-entry gonum Legend that draws e.
func (e legendEntry) legend() plot.Legend {
	l := plot.NewLegend()
	l.TextStyle = textStyle(legendSize, draw.XLeft, draw.YBottom)
	l.ThumbnailWidth = vg.Points(swatchWidth)
	l.Left, l.Top = true, true
	l.YPosition = draw.PosCenter
	l.Add(e.name, e.thumb)
	return l
}

// entryWidth is the width Legend.Draw gives e: thumbnail, a space, text.
func entryWidth(e legendEntry) vg.Length {
	st := textStyle(legendSize, draw.XLeft, draw.YBottom)
	return vg.Points(swatchWidth) + st.Rectangle(" ").Max.X + st.Width(e.name)
}

// drawLegend draws the rows centred, the first one's middle legendLineH/2
// below top.
func drawLegend(dc draw.Canvas, rows [][]legendEntry, top vg.Length) {
	// Legend.Draw puts a Top entry's thumbnail (as high as the text) at
	// the top of its canvas, one descent below the canvas' top.
	st := textStyle(legendSize, draw.XLeft, draw.YBottom)
	h, descent := st.Height("Xg"), st.FontExtents().Descent
	for i, row := range rows {
		var w vg.Length
		for j, e := range row {
			if j > 0 {
				w += vg.Points(legendSpace)
			}
			w += entryWidth(e)
		}
		x := (dc.Min.X+dc.Max.X)/2 - w/2
		y := top - vg.Points(legendLineH*(float64(i)+0.5))
		for _, e := range row {
			cell := draw.Crop(dc, 0, 0, 0, 0)
			cell.Rectangle = vg.Rectangle{Min: vg.Point{X: x, Y: y - h/2}, Max: vg.Point{X: x + entryWidth(e), Y: y + h/2 + descent}}
			l := e.legend()
			l.Draw(cell)
			x += entryWidth(e) + vg.Points(legendSpace)
		}
	}
}
