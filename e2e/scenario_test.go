package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
	"github.com/allot-dev/allot/shares/sim"
)

// scenario is one e2e scenario: a tenant's demand per region, the faults
// the test injects (act), and the checks on what was measured.
type scenario struct {
	name, desc string
	tenant     string
	rate       float64 // R (as in testdata/policy.yaml)
	burst      int64   // B
	mode       shares.Mode
	home       string
	duration   time.Duration
	// demand is the tenant's offered rate per region.
	demand map[string]func(time.Duration) float64
	// extra streams are driven too but not measured as the tenant's.
	extra []stream
	// events are the instants convergence is measured from; window is
	// where utilisation is measured.
	events []time.Duration
	window [2]time.Duration
	// The faults, as the simulator should model them.
	partitions []sim.Partition
	failovers  []sim.Failover
	// simNote replaces the comparison with the simulator when it models
	// no such thing.
	simNote string
	// limit, when set, is what a window [a, a+w] may admit (a budget that
	// changes during the run); B + R·W otherwise.
	limit func(a, w time.Duration) float64
	// before runs before the load starts.
	before func(ctx context.Context, t *testing.T, c *cluster)
	// act runs beside the load (faults on the load's schedule); check
	// asserts on the measures. Both may be nil.
	act   func(ctx context.Context, t *testing.T, c *cluster, l *load, m *run)
	check func(t *testing.T, c *cluster, m *run)
}

// run is one scenario's measurements.
type run struct {
	sc       *scenario
	topo     topology
	regions  []string
	calls    []call
	regionOf map[int]int // stream → region index, tenant streams only
	series   []second
	excess   []excess
	conv     []time.Duration
	shifts   []eventMeasure // each event's after the start
	tot      totals
	util     float64
	notes    []string
	failures []string
	sim      *simComparison
	marks    []mark // instants worth drawing (faults)
	// grants are the leader's grants of the tenant as sampled during the
	// run (see sampleGrants).
	grants []grantSample
}

// grantSample is the leader's grant of each region (by region index) at an
// instant of the load's clock; ok is false when the leader did not answer.
type grantSample struct {
	at    time.Duration
	rates []float64
}

// grantEvery is how often sampleGrants asks the leader.
const grantEvery = 250 * time.Millisecond

// sampleGrants asks the leader for the tenant's grants every grantEvery
// until ctx ends, and returns what it got (a sample the leader did not
// answer is left out: a fault may make it unreachable).
func sampleGrants(ctx context.Context, c *cluster, l *load, tenant string, regions []string) []grantSample {
	var out []grantSample
	t := time.NewTicker(grantEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, grantEvery)
		v, err := c.shares(qctx, tenant)
		cancel()
		if err != nil || v.Source != "leader" {
			continue
		}
		g := grantSample{at: l.elapsed(), rates: make([]float64, len(regions))}
		for _, s := range v.Regions {
			if i := slices.Index(regions, s.Region); i >= 0 {
				g.rates[i] = s.Rate
			}
		}
		out = append(out, g)
	}
}

// meanGrants returns each region's mean sampled grant over [from, to), and
// how many samples fell there.
func (m *run) meanGrants(from, to time.Duration) ([]float64, int) {
	sum, n := make([]float64, len(m.regions)), 0
	for _, g := range m.grants {
		if g.at < from || g.at >= to {
			continue
		}
		for i, r := range g.rates {
			sum[i] += r
		}
		n++
	}
	if n > 0 {
		for i := range sum {
			sum[i] /= float64(n)
		}
	}
	return sum, n
}

type mark struct {
	at    time.Duration
	label string
}

func (m *run) notef(format string, args ...any) {
	m.notes = append(m.notes, fmt.Sprintf(format, args...))
}

func (m *run) mark(at time.Duration, label string) { m.marks = append(m.marks, mark{at, label}) }

// errorf fails the test and records the failure for the report.
func (m *run) errorf(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	m.failures = append(m.failures, msg)
	t.Error(msg)
}

// streamsOf returns the call stream indices of region i (tenant streams).
func (m *run) regionIndex(name string) int { return slices.Index(m.regions, name) }

// envelopeSlack is what the over-admission check forgives: one unit per
// region for GCRA's whole-microsecond emission interval rounding.
func envelopeSlack(regions int) float64 { return float64(regions) }

