package verdict

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

type chartRef struct {
	kind, title, file string // file relative to the markdown
}

// writeCharts writes the verdict's SVG charts beside stem and returns their references.
func (v *Verdict) writeCharts(stem string) ([]chartRef, error) {
	var refs []chartRef
	if p, height := v.ratesChart(); p != nil {
		path := stem + "-rates.svg"
		if err := saveSVG(p, path, height); err != nil {
			return nil, err
		}
		refs = append(refs, chartRef{"rates", "Corrupted sessions by arm, with 95% Wilson intervals", filepath.Base(path)})
	}
	if p := v.roundsChart(); p != nil {
		path := stem + "-rounds.svg"
		if err := saveSVG(p, path, 9*vg.Centimeter); err != nil {
			return nil, err
		}
		refs = append(refs, chartRef{"rounds", "Corrupted sessions by round", filepath.Base(path)})
	}
	return refs, nil
}

func saveSVG(p *plot.Plot, path string, height vg.Length) error {
	c := vgsvg.New(18*vg.Centimeter, height)
	p.Draw(draw.New(c))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// errorPoints are the arms' rates with their intervals, one row per arm: the arms go
// down the Y axis so that long factorial arm names stay readable.
type errorPoints struct {
	plotter.XYs
	plotter.XErrors
}

func (v *Verdict) ratesChart() (*plot.Plot, vg.Length) {
	var pts errorPoints
	n := len(v.Arms)
	for i, a := range v.Arms {
		if a.Sessions == 0 {
			continue
		}
		// The first arm at the top, as in the verdict's tables.
		pts.XYs = append(pts.XYs, plotter.XY{X: 100 * a.Rate, Y: float64(n - 1 - i)})
		pts.XErrors = append(pts.XErrors, struct{ Low, High float64 }{100 * (a.Rate - a.Wilson.Lo), 100 * (a.Wilson.Hi - a.Rate)})
	}
	if len(pts.XYs) == 0 {
		return nil, 0
	}
	p := plot.New()
	p.Title.Text = "Corrupted sessions by arm (95% Wilson intervals)"
	p.X.Label.Text = "sessions corrupted (%)"
	p.X.Min = 0
	hi := 0.0
	for i := range pts.XYs {
		hi = math.Max(hi, pts.XYs[i].X+pts.XErrors[i].High)
	}
	p.X.Max = math.Max(5, math.Min(100, hi*1.1))
	// A little room left of zero keeps a 0% point off the arm names.
	p.X.Min = -0.08 * p.X.Max
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, 0
	}
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	sc.GlyphStyle.Radius = vg.Points(4)
	sc.GlyphStyle.Color = color.RGBA{R: 0x1f, G: 0x4e, B: 0x9a, A: 0xff}
	eb, err := plotter.NewXErrorBars(pts)
	if err != nil {
		return nil, 0
	}
	eb.LineStyle.Width = vg.Points(1.2)
	p.Add(plotter.NewGrid(), eb, sc)
	var ticks []plot.Tick
	for i, a := range v.Arms {
		ticks = append(ticks, plot.Tick{Value: float64(n - 1 - i), Label: a.Name})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	return p, vg.Length(2.2+0.9*float64(n)) * vg.Centimeter
}

func (v *Verdict) roundsChart() *plot.Plot {
	if len(v.Rounds) < 2 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "Corrupted sessions by round"
	p.X.Label.Text = "round"
	p.Y.Label.Text = "corrupted (%)"
	p.Y.Min = 0
	var lines []any
	for i, a := range v.Arms {
		var xy plotter.XYs
		for _, r := range v.Rounds {
			if r.Sessions[i] > 0 {
				xy = append(xy, plotter.XY{X: float64(r.Round + 1), Y: 100 * float64(r.Corrupted[i]) / float64(r.Sessions[i])})
			}
		}
		if len(xy) > 0 {
			lines = append(lines, a.Name, xy)
		}
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil
	}
	// Headroom above the highest point keeps the legend off the lines.
	top := 0.0
	for _, r := range v.Rounds {
		for i := range v.Arms {
			if r.Sessions[i] > 0 {
				top = math.Max(top, 100*float64(r.Corrupted[i])/float64(r.Sessions[i]))
			}
		}
	}
	// Each legend entry takes about 8% of the plot's height at the top.
	p.Y.Max = math.Max(5, top*1.1) / math.Max(0.5, 1-0.09*float64(len(lines)/2))
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	p.X.Tick.Marker = plot.TickerFunc(func(min, max float64) []plot.Tick {
		var t []plot.Tick
		for r := math.Ceil(min); r <= max; r++ {
			t = append(t, plot.Tick{Value: r, Label: fmt.Sprint(int(r))})
		}
		return t
	})
	return p
}
