package sim

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/allot-dev/allot/shares"
)

var (
	regionColours = []color.RGBA{
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	}
	modeColours = map[shares.Mode]color.RGBA{
		shares.ModeRebalanced: {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		shares.ModeStatic:     {R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
		shares.ModeFull:       {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		shares.ModePinned:     {R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	black = color.RGBA{A: 0xff}
)

// Plot formats.
const (
	PNG = "png"
	SVG = "svg"
)

// WritePlot draws one scenario's runs (one per mode, same seed; the first is
// drawn in detail) and writes it to w as PNG or SVG. The upper panel is the
// world's admitted rate of each mode against R and the central limiter; the
// lower one is what each region enforces in the first mode against its ideal
// share d_i·min(1, R/D) (3-s centred mean).
func WritePlot(w io.Writer, format string, spec *Spec, runs []*Result) error {
	if len(runs) == 0 {
		return fmt.Errorf("plot %s: no runs", spec.Name)
	}
	top, err := worldPlot(spec, runs)
	if err != nil {
		return err
	}
	bottom, err := regionPlot(runs[0])
	if err != nil {
		return err
	}
	const width, height = 11 * vg.Inch, 8 * vg.Inch
	var (
		dc  draw.Canvas
		out io.WriterTo
	)
	switch format {
	case PNG:
		c := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(110), vgimg.UseBackgroundColor(color.White))
		dc, out = draw.New(c), vgimg.PngCanvas{Canvas: c}
	case SVG:
		c := vgsvg.New(width, height)
		dc, out = draw.New(c), c
	default:
		return fmt.Errorf("plot format %q: want png or svg", format)
	}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10), PadY: vg.Points(14)}
	plots := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(plots, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	if _, err := out.WriteTo(w); err != nil {
		return fmt.Errorf("plot %s: %w", spec.Name, err)
	}
	return nil
}

func newPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "simulated time (s)"
	p.Y.Label.Text = ylabel
	p.X.Min = 0
	p.Y.Min = 0
	p.X.Tick.Marker = timeTicks{}
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	return p
}

func line(p *plot.Plot, name string, xys plotter.XYs, c color.Color, width vg.Length, dashes ...vg.Length) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("plot line %s: %w", name, err)
	}
	l.Color = c
	l.Width = width
	l.Dashes = dashes
	p.Add(l)
	if name != "" {
		p.Legend.Add(name, l)
	}
	return nil
}

func worldPlot(spec *Spec, runs []*Result) (*plot.Plot, error) {
	first := runs[0]
	p := newPlot(fmt.Sprintf("%s — %s (seed %d)", spec.Name, spec.Description, first.Seed),
		"world admitted (units/s)")
	n := len(first.Series)
	rline := plotter.XYs{{X: 0, Y: first.Rate}, {X: first.Duration.Seconds(), Y: first.Rate}}
	if err := line(p, fmt.Sprintf("R = %g/s", first.Rate), rline, black, vg.Points(1), vg.Points(4), vg.Points(3)); err != nil {
		return nil, err
	}
	ideal := make(plotter.XYs, n)
	for k, s := range first.Series {
		ideal[k] = plotter.XY{X: s.At.Seconds(), Y: s.Ideal}
	}
	if err := line(p, "one central limiter", ideal, color.RGBA{R: 0x40, G: 0x40, B: 0x40, A: 0xff}, vg.Points(1), vg.Points(1), vg.Points(2)); err != nil {
		return nil, err
	}
	for _, r := range runs {
		xys := make(plotter.XYs, len(r.Series))
		for k, s := range r.Series {
			xys[k] = plotter.XY{X: s.At.Seconds(), Y: s.Admitted}
		}
		c, ok := modeColours[r.Mode]
		if !ok {
			c = black
		}
		if err := line(p, string(r.Mode), xys, c, vg.Points(1.5)); err != nil {
			return nil, err
		}
	}
	p.Y.Max = first.Rate * 1.9
	if spec.Duration > 0 {
		p.X.Max = spec.Duration.Seconds()
	}
	return p, nil
}

func regionPlot(r *Result) (*plot.Plot, error) {
	p := newPlot(fmt.Sprintf("%s: each region's enforced grant (solid) vs ideal share R·d_i/D (dashed)", r.Mode),
		"rate (units/s)")
	tr := newTracking(r.Series, r.Rate, len(r.Regions))
	var ymax float64
	for i, name := range r.Regions {
		c := regionColours[i%len(regionColours)]
		grant := make(plotter.XYs, len(r.Series))
		share := make(plotter.XYs, len(r.Series))
		for k, s := range r.Series {
			grant[k] = plotter.XY{X: s.At.Seconds(), Y: s.Regions[i].Grant}
			share[k] = plotter.XY{X: s.At.Seconds(), Y: tr.idl[i][k]}
			ymax = max(ymax, s.Regions[i].Grant, tr.idl[i][k])
		}
		if err := line(p, name+" grant", grant, c, vg.Points(1.8)); err != nil {
			return nil, err
		}
		if err := line(p, name+" ideal", share, c, vg.Points(1), vg.Points(5), vg.Points(3)); err != nil {
			return nil, err
		}
	}
	p.Y.Max = max(r.Rate*1.1, ymax*1.5)
	p.X.Max = r.Duration.Seconds()
	return p, nil
}

// timeTicks marks simulated seconds every 10, 20 or 60 s, labelled every
// other mark at most.
type timeTicks struct{}

// Ticks implements plot.Ticker.
func (timeTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 10.0
	switch {
	case hi-lo > 400:
		step = 60
	case hi-lo > 150:
		step = 20
	}
	var out []plot.Tick
	for i, x := 0, 0.0; x <= hi; i, x = i+1, x+step {
		if x < lo {
			continue
		}
		t := plot.Tick{Value: x}
		if i%2 == 0 {
			t.Label = fmt.Sprintf("%.0f", x)
		}
		out = append(out, t)
	}
	return out
}