// runScenario drives sc against c, measures, compares with the simulator,
// records the result for the report and runs sc's checks.
func runScenario(t *testing.T, c *cluster, sc *scenario) *run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sc.duration+2*time.Minute)
	defer cancel()
	m := &run{sc: sc, topo: c.topo, regions: c.topo.Regions, regionOf: map[int]int{}}
	var streams []stream
	for i, r := range m.regions {
		if d, ok := sc.demand[r]; ok {
			m.regionOf[len(streams)] = i
			streams = append(streams, stream{region: r, desc: map[string]string{"tenant": sc.tenant}, rate: d})
		}
	}
	streams = append(streams, sc.extra...)
	if sc.before != nil {
		sc.before(ctx, t, c)
	}
	lctx, stop := context.WithCancel(ctx)
	l := startLoad(lctx, c, streams, uint64(len(sc.name)))
	grantsDone := make(chan []grantSample, 1)
	go func() { grantsDone <- sampleGrants(lctx, c, l, sc.tenant, m.regions) }()
	actDone := make(chan struct{})
	go func() {
		defer close(actDone)
		if sc.act != nil {
			sc.act(ctx, t, c, l, m)
		}
	}()
	err := l.at(ctx, sc.duration)
	stop()
	l.wait()
	<-actDone
	m.grants = <-grantsDone
	if err != nil {
		t.Fatalf("%s: %v", sc.name, err)
	}
	m.calls = l.snapshot()
	m.measure(t)
	m.compare(t)
	report.add(m)
	if sc.check != nil {
		sc.check(t, c, m)
	}
	return m
}

// measure computes the series, the envelope, convergence and utilisation,
// and checks I4 (every scenario).
func (m *run) measure(t *testing.T) {
	t.Helper()
	sc := m.sc
	var sends []time.Duration
	var adm []call
	failed := 0
	for _, c := range m.calls {
		if _, ok := m.regionOf[c.stream]; !ok {
			continue
		}
		sends = append(sends, c.send)
		if c.failed {
			failed++
		}
		if c.allowed {
			adm = append(adm, c)
		}
	}
	ideal, err := idealAdmits(sends, sc.rate, sc.burst)
	if err != nil {
		t.Fatal(err)
	}
	n := int(math.Ceil(sc.duration.Seconds()))
	m.series = perSecond(m.calls, m.regionOf, len(m.regions), ideal, sc.rate, n)
	if sc.limit != nil {
		m.excess = overAdmissionBy(adm, sc.limit)
	} else {
		m.excess = overAdmission(adm, sc.rate, sc.burst)
	}
	m.conv = convergence(m.series, sc.events, sc.duration, sc.rate)
	m.shifts = eventMeasures(m.calls, m.regionOf, m.regions, sc.demand, ideal, sc.events, sc.rate, sc.duration)
	m.tot = sum(m.series, sc.window[0], sc.window[1])
	if m.tot.Ideal > 0 {
		m.util = m.tot.Admitted / m.tot.Ideal
	}
	if failed > 0 {
		m.notef("%d of %d calls failed at the RPC level (no decision)", failed, len(sends))
	}
	for _, e := range m.excess {
		if e.units > envelopeSlack(len(m.regions)) {
			m.errorf(t, "I4: %v after %.1fs, admitted %.0f units over B + R·W (W = %v)", sc.name, e.at.Seconds(), e.units, e.window)
		}
	}
	t.Logf("%s: offered %.0f, admitted %.0f, ideal %.0f (utilisation %.1f%%) in [%v, %v); over-admission %s; convergence %s; shift loss, time to 90%% %s",
		sc.name, m.tot.Offered, m.tot.Admitted, m.tot.Ideal, 100*m.util, sc.window[0], sc.window[1], fmtExcess(m.excess), fmtConv(m.conv), fmtShifts(m.shifts))
}

// fmtShifts is each event's shift loss and time to 90%.
func fmtShifts(ms []eventMeasure) string {
	if len(ms) == 0 {
		return "-"
	}
	var parts []string
	for _, m := range ms {
		to := "never"
		if m.to90 >= 0 {
			to = fmt.Sprintf("%.1fs", m.to90.Seconds())
		}
		parts = append(parts, fmt.Sprintf("%.2fs, %s", m.loss, to))
	}
	return strings.Join(parts, "; ")
}

// rate returns region's admitted units per second over [from, to).
func (m *run) rate(region string, from, to time.Duration) float64 {
	t := sum(m.series, from, to)
	if t.Region == nil {
		return 0
	}
	return t.Region[m.regionIndex(region)] / (to - from).Seconds()
}

func fmtExcess(es []excess) string {
	var parts []string
	for _, e := range es {
		parts = append(parts, fmt.Sprintf("W=%v: %.0f", e.window, e.units))
	}
	return strings.Join(parts, ", ")
}

