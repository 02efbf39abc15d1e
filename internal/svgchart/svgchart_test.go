package svgchart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// svgDoc is what the tests read back from an SVG document.
type svgDoc struct {
	root  string
	paths []string // the style attribute of every <path>
	texts []string // the content of every <text>, in document order
}

// parseSVG decodes data as XML, failing the test on malformed XML.
func parseSVG(t *testing.T, data []byte) svgDoc {
	t.Helper()
	var doc svgDoc
	dec := xml.NewDecoder(bytes.NewReader(data))
	var inText bool
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("malformed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if doc.root == "" {
				doc.root = el.Name.Local
			}
			switch el.Name.Local {
			case "path":
				style := ""
				for _, a := range el.Attr {
					if a.Name.Local == "style" {
						style = a.Value
					}
				}
				doc.paths = append(doc.paths, style)
			case "text":
				inText = true
				doc.texts = append(doc.texts, "")
			}
		case xml.CharData:
			if inText {
				doc.texts[len(doc.texts)-1] += string(el)
			}
		case xml.EndElement:
			if el.Name.Local == "text" {
				inText = false
			}
		}
	}
	return doc
}

// count returns how many of ss contain every one of subs.
func count(ss []string, subs ...string) int {
	n := 0
next:
	for _, s := range ss {
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				continue next
			}
		}
		n++
	}
	return n
}

// occurrences counts each text of want in texts.
func occurrences(texts []string, want []string) map[string]int {
	got := map[string]int{}
	for _, w := range want {
		got[w] = 0
	}
	for _, tx := range texts {
		if _, ok := got[tx]; ok {
			got[tx]++
		}
	}
	return got
}

func ramp(n int, from, step float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = from + float64(i)*step
	}
	return out
}

const (
	blue   = "#4E79A7" // Palette()[0]
	orange = "#F28E2B" // Palette()[1]
	green  = "#59A14F" // Palette()[2]
)

