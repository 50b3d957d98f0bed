package verdict

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"github.com/arbiterlab/arbiter/stats"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/arbiterlab/arbiter/internal/outfile"
)

type chartRef struct {
	kind, title, file string // file relative to the markdown
}

// chart is one figure: how to draw it on a canvas of the given height (the width is
// chartWidth).
type chart struct {
	height vg.Length
	draw   func(draw.Canvas)
}

const chartWidth = 18 * vg.Centimeter

// chartSuffixes end the names of the charts written beside a verdict's stem.
var chartSuffixes = []string{"-rates.svg", "-rounds.svg", "-wedges.svg", "-throughput.svg"}

// writeCharts writes the verdict's SVG charts beside stem through keep and returns their
// references.
func (v *Verdict) writeCharts(stem string, keep outfile.Guard) ([]chartRef, error) {
	var refs []chartRef
	for k, c := range []struct {
		kind, title string
		chart       *chart
	}{
		{"rates", "Corrupted sessions by arm, with 95% Wilson intervals", v.ratesChart()},
		{"rounds", "Corrupted sessions by round", v.roundsChart()},
		{"wedges", "Launches wedged by arm, with 95% Clopper-Pearson intervals over launches", v.wedgesChart()},
		{"throughput", "Engine throughput by phase, each arm's launches", v.throughputChart()},
	} {
		if c.chart == nil {
			continue
		}
		path := stem + chartSuffixes[k]
		if err := saveSVG(c.chart, path, keep); err != nil {
			return nil, err
		}
		refs = append(refs, chartRef{c.kind, c.title, filepath.Base(path)})
	}
	return refs, nil
}

func saveSVG(ch *chart, path string, keep outfile.Guard) error {
	c := vgsvg.New(chartWidth, ch.height)
	dc := draw.New(c)
	// A white ground: a chart viewed on a dark page stays readable.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	ch.draw(dc)
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// Text is laid out with Liberation Sans's metrics. A viewer without that font would
	// fall back to its default, often wider, face; Arial and Helvetica share Liberation
	// Sans's metrics, so they come next.
	svg := bytes.ReplaceAll(buf.Bytes(), []byte("font-family:Liberation Sans;"),
		[]byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"))
	return keep.Write(path, svg)
}

// sansFont is the face of every chart's text: sans serif reads better at small sizes.
func sansFont(size vg.Length) font.Font {
	return font.Font{Typeface: "Liberation", Variant: "Sans", Size: size}
}

// sans sets every text of a plot in sansFont.
func sans(p *plot.Plot) {
	p.Title.TextStyle.Font = sansFont(vg.Points(12))
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = sansFont(vg.Points(10))
		a.Tick.Label.Font = sansFont(vg.Points(9))
	}
}

// The Okabe-Ito palette, which readers with any common colour-vision deficiency can tell
// apart, ordered so that the first arms never meet as a red/green pair. The baseline is
// neutral grey: it is the reference, not a contender.
var (
	baselineColour = color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff}
	okabeIto       = []color.RGBA{
		{R: 0x00, G: 0x72, B: 0xB2, A: 0xff}, // blue
		{R: 0xE6, G: 0x9F, B: 0x00, A: 0xff}, // orange
		{R: 0xCC, G: 0x79, B: 0xA7, A: 0xff}, // reddish purple
		{R: 0x56, G: 0xB4, B: 0xE9, A: 0xff}, // sky blue
		{R: 0xD5, G: 0x5E, B: 0x00, A: 0xff}, // vermillion
		{R: 0x00, G: 0x00, B: 0x00, A: 0xff}, // black
		{R: 0x00, G: 0x9E, B: 0x73, A: 0xff}, // bluish green
		{R: 0xB8, G: 0xA8, B: 0x00, A: 0xff}, // yellow, darkened to show on white
	}
	glyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{},
		draw.CrossGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}, draw.PlusGlyph{}}
)