func fmtConv(cs []time.Duration) string {
	if len(cs) == 0 {
		return "-"
	}
	var parts []string
	for _, c := range cs {
		if c < 0 {
			parts = append(parts, "never")
		} else {
			parts = append(parts, fmt.Sprintf("%.0fs", c.Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}

// ---- the simulator's prediction ----

// simComparison is the simulator's run of the same profile beside the
// measurement, and whether they match.
type simComparison struct {
	util     float64
	excess   float64 // worst over W
	conv     []time.Duration
	shifts   []eventMeasure
	regionUn []float64 // admitted per region in the window, per second
	match    bool
	why      string
	series   []sim.Sample
}

// Match criteria (stated in the report): utilisation within 5 points, no
// over-admission in either beyond the rounding slack, and each convergence
// time no later than the simulator's plus two intervals (or neither
// converging).
const utilMatchPoints = 0.05

// shiftMatch: the shift losses match within this many seconds of R.
const shiftMatch = 0.3

func (m *run) compare(t *testing.T) {
	t.Helper()
	sc := m.sc
	if sc.simNote != "" {
		return
	}
	spec := &sim.Spec{
		Name:        sc.name,
		Description: sc.desc,
		Regions:     m.regions,
		Budget:      shares.Budget{Rate: sc.rate, Burst: sc.burst, Mode: sc.mode, Home: sc.home},
		Modes:       []shares.Mode{sc.mode},
		Interval:    m.topo.Interval,
		Lease:       m.topo.Lease,
		Drift:       m.topo.Drift,
		Duration:    sc.duration,
		Warmup:      sc.window[0],
		Traffic:     map[string]sim.Traffic{},
		// Messages take milliseconds on one machine: the leader acts
		// on a report as it arrives (steps, acknowledgements), so the
		// report is not kept waiting for a rebalance.
		Network: sim.Network{
			Report:  sim.Jitter{Min: time.Millisecond, Max: 10 * time.Millisecond},
			Renewal: sim.Jitter{Min: time.Millisecond, Max: 10 * time.Millisecond},
		},
		Partitions: sc.partitions,
		Failovers:  sc.failovers,
		Events:     sc.events,
	}
	for r, d := range sc.demand {
		spec.Traffic[r] = sim.Traffic{Profile: sim.Profile(d), Process: sim.Poisson}
	}
	if spec.Budget.Mode == "" {
		spec.Budget.Mode = shares.ModeRebalanced
		spec.Modes = []shares.Mode{shares.ModeRebalanced}
	}
	res, err := sim.Run(spec, spec.Modes[0], 1)
	if err != nil {
		t.Errorf("simulator: %v", err)
		return
	}
	sc2 := &simComparison{conv: res.Convergence, series: res.Series}
	for i, e := range res.Events {
		if e > 0 && i < len(res.ShiftLoss) && i < len(res.TimeTo90) {
			sc2.shifts = append(sc2.shifts, eventMeasure{at: e, loss: res.ShiftLoss[i], to90: res.TimeTo90[i]})
		}
	}
	var adm, idl float64
	sc2.regionUn = make([]float64, len(m.regions))
	for _, s := range res.Series {
		start := s.At - time.Second
		if start < sc.window[0] || start >= sc.window[1] {
			continue
		}
		adm += s.Admitted
		idl += s.Ideal
		for i, r := range s.Regions {
			sc2.regionUn[i] += r.Admitted
		}
	}
	if idl > 0 {
		sc2.util = adm / idl
	}
	for i := range sc2.regionUn {
		sc2.regionUn[i] /= (sc.window[1] - sc.window[0]).Seconds()
	}
	sc2.excess = res.OverAdmission.Units
	var why []string
	if d := m.util - sc2.util; math.Abs(d) > utilMatchPoints {
		why = append(why, fmt.Sprintf("utilisation %.1f%% vs %.1f%%", 100*m.util, 100*sc2.util))
	}
	worst := 0.0
	for _, e := range m.excess {
		worst = max(worst, e.units)
	}
	slack := envelopeSlack(len(m.regions))
	if (worst > slack) != (sc2.excess > slack) {
		why = append(why, fmt.Sprintf("over-admission %.0f vs %.0f", worst, sc2.excess))
	}
	for i := range min(len(m.conv), len(sc2.conv)) {
		e, s := m.conv[i], sc2.conv[i]
		switch {
		case e < 0 && s < 0:
		case e < 0:
			why = append(why, fmt.Sprintf("convergence after %v: never vs %v", sc.events[i], s))
		case s >= 0 && e > s+2*m.topo.Interval:
			why = append(why, fmt.Sprintf("convergence after %v: %v vs %v", sc.events[i], e, s))
		}
	}
	for i := range min(len(m.shifts), len(sc2.shifts)) {
		if d := m.shifts[i].loss - sc2.shifts[i].loss; math.Abs(d) > shiftMatch {
			why = append(why, fmt.Sprintf("shift loss after %v: %.2fs vs %.2fs", m.shifts[i].at, m.shifts[i].loss, sc2.shifts[i].loss))
		}
	}
	sc2.match = len(why) == 0
	sc2.why = strings.Join(why, "; ")
	m.sim = sc2
	t.Logf("%s: simulator predicts utilisation %.1f%%, over-admission %.0f, convergence %s; match: %v %s",
		sc.name, 100*sc2.util, sc2.excess, fmtConv(sc2.conv), sc2.match, sc2.why)
}