func TestWriteSVG(t *testing.T) {
	x := ramp(11, 0, 1) // 0..10
	tests := []struct {
		name string
		fig  Figure
		// wantStroked and wantFilled count <path>s stroked or filled in
		// each color: the series' shapes plus one legend swatch.
		wantStroked, wantFilled map[string]int
		wantDashed              int // stroked paths with a dash array, of the palette colors
		wantTexts               map[string]int
	}{
		{
			name: "lines in two panels with a reference line",
			fig: Figure{
				Title: "two panels",
				X:     Axis{Label: "time (s)"},
				Y:     Axis{Label: "utilization (%)", Max: 100},
				Panels: []Panel{
					{Title: "left", Series: []Series{{Name: "a", X: x, Y: ramp(11, 0, 10)}, {Name: "b", X: x, Y: ramp(11, 100, -10)}},
						RefLines: []RefLine{{Y: 100, Label: "capacity"}}},
					{Title: "right", Series: []Series{{Name: "a", X: x, Y: ramp(11, 50, 0)}, {Name: "b", X: x, Y: ramp(11, 20, 1)}}},
				},
			},
			wantStroked: map[string]int{blue: 3, orange: 3, green: 0},
			wantFilled:  map[string]int{blue: 0, orange: 0},
			wantTexts: map[string]int{
				"two panels": 1, "left": 1, "right": 1, "a": 1, "b": 1, "capacity": 1,
				// one row: both panels carry the x label, the first the y label
				"time (s)": 2, "utilization (%)": 1,
				// x 0..10 in steps of 2, y 0..100 in steps of 20, in both panels
				"0": 4, "2": 2, "4": 2, "6": 2, "8": 2, "10": 2, "20": 2, "100": 2,
			},
		},
		{
			name: "stacked area with a fixed range",
			fig: Figure{
				Title: "shares",
				X:     Axis{Label: "time (s)"},
				Y:     Axis{Label: "share (%)", Max: 100},
				Panels: []Panel{{Title: "waterfall", Kind: StackedArea, Series: []Series{
					{Name: "us-east", X: x, Y: ramp(11, 50, 0)},
					{Name: "eu-west", X: x, Y: ramp(11, 30, 0)},
					{Name: "asia-east", X: x, Y: ramp(11, 20, 0)},
				}}},
			},
			wantStroked: map[string]int{blue: 0, orange: 0, green: 0},
			wantFilled:  map[string]int{blue: 2, orange: 2, green: 2},
			wantTexts: map[string]int{
				"shares": 1, "waterfall": 1, "us-east": 1, "eu-west": 1, "asia-east": 1, "time (s)": 1, "share (%)": 1,
				"0": 2, "20": 1, "40": 1, "100": 1, "120": 0, // y stops at 100
			},
		},
		{
			name: "log x axis, dashed and bold lines sharing a color",
			fig: Figure{
				X: Axis{Label: "latency (ms)", Log: true},
				Y: Axis{Label: "requests (%)", Max: 100},
				Panels: []Panel{{Series: []Series{
					{Name: "waterfall", Bold: true, X: []float64{5, 20, 100}, Y: []float64{1, 50, 100}},
					{Name: "hash2/global", ColorKey: "hash2", X: []float64{10, 200, 2000}, Y: []float64{1, 50, 100}},
					{Name: "hash2/nearest_region", ColorKey: "hash2", Dashed: true, X: []float64{8, 90, 1500}, Y: []float64{1, 50, 100}},
				}}},
			},
			wantStroked: map[string]int{blue: 2, orange: 4, green: 0},
			wantDashed:  2,
			wantTexts: map[string]int{
				"latency (ms)": 1, "requests (%)": 1, "waterfall": 1, "hash2/global": 1, "hash2/nearest_region": 1,
				// x: 1, 2, 5 × 10^k from 5 to 2000; y: 0 to 100 in steps of 20
				"5": 1, "10": 1, "20": 2, "50": 1, "100": 2, "200": 1, "500": 1, "1000": 1, "2000": 1, "3": 0, "5000": 0,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.fig.WriteSVG(&buf); err != nil {
				t.Fatalf("WriteSVG: %v", err)
			}
			doc := parseSVG(t, buf.Bytes())
			if doc.root != "svg" {
				t.Errorf("root element %q, want svg", doc.root)
			}
			for c, want := range tt.wantStroked {
				if got := count(doc.paths, "stroke:"+c); got != want {
					t.Errorf("%d paths stroked %s, want %d", got, c, want)
				}
			}
			for c, want := range tt.wantFilled {
				if got := count(doc.paths, "fill:"+c); got != want {
					t.Errorf("%d paths filled %s, want %d", got, c, want)
				}
			}
			dashed := 0
			for _, c := range []string{blue, orange, green} {
				dashed += count(doc.paths, "stroke:"+c, "stroke-dasharray:")
			}
			if dashed != tt.wantDashed {
				t.Errorf("%d dashed series paths, want %d", dashed, tt.wantDashed)
			}
			want := tt.wantTexts
			got := occurrences(doc.texts, keys(want))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("text occurrences (-want +got):\n%s\nall texts: %q", diff, doc.texts)
			}
			if n := strings.Count(buf.String(), "font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"); n != len(doc.texts) {
				t.Errorf("%d texts name the font with fallbacks, want all %d", n, len(doc.texts))
			}
		})
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestLayout checks the figure's size and that legend rows wrap.
func TestLayout(t *testing.T) {
	series := func(names ...string) []Series {
		var out []Series
		for _, n := range names {
			out = append(out, Series{Name: n, X: []float64{0, 1}, Y: []float64{0, 1}})
		}
		return out
	}
	tests := []struct {
		name       string
		fig        Figure
		wantWidth  string
		legendRows int
	}{
		{name: "default three columns", fig: Figure{Panels: make([]Panel, 5)}, wantWidth: fmt.Sprintf("%gpt", 2*margin+3.0*DefaultPanelWidth), legendRows: 0},
		{name: "one column of one panel", fig: Figure{Panels: []Panel{{Series: series("a", "b")}}, PanelWidth: 300}, wantWidth: fmt.Sprintf("%gpt", 2*margin+300.0), legendRows: 1},
		{name: "legend wraps", fig: Figure{Panels: []Panel{{Series: series("series-number-one", "series-number-two", "series-number-three")}}, PanelWidth: 300}, wantWidth: fmt.Sprintf("%gpt", 2*margin+300.0), legendRows: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.fig.WriteSVG(&buf); err != nil {
				t.Fatalf("WriteSVG: %v", err)
			}
			parseSVG(t, buf.Bytes())
			if !strings.Contains(buf.String(), `<svg width="`+tt.wantWidth+`"`) {
				t.Errorf("svg width is not %s: %.200s", tt.wantWidth, buf.String())
			}
			_, entries := tt.fig.styles()
			if got := len(layoutLegend(entries, 300)); got != tt.legendRows {
				t.Errorf("%d legend rows, want %d", got, tt.legendRows)
			}
		})
	}
}