// armStyle gives arm i its colour and glyph, the same in every chart.
func (v *Verdict) armStyle(i int) (color.RGBA, draw.GlyphDrawer) {
	if i == v.Baseline {
		return baselineColour, draw.CircleGlyph{}
	}
	k := i
	if i > v.Baseline {
		k--
	}
	return okabeIto[k%len(okabeIto)], glyphs[(k+1)%len(glyphs)]
}

func textStyle(size vg.Length) text.Style {
	return text.Style{Color: color.Black, Font: sansFont(size), Handler: plot.DefaultTextHandler,
		XAlign: draw.XLeft, YAlign: draw.YBottom}
}

// percentTicks are tick marks at a round step giving five to eight labelled ticks, with a
// minor tick between each, labelled "0%", "5%", ...
type percentTicks struct{}

func (percentTicks) Ticks(min, max float64) []plot.Tick { return roundTicks(min, max, "%") }

// numberTicks marks an axis of plain quantities (tok/s) at round steps, labelled without
// decimals they do not need.
type numberTicks struct{}

func (numberTicks) Ticks(min, max float64) []plot.Tick { return roundTicks(min, max, "") }

// roundTicks are labelled ticks at niceStep from min to max, each label the value
// followed by unit, with an unlabelled minor tick between each two.
func roundTicks(min, max float64, unit string) []plot.Tick {
	step := niceStep(max - math.Max(min, 0)) // a sliver below zero is margin, not range
	var ts []plot.Tick
	for x := math.Ceil(min/step-1e-9) * step; x <= max+1e-9; x += step {
		// Adding 0 turns a -0 into 0: no "-0%" label.
		ts = append(ts, plot.Tick{Value: x, Label: fmt.Sprintf("%g%s", math.Round(x*100)/100+0, unit)})
		if m := x + step/2; m < max {
			ts = append(ts, plot.Tick{Value: m})
		}
	}
	return ts
}

// niceStep is the round step (1, 2, 2.5 or 5 times a power of ten) that cuts span into
// four to seven parts.
func niceStep(span float64) float64 {
	if span <= 0 {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(span/5)))
	for _, f := range []float64{1, 2, 2.5, 5, 10} {
		if span/(f*mag) <= 7 {
			return f * mag
		}
	}
	return 10 * mag
}

// niceMax rounds a chart's upper limit up to a whole step, at least 5%, at most 100%.
func niceMax(hi float64) float64 {
	hi = math.Max(hi, 5)
	step := niceStep(hi)
	return math.Min(100, math.Ceil(hi/step-1e-9)*step)
}

// armRow is one arm of the rates chart.
type armRow struct {
	name, note   string
	rate, lo, hi float64 // percent; NaN when nothing was analysed
	colour       color.RGBA
	inconclusive bool
	glyph        draw.GlyphDrawer
}

// armRows draws each arm as a bar of its corruption rate with its interval, and above it
// the arm's name with its counts, inside the plotting area, so that no name is clipped or
// runs into the ticks however long it is.
type armRows struct{ rows []armRow }

