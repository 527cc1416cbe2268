package e2e

import (
	"bytes"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// report collects every scenario's run; TestE2E writes it.
var report = &reportBook{}

type reportBook struct {
	mu    sync.Mutex
	suite string
	topo  topology
	start time.Time
	runs  []*run
}

func (r *reportBook) begin(suite string, topo topology) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.suite, r.topo, r.start, r.runs = suite, topo, time.Now(), nil
}

func (r *reportBook) add(m *run) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, m)
}

// write writes dir/report.md and dir/<scenario>.png.
func (r *reportBook) write(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	t := r.topo
	fmt.Fprintf(&b, "# allot e2e report (%s suite)\n\n", r.suite)
	fmt.Fprintf(&b, "Written by `go test%s ./e2e/` on %s, %v of scenarios. Real containers: %d etcd, %d coordinator(s), %d regions × (Redis + %d pods); P = %v (report and rebalance), L = %v, session TTL %v, lease drift %v. Load from this process over each pod's published gRPC port, Poisson arrivals.\n\n",
		map[bool]string{true: " -tags e2e", false: ""}[r.suite == "full"], r.start.UTC().Format(time.RFC3339),
		time.Since(r.start).Round(time.Second), t.Etcd, t.Coordinators, len(t.Regions), t.PodsPerRegion, t.Interval, t.Lease, t.SessionTTL, t.Drift)
	b.WriteString("Measures (as `shares/sim` defines them): *admitted* and *ideal* (what one central GCRA with the same R and B admits of the same arrivals) are counted by send instant in the scenario's window; *over-admission* is the worst, over windows of W = 1, 10, 60 s, of admitted − (B + R·W), counting only decisions certainly inside the window (sent after its start, answered before its end); *convergence* is the time from an event until the world's and every region's admitted rate (3-s centred mean) stay within 5% of R of the ideal split d_i·min(1, R/D) for 5 s. The simulator runs the same demand profile, R, B, P, L and faults (messages delayed 1–10 ms); it *matches* when utilisation is within 5 points, neither or both over-admit, and the e2e convergence is no later than the simulator's plus 2P, and each event's *shift loss* (what the central GCRA admitted and the run did not in the 30 s after the event, in seconds of R) within 0.3 s of the simulator's. *Time to 90%* is the time from an event until the region furthest below its fair share admits 90% of it over 300 ms (100 ms resolution).\n\n")
	b.WriteString("| scenario | result | offered | admitted | ideal | utilisation | over-admission (W=1/10/60 s) | convergence | shift loss, time to 90% | simulator: utilisation, over-adm., convergence; shift loss, time to 90% | matches |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- | --- |\n")
	for _, m := range r.runs {
		res := "pass"
		if len(m.failures) > 0 {
			res = "**FAIL**"
		}
		var ex []string
		for _, e := range m.excess {
			ex = append(ex, fmt.Sprintf("%.0f", e.units))
		}
		simCol, match := "n/a", "n/a"
		if m.sim != nil {
			simCol = fmt.Sprintf("%.1f%%, %.0f, %s; %s", 100*m.sim.util, m.sim.excess, fmtConv(m.sim.conv), fmtShifts(m.sim.shifts))
			match = "yes"
			if !m.sim.match {
				match = "no: " + m.sim.why
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f | %.0f | %.1f%% | %s | %s | %s | %s | %s |\n",
			m.sc.name, res, m.tot.Offered, m.tot.Admitted, m.tot.Ideal, 100*m.util, strings.Join(ex, " / "), fmtConv(m.conv), fmtShifts(m.shifts), simCol, match)
	}
	b.WriteString("\n")
	for _, m := range r.runs {
		sc := m.sc
		fmt.Fprintf(&b, "## %s\n\n%s\n\n", sc.name, sc.desc)
		fmt.Fprintf(&b, "- Tenant `%s`: R = %.0f/s, B = %d, mode %s. Run %v; utilisation measured in [%v, %v); convergence measured from %s.\n",
			sc.tenant, sc.rate, sc.burst, modeName(sc), sc.duration, sc.window[0], sc.window[1], fmtEvents(sc.events))
		if m.tot.Region != nil {
			var parts []string
			w := (sc.window[1] - sc.window[0]).Seconds()
			for i, r := range m.regions {
				s := fmt.Sprintf("%s offered %.0f/s, admitted %.1f/s", r, m.tot.RegionOffered[i]/w, m.tot.Region[i]/w)
				if m.sim != nil {
					s += fmt.Sprintf(" (simulator %.1f/s)", m.sim.regionUn[i])
				}
				parts = append(parts, s)
			}
			fmt.Fprintf(&b, "- Per region in the window: %s.\n", strings.Join(parts, "; "))
		}
		for _, n := range m.notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		if sc.simNote != "" {
			fmt.Fprintf(&b, "- Simulator: %s\n", sc.simNote)
		}
		for _, f := range m.failures {
			fmt.Fprintf(&b, "- **FAILED:** %s\n", f)
		}
		fmt.Fprintf(&b, "\n![%s](%s.png)\n\n", sc.name, sc.name)
		var buf bytes.Buffer
		if err := m.plot(&buf); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, sc.name+".png"), buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}

func modeName(sc *scenario) string {
	if sc.mode == "" {
		return "rebalanced"
	}
	if sc.home != "" {
		return fmt.Sprintf("%s (home %s)", sc.mode, sc.home)
	}
	return string(sc.mode)
}

func fmtEvents(es []time.Duration) string {
	if len(es) == 0 {
		return "nothing"
	}
	var parts []string
	for _, e := range es {
		parts = append(parts, e.String())
	}
	return strings.Join(parts, ", ")
}

var (
	regionColours = []color.RGBA{
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	black = color.RGBA{A: 0xff}
	grey  = color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}
	red   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

// plot draws the world's admitted rate against R, the central limiter and
// the simulator (top), and each region's admitted rate against its ideal
// share (bottom), with the faults marked.
func (m *run) plot(w *bytes.Buffer) error {
	sc := m.sc
	top := plot.New()
	top.Title.Text = fmt.Sprintf("%s: world admitted/s (R = %.0f/s, B = %d)", sc.name, sc.rate, sc.burst)
	top.X.Label.Text = "seconds"
	top.Y.Label.Text = "units/s"
	bottom := plot.New()
	bottom.Title.Text = "per region: admitted/s (solid, 3-s mean), ideal share (dashed), leader's grant (dotted)"
	bottom.X.Label.Text = "seconds"
	bottom.Y.Label.Text = "units/s"
	xy := func(f func(second) float64, smoothed bool) plotter.XYs {
		ys := make([]float64, len(m.series))
		for k, s := range m.series {
			ys[k] = f(s)
		}
		if smoothed {
			ys = smooth(ys)
		}
		pts := make(plotter.XYs, len(ys))
		for k := range ys {
			pts[k] = plotter.XY{X: m.series[k].At.Seconds() + 0.5, Y: ys[k]}
		}
		// The last second may be partial.
		if len(pts) > 1 {
			pts = pts[:len(pts)-1]
		}
		return pts
	}
	add := func(p *plot.Plot, name string, pts plotter.XYs, c color.Color, dashed bool, width vg.Length) error {
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color, l.Width = c, width
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		if name != "" {
			p.Legend.Add(name, l)
		}
		return nil
	}
	n := len(m.series)
	rline := plotter.XYs{{X: 0, Y: sc.rate}, {X: float64(n), Y: sc.rate}}
	if err := add(top, "R", rline, red, true, vg.Points(1)); err != nil {
		return err
	}
	if err := add(top, "central GCRA", xy(func(s second) float64 { return s.Ideal }, false), grey, false, vg.Points(1)); err != nil {
		return err
	}
	if m.sim != nil {
		pts := plotter.XYs{}
		for _, s := range m.sim.series {
			pts = append(pts, plotter.XY{X: s.At.Seconds() - 0.5, Y: s.Admitted})
		}
		if err := add(top, "simulator", pts, regionColours[3], true, vg.Points(1)); err != nil {
			return err
		}
	}
	if err := add(top, "admitted (e2e)", xy(func(s second) float64 { return s.Admitted }, false), black, false, vg.Points(1.5)); err != nil {
		return err
	}
	for i, r := range m.regions {
		c := regionColours[i%len(regionColours)]
		if err := add(bottom, r, xy(func(s second) float64 { return s.RegionAdmitted[i] }, true), c, false, vg.Points(1.5)); err != nil {
			return err
		}
		if err := add(bottom, "", xy(func(s second) float64 { return s.RegionShare[i] }, true), c, true, vg.Points(1)); err != nil {
			return err
		}
		if len(m.grants) > 1 {
			pts := make(plotter.XYs, len(m.grants))
			for k, g := range m.grants {
				pts[k] = plotter.XY{X: g.at.Seconds(), Y: g.rates[i]}
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color, l.Width, l.Dashes = c, vg.Points(0.75), []vg.Length{vg.Points(1), vg.Points(2)}
			bottom.Add(l)
		}
	}
	top.Y.Min, bottom.Y.Min = 0, 0
	top.Y.Max = max(top.Y.Max, sc.rate*1.2)
	for _, p := range []*plot.Plot{top, bottom} {
		p.Legend.Top = true
		p.X.Min, p.X.Max = 0, float64(n)
		for _, mk := range m.marks {
			l, err := plotter.NewLine(plotter.XYs{{X: mk.at.Seconds(), Y: p.Y.Min}, {X: mk.at.Seconds(), Y: p.Y.Max}})
			if err != nil {
				return err
			}
			l.Color, l.Dashes = grey, []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(l)
			lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: mk.at.Seconds(), Y: p.Y.Max * 0.97}}, Labels: []string{" " + mk.label}})
			if err != nil {
				return err
			}
			p.Add(lbl)
		}
	}
	const width, height = 10 * vg.Inch, 7 * vg.Inch
	c := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(100), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10), PadY: vg.Points(14)}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}