func TestWriteSVGErrors(t *testing.T) {
	pts := []float64{1, 2}
	tests := []struct {
		name    string
		fig     Figure
		wantErr string
	}{
		{name: "no panel", fig: Figure{}, wantErr: "figure has no panel"},
		{name: "negative columns", fig: Figure{Panels: make([]Panel, 1), Columns: -1}, wantErr: "must be ≥ 0"},
		{name: "infinite axis bound", fig: Figure{Panels: make([]Panel, 1), Y: Axis{Max: math.Inf(1)}}, wantErr: "y axis: bounds must be finite"},
		{name: "unknown kind", fig: Figure{Panels: []Panel{{Kind: 7}}}, wantErr: "panel 0: unknown kind 7"},
		{name: "length mismatch", fig: Figure{Panels: []Panel{{Series: []Series{{Name: "a", X: pts, Y: pts[:1]}}}}}, wantErr: "2 x values and 1 y values"},
		{name: "empty series", fig: Figure{Panels: []Panel{{Series: []Series{{Name: "a"}}}}}, wantErr: "0 x values and 0 y values"},
		{name: "NaN", fig: Figure{Panels: []Panel{{Series: []Series{{Name: "a", X: pts, Y: []float64{1, math.NaN()}}}}}}, wantErr: "point 1: (2, NaN) is not finite"},
		{name: "zero on log axis", fig: Figure{X: Axis{Log: true}, Panels: []Panel{{Series: []Series{{Name: "a", X: []float64{0, 1}, Y: pts}}}}}, wantErr: "not positive on a logarithmic axis"},
		{name: "reference line on log y at 0", fig: Figure{Y: Axis{Log: true}, Panels: []Panel{{RefLines: []RefLine{{Y: 0}}}}}, wantErr: "reference line 0"},
		{name: "negative stacked", fig: Figure{Panels: []Panel{{Kind: StackedArea, Series: []Series{{Name: "a", X: pts, Y: []float64{1, -1}}}}}}, wantErr: "y = -1 is negative in a stacked panel"},
		{name: "stacked x differ", fig: Figure{Panels: []Panel{{Kind: StackedArea, Series: []Series{{Name: "a", X: pts, Y: pts}, {Name: "b", X: []float64{1, 3}, Y: pts}}}}}, wantErr: "x = 3 differs from the first series'"},
		{name: "stacked lengths differ", fig: Figure{Panels: []Panel{{Kind: StackedArea, Series: []Series{{Name: "a", X: pts, Y: pts}, {Name: "b", X: pts[:1], Y: pts[:1]}}}}}, wantErr: "1 points, the first series has 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := tt.fig.WriteSVG(&buf)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("WriteSVG error = %v, want one containing %q", err, tt.wantErr)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes despite the error", buf.Len())
			}
		})
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteSVGWriterError(t *testing.T) {
	fig := Figure{Panels: make([]Panel, 1)}
	if err := fig.WriteSVG(failWriter{}); err == nil || !strings.Contains(err.Error(), "svgchart: write: disk full") {
		t.Errorf("WriteSVG error = %v, want the writer's", err)
	}
}