func (r armRows) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	n := len(r.rows)
	label := textStyle(vg.Points(10))
	for i, row := range r.rows {
		y := float64(n - 1 - i)
		yLo, yHi := trY(y-0.17), trY(y+0.13)
		x0 := trX(0)
		if !math.IsNaN(row.rate) {
			bar := vg.Path{}
			x1 := trX(row.rate)
			bar.Move(vg.Point{X: x0, Y: yLo})
			bar.Line(vg.Point{X: x1, Y: yLo})
			bar.Line(vg.Point{X: x1, Y: yHi})
			bar.Line(vg.Point{X: x0, Y: yHi})
			bar.Close()
			if row.inconclusive {
				// What survived a crash is not a rate: drawn hollow and dashed, never as
				// a solid bar.
				c.SetLineStyle(draw.LineStyle{Color: row.colour, Width: vg.Points(1.2), Dashes: []vg.Length{vg.Points(3), vg.Points(2)}})
				c.Stroke(bar)
			} else {
				c.SetColor(color.NRGBA{R: row.colour.R, G: row.colour.G, B: row.colour.B, A: 0xb0})
				c.Fill(bar)
			}
			ym := trY(y - 0.02)
			whisker := draw.LineStyle{Color: color.Black, Width: vg.Points(1)}
			c.StrokeLine2(whisker, trX(row.lo), ym, trX(row.hi), ym)
			for _, x := range []float64{row.lo, row.hi} {
				c.StrokeLine2(whisker, trX(x), ym-vg.Points(3), trX(x), ym+vg.Points(3))
			}
			if row.rate == 0 {
				// No bar to see: the arm's glyph marks the zero.
				c.DrawGlyph(draw.GlyphStyle{Color: row.colour, Radius: vg.Points(3.5), Shape: row.glyph}, vg.Point{X: x0, Y: ym})
			}
		}
		// One string, so that a viewer's substitute font, wider or narrower, can never
		// make the name and its counts overlap; and small enough to fit the width even
		// in a face 15% wider than the one measured.
		text := row.name + "  ·  " + row.note
		sty := label
		if w, room := 1.15*sty.Width(text), c.Max.X-x0; w > room {
			sty.Font.Size = max(vg.Points(6), sty.Font.Size*room/w)
		}
		c.FillText(sty, vg.Point{X: x0, Y: trY(y + 0.2)}, text)
	}
}

func (r armRows) DataRange() (xmin, xmax, ymin, ymax float64) {
	return -0.075, 5, -0.45, float64(len(r.rows)) - 0.2
}

// ratesChart is each arm's corruption rate as a bar with its 95% Wilson interval and its
// counts; an arm whose corruption is inconclusive is drawn hollow and says why.
func (v *Verdict) ratesChart() *chart {
	var rows []armRow
	hi := 0.0
	drawn := false
	for i, a := range v.Arms {
		col, g := v.armStyle(i)
		row := armRow{name: a.Name, colour: col, glyph: g, rate: math.NaN(), lo: math.NaN(), hi: math.NaN()}
		if i == v.Baseline {
			row.name += " (baseline)"
		}
		if a.Sessions > 0 {
			drawn = true
			row.rate, row.lo, row.hi = 100*a.Rate, 100*a.Wilson.Lo, 100*a.Wilson.Hi
			hi = math.Max(hi, row.hi)
			row.note = fmt.Sprintf("%d of %d corrupted (%s)", a.Corrupted, a.Sessions, pct(a.Rate))
		}
		switch {
		case len(a.Problems) > 0:
			row.inconclusive = true
			row.note = fmt.Sprintf("%s: %d of %d sessions finished, %d corrupted", a.failure(), a.Sessions, a.Planned, a.Corrupted)
			if a.CorruptedThenLost > 0 {
				row.note += fmt.Sprintf(" (%d more corrupted, then lost)", a.CorruptedThenLost)
			}
			row.note += " — inconclusive"
		case a.Lost > 0:
			row.note += fmt.Sprintf("; %d lost", a.Lost)
		}
		if a.Sessions == 0 && len(a.Problems) == 0 {
			row.note = "no analysed session"
		}
		rows = append(rows, row)
	}
	if !drawn {
		return nil
	}
	return barChart(rows, niceMax(hi*1.05), "Corrupted sessions by arm (95% Wilson intervals)", "sessions corrupted", percentTicks{})
}

// barChart draws rows as armRows under title, the x axis up to xMax and marked by ticks.
func barChart(rows []armRow, xMax float64, title, xLabel string, ticks plot.Ticker) *chart {
	p := plot.New()
	sans(p)
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.X.Max = xMax
	// A sliver left of zero keeps a zero rate's glyph whole.
	p.X.Min = -0.015 * p.X.Max
	p.X.Tick.Marker = ticks
	p.HideY()
	grid := plotter.NewGrid()
	grid.Horizontal.Color = nil
	grid.Vertical.Color = color.RGBA{R: 0xdd, G: 0xdd, B: 0xdd, A: 0xff}
	p.Add(grid, armRows{rows: rows})
	p.Y.Min, p.Y.Max = -0.45, float64(len(rows))-0.2
	height := vg.Length(2.4+1.25*float64(len(rows))) * vg.Centimeter
	return &chart{height: height, draw: func(c draw.Canvas) {
		// Room on the right for the last tick label ("100%").
		p.Draw(draw.Crop(c, vg.Points(8), -vg.Points(14), vg.Points(4), -vg.Points(4)))
	}}
}

