package statuspage

import (
	"fmt"
	"html/template"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// historyLen is how many samples (one per rebalance) a series keeps.
const historyLen = 300

// history keeps, for the chart, what each region offered, admitted and was
// granted for the busiest tenants, one sample per rebalance. Guarded by the
// Page's mu.
type history struct {
	regions []string
	tick    map[string][]rates // tenant → per region, samples not committed yet
	series  map[string]*series
}

type rates struct{ offered, admitted float64 }

type series struct {
	at       []time.Time
	offered  [][]float64 // [sample][region]
	admitted [][]float64
	grant    [][]float64
}

func newHistory() *history {
	return &history{tick: map[string][]rates{}, series: map[string]*series{}}
}

// wanted returns the tenants whose samples the next snapshot must carry,
// besides the busiest: those charted, and those sampled but not committed.
func (h *history) wanted() []string {
	out := make([]string, 0, len(h.series)+len(h.tick))
	for t := range h.series {
		out = append(out, t)
	}
	for t := range h.tick {
		if _, ok := h.series[t]; !ok {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// add takes a snapshot: the rates of the busiest tenants and of those
// charted already, and, unless the leader learns, closes the sample.
func (h *history) add(s Snapshot) {
	if !slices.Equal(h.regions, s.Regions) {
		h.regions = append([]string(nil), s.Regions...)
		h.tick, h.series = map[string][]rates{}, map[string]*series{}
	}
	by := make(map[string]*Sample, len(s.Samples))
	for i := range s.Samples {
		by[s.Samples[i].Tenant] = &s.Samples[i]
	}
	take := func(t string) {
		smp := by[t]
		if smp == nil || len(smp.Offered) != len(h.regions) || len(smp.Admitted) != len(h.regions) {
			return
		}
		r := make([]rates, len(h.regions))
		for i := range r {
			r[i] = rates{offered: smp.Offered[i], admitted: smp.Admitted[i]}
		}
		h.tick[t] = r
	}
	for _, t := range s.Busiest {
		take(t)
	}
	for t := range h.series {
		if _, ok := h.tick[t]; !ok {
			take(t)
		}
	}
	if !s.Learning {
		h.commit(s.At, by)
	}
}

// commit closes the sample: the busiest tenants' rates and their grants
// (the floor where a region holds none).
func (h *history) commit(now time.Time, by map[string]*Sample) {
	type load struct {
		t   string
		off float64
	}
	var ls []load
	for t, r := range h.tick {
		sum := 0.0
		for _, x := range r {
			sum += x.offered
		}
		ls = append(ls, load{t, sum})
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].off > ls[j].off || ls[i].off == ls[j].off && ls[i].t < ls[j].t })
	keep := map[string]bool{}
	for i := 0; i < len(ls) && i < ChartTenants; i++ {
		keep[ls[i].t] = true
	}
	// Tenants already charted stay while there is room, so a series does
	// not flicker in and out.
	for t := range h.series {
		if len(keep) >= ChartTenants {
			break
		}
		keep[t] = true
	}
	for t := range h.series {
		if !keep[t] {
			delete(h.series, t)
		}
	}
	n := len(h.regions)
	for t := range keep {
		s := h.series[t]
		if s == nil {
			s = &series{}
			h.series[t] = s
		}
		off, adm, gr := make([]float64, n), make([]float64, n), make([]float64, n)
		for i, r := range h.tick[t] {
			off[i], adm[i] = r.offered, r.admitted
		}
		if smp := by[t]; smp != nil && len(smp.Grant) == n {
			copy(gr, smp.Grant)
		}
		s.at = append(s.at, now)
		s.offered = append(s.offered, off)
		s.admitted = append(s.admitted, adm)
		s.grant = append(s.grant, gr)
		if len(s.at) > historyLen {
			s.at, s.offered, s.admitted, s.grant = s.at[1:], s.offered[1:], s.admitted[1:], s.grant[1:]
		}
	}
	h.tick = map[string][]rates{}
}

// tenants returns the charted tenants, busiest (last sample) first.
func (h *history) tenants() []string {
	out := make([]string, 0, len(h.series))
	for t := range h.series {
		out = append(out, t)
	}
	last := func(t string) float64 {
		s := h.series[t]
		sum := 0.0
		for _, x := range s.offered[len(s.offered)-1] {
			sum += x
		}
		return sum
	}
	sort.Slice(out, func(i, j int) bool {
		return last(out[i]) > last(out[j]) || last(out[i]) == last(out[j]) && out[i] < out[j]
	})
	return out
}

var chartColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

// chart renders tenant's series as an SVG line chart: per region (a
// colour) admitted (solid), offered (thin dashed) and grant (thick dotted).
func (h *history) chart(tenant string) template.HTML {
	s := h.series[tenant]
	if s == nil || len(s.at) < 2 {
		return ""
	}
	const w, ht, pl, pr, pt, pb = 760.0, 260.0, 56.0, 150.0, 10.0, 28.0
	t0, t1 := s.at[0], s.at[len(s.at)-1]
	span := t1.Sub(t0).Seconds()
	ymax := 1.0
	for k := range s.at {
		for i := range h.regions {
			ymax = math.Max(ymax, math.Max(s.offered[k][i], math.Max(s.admitted[k][i], s.grant[k][i])))
		}
	}
	ymax = niceCeil(ymax * 1.05)
	x := func(k int) float64 { return pl + (w-pl-pr)*s.at[k].Sub(t0).Seconds()/span }
	y := func(v float64) float64 { return pt + (ht-pt-pb)*(1-v/ymax) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-size="11" font-family="sans-serif">`, w, ht)
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="#fafafa" stroke="#ccc"/>`, pl, pt, w-pl-pr, ht-pt-pb)
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%.0f/s</text>`, pl-4, y(v)+4, v)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text><text x="%.0f" y="%.0f" text-anchor="end">%s (%.0f s)</text>`,
		pl, ht-8, t0.UTC().Format("15:04:05"), w-pr, ht-8, t1.UTC().Format("15:04:05"), span)
	line := func(vals [][]float64, i int, style string) {
		b.WriteString(`<polyline fill="none" ` + style + ` points="`)
		for k := range s.at {
			fmt.Fprintf(&b, "%.1f,%.1f ", x(k), y(vals[k][i]))
		}
		b.WriteString(`"/>`)
	}
	for i, reg := range h.regions {
		c := chartColors[i%len(chartColors)]
		line(s.offered, i, `stroke="`+c+`" stroke-width="1" stroke-dasharray="4 3" opacity="0.7"`)
		line(s.grant, i, `stroke="`+c+`" stroke-width="3" stroke-dasharray="1 4" stroke-linecap="round"`)
		line(s.admitted, i, `stroke="`+c+`" stroke-width="2"`)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">■ %s</text>`, w-pr+10, pt+14+float64(i)*16, c, template.HTMLEscapeString(reg))
	}
	ly := pt + 20 + float64(len(h.regions))*16
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">— admitted</text><text x="%.0f" y="%.0f">- - offered</text><text x="%.0f" y="%.0f">··· grant</text>`,
		w-pr+10, ly, w-pr+10, ly+16, w-pr+10, ly+32)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from numbers and escaped names only
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
