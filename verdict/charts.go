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
	if p := v.ratesChart(); p != nil {
		path := stem + "-rates.svg"
		if err := saveSVG(p, path); err != nil {
			return nil, err
		}
		refs = append(refs, chartRef{"rates", "Corrupted sessions by arm, with 95% Wilson intervals", filepath.Base(path)})
	}
	if p := v.roundsChart(); p != nil {
		path := stem + "-rounds.svg"
		if err := saveSVG(p, path); err != nil {
			return nil, err
		}
		refs = append(refs, chartRef{"rounds", "Corrupted sessions by round", filepath.Base(path)})
	}
	return refs, nil
}

func saveSVG(p *plot.Plot, path string) error {
	c := vgsvg.New(16*vg.Centimeter, 9*vg.Centimeter)
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

// errorPoints are the arms' rates with their intervals.
type errorPoints struct {
	plotter.XYs
	plotter.YErrors
}

func (v *Verdict) ratesChart() *plot.Plot {
	var pts errorPoints
	var names []string
	for i, a := range v.Arms {
		if a.Sessions == 0 {
			continue
		}
		pts.XYs = append(pts.XYs, plotter.XY{X: float64(i), Y: 100 * a.Rate})
		pts.YErrors = append(pts.YErrors, struct{ Low, High float64 }{100 * (a.Rate - a.Wilson.Lo), 100 * (a.Wilson.Hi - a.Rate)})
		names = append(names, a.Name)
	}
	if len(pts.XYs) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "Corrupted sessions by arm"
	p.Y.Label.Text = "sessions corrupted (%)"
	p.Y.Min = 0
	hi := 0.0
	for i := range pts.XYs {
		hi = math.Max(hi, pts.XYs[i].Y+pts.YErrors[i].High)
	}
	p.Y.Max = math.Max(5, hi*1.15)
	p.X.Min, p.X.Max = -0.5, float64(len(v.Arms))-0.5
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return nil
	}
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	sc.GlyphStyle.Radius = vg.Points(4)
	sc.GlyphStyle.Color = color.RGBA{R: 0x1f, G: 0x4e, B: 0x9a, A: 0xff}
	eb, err := plotter.NewYErrorBars(pts)
	if err != nil {
		return nil
	}
	eb.LineStyle.Width = vg.Points(1.2)
	p.Add(plotter.NewGrid(), eb, sc)
	var ticks []plot.Tick
	for i, a := range v.Arms {
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: a.Name})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	return p
}

func (v *Verdict) roundsChart() *plot.Plot {
	if len(v.Rounds) < 2 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "Corrupted sessions by round"
	p.X.Label.Text = "round"
	p.Y.Label.Text = "sessions corrupted in the round (%)"
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
	p.Legend.Top = true
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