// throughputChart is, for a workload of phases, each arm's engine throughput in each
// phase: the mean over its launches, with the slowest and the fastest launch as the
// whiskers, since the launch is the unit and launches of one configuration differ.
func (v *Verdict) throughputChart() *chart {
	o := v.Outcomes
	if o == nil || len(o.Groups) == 0 {
		return nil
	}
	var rows []armRow
	hi := 0.0
	for _, g := range o.Groups {
		for i, a := range v.Arms {
			if i >= len(g.engine) {
				continue
			}
			var xs []float64
			for _, x := range g.engine[i] {
				if !math.IsNaN(x) && !math.IsInf(x, 0) {
					xs = append(xs, x)
				}
			}
			if len(xs) == 0 {
				continue
			}
			col, glyph := v.armStyle(i)
			lo, top := xs[0], xs[0]
			for _, x := range xs {
				lo, top = math.Min(lo, x), math.Max(top, x)
			}
			row := armRow{name: g.Name + " · " + a.Name, colour: col, glyph: glyph, rate: stats.Mean(xs), lo: lo, hi: top}
			row.note = fmt.Sprintf("%s tok/s, %d launch%s", tps(row.rate), len(xs), pluralEs(len(xs)))
			if len(xs) > 1 {
				row.note += fmt.Sprintf(" from %s to %s", tps(lo), tps(top))
			}
			hi = math.Max(hi, top)
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 || !(hi > 0) {
		return nil
	}
	top := hi * 1.05
	step := niceStep(top)
	return barChart(rows, math.Ceil(top/step-1e-9)*step, "Engine throughput by phase (launches: mean, slowest, fastest)", "generated tokens per second", numberTicks{})
}

// wedgesChart is, for an abort-cascade experiment, each arm's share of launches that
// wedged, with its 95% Clopper-Pearson interval over launches (the launch is the unit),
// and how fast its engine served again after the aborts.
func (v *Verdict) wedgesChart() *chart {
	o := v.Outcomes
	if o == nil || len(o.Cascades) != len(v.Arms) {
		return nil
	}
	var rows []armRow
	hi := 0.0
	for i, c := range o.Cascades {
		if c.Launches == 0 {
			return nil
		}
		col, g := v.armStyle(i)
		iv := stats.ClopperPearson(c.Wedged, c.Launches, 0.95)
		row := armRow{name: c.Arm, colour: col, glyph: g,
			rate: 100 * float64(c.Wedged) / float64(c.Launches), lo: 100 * iv.Lo, hi: 100 * iv.Hi}
		if i == v.Baseline {
			row.name += " (baseline)"
		}
		row.note = fmt.Sprintf("%d of %d launches wedged", c.Wedged, c.Launches)
		if len(c.Recoveries) > 0 {
			row.note += fmt.Sprintf("; served again %s after the abort (median of %d of %d cascades)", ms(stats.Quantile(c.Recoveries, 0.5)), c.Recovered, c.Cascades)
		} else if c.Cascades > 0 {
			row.note += fmt.Sprintf("; served again after none of %d cascades", c.Cascades)
		}
		hi = math.Max(hi, row.hi)
		rows = append(rows, row)
	}
	return barChart(rows, niceMax(hi*1.05), "Launches wedged by arm (95% Clopper-Pearson intervals over launches)", "launches wedged", percentTicks{})
}

// roundsChart is the share of each arm's sessions corrupted in each round. Arms with the
// same values would hide one another, so each arm's points are shifted a little sideways
// and each has its own glyph; the legend sits below the plot, off the data, with each
// arm's n.
func (v *Verdict) roundsChart() *chart {
	if len(v.Rounds) < 2 {
		return nil
	}
	p := plot.New()
	sans(p)
	p.Title.Text = "Corrupted sessions by round"
	p.X.Label.Text = "round"
	p.Y.Label.Text = "sessions corrupted"
	p.Y.Tick.Marker = percentTicks{}
	leg := plot.NewLegend()
	leg.TextStyle.Font = sansFont(vg.Points(9))
	leg.Top, leg.Left = true, true
	m := len(v.Arms)
	top := 0.0
	lastRound := 0
	for i, a := range v.Arms {
		var xy plotter.XYs
		nMin, nMax := math.MaxInt, 0
		shift := 0.0
		if m > 1 {
			shift = (float64(i) - float64(m-1)/2) * math.Min(0.06, 0.3/float64(m-1))
		}
		for _, r := range v.Rounds {
			n := r.Sessions[i]
			if n == 0 {
				continue
			}
			y := 100 * float64(r.Corrupted[i]) / float64(n)
			xy = append(xy, plotter.XY{X: float64(r.Round) + shift, Y: y})
			top = math.Max(top, y)
			nMin, nMax = min(nMin, n), max(nMax, n)
			lastRound = max(lastRound, r.Round)
		}
		if len(xy) == 0 {
			continue
		}
		col, g := v.armStyle(i)
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil
		}
		line.Color, line.Width = col, vg.Points(1.5)
		if len(a.Problems) > 0 {
			// An arm without a decision is drawn dashed, as in the rates chart.
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		points.Shape, points.Color, points.Radius = g, col, vg.Points(3.5)
		p.Add(line, points)
		label := a.Name
		if i == v.Baseline {
			label += " (baseline)"
		}
		ns := fmt.Sprintf("n = %d", nMax)
		if nMin != nMax {
			ns = fmt.Sprintf("n = %d to %d", nMin, nMax)
		}
		extra := []string{ns}
		if len(a.Problems) > 0 {
			extra = append([]string{a.failure() + ": inconclusive"}, extra...)
		}
		leg.Add(fmt.Sprintf("%s (%s)", label, strings.Join(extra, ", ")), line, points)
	}
	p.Y.Min, p.Y.Max = 0, niceMax(top*1.1)
	// Rounds count from 0, as turns.round does in the database.
	p.X.Min, p.X.Max = -0.3, float64(lastRound)+0.3
	p.X.Tick.Marker = plot.TickerFunc(func(min, max float64) []plot.Tick {
		var t []plot.Tick
		for r := math.Ceil(min); r <= max; r++ {
			t = append(t, plot.Tick{Value: r, Label: fmt.Sprint(int(r))})
		}
		return t
	})
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	grid.Horizontal.Color = color.RGBA{R: 0xdd, G: 0xdd, B: 0xdd, A: 0xff}
	p.Add(grid)
	entry := leg.TextStyle.Rectangle("Xg").Size().Y + vg.Points(2)
	leg.Padding = vg.Points(2)
	legendHeight := vg.Length(m)*entry + vg.Points(12)
	plotHeight := 8 * vg.Centimeter
	return &chart{height: plotHeight + legendHeight, draw: func(c draw.Canvas) {
		p.Draw(draw.Crop(c, vg.Points(4), -vg.Points(14), legendHeight, -vg.Points(4)))
		strip := draw.Crop(c, vg.Points(40), 0, vg.Points(4), -(c.Max.Y - c.Min.Y - legendHeight))
		leg.Draw(strip)
	}}
}

// failure names in a word what made an arm's decision inconclusive.
func (a ArmResult) failure() string {
	for _, k := range faultKinds {
		if _, ok := a.faults[k.verb]; ok {
			return k.verb
		}
	}
	return "lost too many sessions"
}