func TestTicks(t *testing.T) {
	labels := func(ts []plot.Tick) []string {
		var out []string
		for _, tk := range ts {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	tests := []struct {
		name   string
		log    bool
		lo, hi float64
		want   []string
	}{
		{name: "linear 0..89", lo: 0, hi: 89, want: []string{"0", "20", "40", "60", "80"}},
		{name: "linear 0..131", lo: 0, hi: 131.25, want: []string{"0", "20", "40", "60", "80", "100", "120"}},
		{name: "linear 0..100", lo: 0, hi: 100, want: []string{"0", "20", "40", "60", "80", "100"}},
		{name: "linear small", lo: 0.1, hi: 0.45, want: []string{"0.1", "0.15", "0.2", "0.25", "0.3", "0.35", "0.4", "0.45"}},
		{name: "linear negative", lo: -10, hi: 10, want: []string{"-10", "-5", "0", "5", "10"}},
		{name: "linear flat", lo: 3, hi: 3, want: []string{"3"}},
		{name: "log 4..2400", log: true, lo: 4, hi: 2400, want: []string{"5", "10", "20", "50", "100", "200", "500", "1000", "2000"}},
		{name: "log 0.3..3", log: true, lo: 0.3, hi: 3, want: []string{"0.5", "1", "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			if tt.log {
				got = labels(logTicks(tt.lo, tt.hi))
			} else {
				got = labels(linearTicks(tt.lo, tt.hi))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("tick labels (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDropCollinear(t *testing.T) {
	xy := func(pts ...float64) plotter.XYs {
		var out plotter.XYs
		for i := 0; i < len(pts); i += 2 {
			out = append(out, plotter.XY{X: pts[i], Y: pts[i+1]})
		}
		return out
	}
	tests := []struct {
		name string
		in   plotter.XYs
		want plotter.XYs
	}{
		{name: "two points", in: xy(0, 0, 1, 1), want: xy(0, 0, 1, 1)},
		{name: "flat run", in: xy(0, 5, 1, 5, 2, 5, 3, 5), want: xy(0, 5, 3, 5)},
		{name: "ramp then plateau", in: xy(0, 0, 1, 10, 2, 20, 3, 20, 4, 20, 5, 0), want: xy(0, 0, 2, 20, 4, 20, 5, 0)},
		{name: "a bump stays", in: xy(0, 50, 1, 50, 2, 60.0000001, 3, 50, 4, 50), want: xy(0, 50, 1, 50, 2, 60.0000001, 3, 50, 4, 50)},
		{name: "float noise on a plateau", in: xy(0, 52.63157894736842, 1, 52.631578947368425, 2, 52.63157894736842), want: xy(0, 52.63157894736842, 2, 52.63157894736842)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, dropCollinear(tt.in)); diff != "" {
				t.Errorf("dropCollinear (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGonumTicksFallShort pins why linearTicks and logTicks exist (see the
// package doc): gonum/plot's own tickers label too little of the ranges
// the benchmark charts use. If a gonum/plot upgrade makes this fail, check
// whether its tickers now do the job and delete ours.
func TestGonumTicksFallShort(t *testing.T) {
	visible := func(ts []plot.Tick, lo, hi float64) []string {
		var out []string
		for _, tk := range ts {
			if tk.Label != "" && tk.Value >= lo && tk.Value <= hi {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	tests := []struct {
		name   string
		ticker plot.Ticker
		lo, hi float64
		want   []string
	}{
		{"log 4..2400 ms", plot.LogTicks{Prec: -1}, 4, 2400, []string{"10", "100", "1000"}},
		{"log 0.3..3 ms", plot.LogTicks{Prec: -1}, 0.3, 3, []string{"1"}},
		{"linear 0..89 s", plot.DefaultTicks{}, 0, 89, []string{"0", "40", "80"}},
		{"utilization 0..1.26", plot.DefaultTicks{}, 0, 1.26, []string{"0.0", "0.4", "0.8", "1.2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := visible(tt.ticker.Ticks(tt.lo, tt.hi), tt.lo, tt.hi)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("gonum tick labels changed (-want +got):\n%s", diff)
			}
		})
	}
}
