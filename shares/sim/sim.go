package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/shares"
)

// Tenant is the one tenant every scenario simulates.
const Tenant = "t42"

// sampleEvery is the period of the recorded time series.
const sampleEvery = time.Second

// Result is what one run measured.
type Result struct {
	Scenario string
	Mode     shares.Mode
	Seed     uint64
	Regions  []string
	Rate     float64
	Burst    int64
	Duration time.Duration
	Warmup   time.Duration

	// Offered, Admitted, Denied, Retries and Ideal count units in
	// [Warmup, Duration): what arrived (retries included), what the
	// regions admitted and denied, how many arrivals were retries, and
	// what one central GCRA with (R, B) admitted of the same arrivals.
	Offered, Admitted, Denied, Retries, Ideal int64
	// Utilisation is Admitted / Ideal (above 1 means over-admission).
	Utilisation float64

	// Excess is the worst over-admission per window in Windows, over the
	// whole run; OverAdmission the worst of them.
	Excess        []Excess
	OverAdmission Excess

	// Events are the instants convergence is measured after; Convergence
	// the time to converge after each (-1: never), ConvergenceWorst the
	// largest (-1 if any never converged).
	Events           []time.Duration
	Convergence      []time.Duration
	ConvergenceWorst time.Duration
	// RegionError is the mean |admitted_i − R·d_i/D| over regions and
	// steady seconds, as a fraction of R.
	RegionError float64

	// Writes counts the grant changes the leaders returned (etcd writes).
	Writes int
	// PeakRateSum and PeakBurstSum are the largest sums over regions of
	// what they enforced at one instant (I4 wants ≤ R and ≤ B).
	PeakRateSum  float64
	PeakBurstSum int64
	// PeakRateAt and PeakBurstAt are the first instants the peaks were
	// reached.
	PeakRateAt  time.Duration
	PeakBurstAt time.Duration
	// FloorSeconds counts the region-seconds after the warm-up at whose
	// end a region enforced its floor (no grant, or its lease lapsed).
	FloorSeconds int
	// LostReports counts reports lost (loss, partition, no leader).
	LostReports int

	Series []Sample
}

// WritesPerMinute is Writes per simulated minute.
func (r *Result) WritesPerMinute() float64 { return float64(r.Writes) / r.Duration.Minutes() }

// OverAdmissionPct is the worst excess as a percentage of R·Duration.
func (r *Result) OverAdmissionPct() float64 {
	return 100 * r.OverAdmission.Units / (r.Rate * r.Duration.Seconds())
}

// PeakExcessPct is the worst excess relative to its window, as a percentage
// of R·W: the peak over-grant comparable with Doorman's.
func (r *Result) PeakExcessPct() float64 {
	var p float64
	for _, e := range r.Excess {
		p = math.Max(p, 100*e.Units/(r.Rate*e.Window.Seconds()))
	}
	return p
}

type kind uint8

const (
	kArrival    kind = iota // a fresh arrival at region
	kRetry                  // a retry at region; n is the retry number
	kReport                 // region sends its report
	kReportRecv             // the leader receives report n
	kRenewal                // region receives renewal n
	kRebalance              // the leader rebalances
	kGrant                  // region receives change n
	kLeaderDown             // the leader dies
	kLeaderUp               // a new leader restores and takes over
	kSample                 // record a sample
)

type event struct {
	at     int64 // µs since the start
	seq    uint64
	kind   kind
	region int32
	n      int32
}

// queue is a binary min-heap of events ordered by (at, seq): same-instant
// events run in the order they were scheduled, so runs are deterministic.
type queue []event

func (q queue) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}

func (q *queue) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *queue) pop() event {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

type sentReport struct {
	region int
	sentAt int64
	rep    shares.Report
}

type sentRenewal struct {
	sentAt int64 // when the region sent the report this answers
	rn     shares.Renewal
}

type enforced struct {
	rate   float64
	burst  int64
	leased bool
	limit  gcra.Limit
	ok     bool // limit valid (rate > 0, burst ≥ 1)
}

type regionState struct {
	name string
	reg  *shares.Region
	key  gcra.State
	eff  enforced
	gen  *generator

	// counters since the last report, and since the last sample
	repStart             int64
	repOffered, repAdmit float64
	secOffered, secAdmit float64

	lastGrant int64 // delivery instant of the last grant scheduled
	lastExtra int64 // when the last prompt report was sent (-1: never)
}

type world struct {
	spec   *Spec
	budget shares.Budget
	cfg    shares.Config
	off    int64 // Unix µs of simulated zero
	end    int64
	warm   int64

	q   queue
	seq uint64

	rngNet, rngRetry *rand.Rand

	regions []*regionState
	byName  map[string]int

	leader    *shares.Allocator
	persisted map[string]shares.Change // by region: the latest written grant

	reports  []sentReport
	renewals []sentRenewal
	changes  []shares.Change

	central    *central
	admissions []int64
	secIdeal   float64
	secAdmit   float64
	secOffered float64

	res *Result

	// trace, when set (by tests), is told of every message and change.
	trace func(t int64, format string, args ...any)
}

func (w *world) tracef(t int64, format string, args ...any) {
	if w.trace != nil {
		w.trace(t, format, args...)
	}
}

// Run simulates spec in mode with seed. The fresh arrivals depend only on
// the seed (not on the mode), so modes are compared on the same traffic.
func Run(spec *Spec, mode shares.Mode, seed uint64) (*Result, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("scenario %q: %w", spec.Name, err)
	}
	w, err := newWorld(spec, mode, seed)
	if err != nil {
		return nil, err
	}
	return w.complete()
}

func (w *world) complete() (*Result, error) {
	if err := w.run(); err != nil {
		return nil, fmt.Errorf("scenario %q mode %s seed %d: %w", w.spec.Name, w.budget.Mode, w.res.Seed, err)
	}
	w.finish()
	return w.res, nil
}

func newWorld(spec *Spec, mode shares.Mode, seed uint64) (*world, error) {
	b := spec.Budget
	b.Mode = mode
	if mode != shares.ModePinned {
		b.Home = ""
	}
	cfg := shares.DefaultConfig()
	cfg.Regions = slices.Clone(spec.Regions)
	cfg.Interval = spec.Interval
	cfg.Lease = spec.Lease
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("shares config: %w", err)
	}
	leader, err := shares.NewAllocator(cfg)
	if err != nil {
		return nil, fmt.Errorf("new allocator: %w", err)
	}
	w := &world{
		spec:      spec,
		budget:    b,
		cfg:       cfg,
		off:       epoch.UnixMicro(),
		end:       spec.Duration.Microseconds(),
		warm:      spec.Warmup.Microseconds(),
		rngNet:    rand.New(rand.NewPCG(seed, 0x6e6574)),
		rngRetry:  rand.New(rand.NewPCG(seed, 0x7265747279)),
		byName:    map[string]int{},
		leader:    leader,
		persisted: map[string]shares.Change{},
		res: &Result{
			Scenario: spec.Name, Mode: mode, Seed: seed,
			Regions: slices.Clone(spec.Regions), Rate: b.Rate, Burst: b.Burst,
			Duration: spec.Duration, Warmup: spec.Warmup,
		},
	}
	w.central, err = newCentral(b.Rate, b.Burst, w.off)
	if err != nil {
		return nil, fmt.Errorf("central limiter: %w", err)
	}
	for i, name := range spec.Regions {
		rs := &regionState{name: name, reg: shares.NewRegion(name, cfg, spec.Drift), lastExtra: -1}
		if tr, ok := spec.Traffic[name]; ok {
			rs.gen = newGenerator(tr, rand.New(rand.NewPCG(seed, uint64(i)+1)))
		}
		w.regions = append(w.regions, rs)
		w.byName[name] = i
	}
	return w, nil
}

func (w *world) at(t int64) time.Time { return time.UnixMicro(w.off + t) }

func (w *world) schedule(at int64, k kind, region, n int) {
	w.seq++
	w.q.push(event{at: at, seq: w.seq, kind: k, region: int32(region), n: int32(n)})
}

func (w *world) delay(j Jitter) int64 {
	lo, hi := j.Min.Microseconds(), j.Max.Microseconds()
	if hi <= lo {
		return lo
	}
	return lo + w.rngNet.Int64N(hi-lo+1)
}

func (w *world) partitioned(region int, t int64) (bool, int64) {
	name := w.regions[region].name
	for _, p := range w.spec.Partitions {
		if p.Region == name && t >= p.From.Microseconds() && t < p.To.Microseconds() {
			return true, p.To.Microseconds()
		}
	}
	return false, 0
}

func (w *world) run() error {
	p := w.spec.Interval.Microseconds()
	for i, rs := range w.regions {
		if rs.gen != nil {
			if t, ok := rs.gen.next(w.end); ok {
				w.schedule(t, kArrival, i, 0)
			}
		}
		// Each region reports on its own phase within the interval.
		first := w.rngNet.Int64N(p)
		rs.repStart = 0
		w.schedule(first, kReport, i, 0)
	}
	w.schedule(p, kRebalance, 0, 0)
	for _, f := range w.spec.Failovers {
		w.schedule(f.At.Microseconds(), kLeaderDown, 0, 0)
		w.schedule((f.At + f.Gap).Microseconds(), kLeaderUp, 0, 0)
	}
	w.schedule(sampleEvery.Microseconds(), kSample, 0, 0)
	w.refreshAll(0)

	for len(w.q) > 0 {
		e := w.q.pop()
		if e.at >= w.end && e.kind != kSample {
			continue
		}
		if e.at > w.end {
			continue
		}
		i := int(e.region)
		switch e.kind {
		case kArrival:
			w.arrive(i, e.at, 0)
			if t, ok := w.regions[i].gen.next(w.end); ok {
				w.schedule(t, kArrival, i, 0)
			}
		case kRetry:
			w.arrive(i, e.at, int(e.n))
		case kReport:
			w.sendReport(i, e.at)
			w.schedule(e.at+p, kReport, i, 0)
		case kReportRecv:
			if err := w.receiveReport(int(e.n), e.at); err != nil {
				return err
			}
		case kRenewal:
			if cut, _ := w.partitioned(i, e.at); !cut {
				rn := w.renewals[e.n]
				w.regions[i].reg.Renewed(w.at(rn.sentAt), rn.rn)
				w.tracef(e.at, "%s renewed %+v (sent %dµs)", w.regions[i].name, rn.rn, rn.sentAt)
				w.refreshAll(e.at)
			}
		case kRebalance:
			w.rebalance(e.at)
			w.schedule(e.at+p, kRebalance, 0, 0)
		case kGrant:
			c := w.changes[e.n]
			old, had := w.regions[i].reg.Grant(c.Tenant)
			w.regions[i].reg.Apply(c)
			w.tracef(e.at, "%s applied %+v", w.regions[i].name, c)
			w.refreshAll(e.at)
			if had && (c.Grant.Rate < old.Rate || c.Grant.Burst < old.Burst) {
				w.promptReport(i, e.at)
			}
		case kLeaderDown:
			w.leader = nil
		case kLeaderUp:
			a, err := shares.NewAllocator(w.cfg)
			if err != nil {
				return fmt.Errorf("new leader: %w", err)
			}
			a.Restore(w.at(e.at), w.persistedChanges())
			w.leader = a
		case kSample:
			w.sample(e.at)
			if e.at < w.end {
				w.schedule(e.at+sampleEvery.Microseconds(), kSample, 0, 0)
			}
		}
	}
	return nil
}

// enforce refreshes what region i enforces at t.
func (w *world) enforce(i int, t int64) {
	rs := w.regions[i]
	rate, burst, leased := rs.reg.Effective(w.at(t), Tenant, w.budget)
	if rate == rs.eff.rate && burst == rs.eff.burst {
		rs.eff.leased = leased
		return
	}
	rs.eff = enforced{rate: rate, burst: burst, leased: leased}
	if rate > 0 && burst >= 1 {
		if l, err := gcra.FromPerSecond(rate, burst); err == nil {
			rs.eff.limit, rs.eff.ok = l, true
		}
	}
}

// refreshAll refreshes every region at t and checks I4.
func (w *world) refreshAll(t int64) {
	for i := range w.regions {
		w.enforce(i, t)
	}
	w.checkI4(t, true)
}

// checkI4 records the sum over regions of what they enforce. The sum uses
// each region's last refreshed value; when it exceeds the largest seen so
// far every region is refreshed at t first, so the peak is exact.
func (w *world) checkI4(t int64, fresh bool) {
	var rate float64
	var burst int64
	for _, rs := range w.regions {
		rate += rs.eff.rate
		burst += rs.eff.burst
	}
	if rate <= w.res.PeakRateSum && burst <= w.res.PeakBurstSum {
		return
	}
	if !fresh {
		w.refreshAll(t)
		return
	}
	if rate > w.budget.Rate*(1+1e-9) || burst > w.budget.Burst {
		var parts []string
		for _, rs := range w.regions {
			parts = append(parts, fmt.Sprintf("%s %.2f/%d leased=%v", rs.name, rs.eff.rate, rs.eff.burst, rs.eff.leased))
		}
		w.tracef(t, "I4 exceeded: Σ rate %.3f, Σ burst %d: %s", rate, burst, strings.Join(parts, "; "))
	}
	if rate > w.res.PeakRateSum {
		w.res.PeakRateSum = rate
		w.res.PeakRateAt = time.Duration(t) * time.Microsecond
	}
	if burst > w.res.PeakBurstSum {
		w.res.PeakBurstSum = burst
		w.res.PeakBurstAt = time.Duration(t) * time.Microsecond
	}
}

func (w *world) arrive(i int, t int64, retry int) {
	rs := w.regions[i]
	inWin := t >= w.warm
	rs.repOffered++
	rs.secOffered++
	w.secOffered++
	if w.central.admit(t) {
		w.secIdeal++
		if inWin {
			w.res.Ideal++
		}
	}
	w.enforce(i, t)
	w.checkI4(t, false)
	allowed := false
	var retryAfter time.Duration
	if rs.eff.ok {
		ns, r, _ := gcra.DecideMicros(rs.key, w.off+t, rs.eff.limit, 1)
		rs.key = ns
		allowed, retryAfter = r.Allowed, r.RetryAfter
	}
	if inWin {
		w.res.Offered++
		if retry > 0 {
			w.res.Retries++
		}
	}
	if allowed {
		rs.repAdmit++
		rs.secAdmit++
		w.secAdmit++
		w.admissions = append(w.admissions, t)
		if inWin {
			w.res.Admitted++
		}
		return
	}
	if inWin {
		w.res.Denied++
	}
	if rt := w.spec.Retry; rt != nil && retry < rt.Attempts {
		d := rt.backoff(retry, retryAfter, w.rngRetry)
		if at := t + d.Microseconds(); at < w.end {
			w.schedule(at, kRetry, i, retry+1)
		}
	}
}

func (w *world) sendReport(i int, t int64) {
	rs := w.regions[i]
	rep := shares.Report{
		Region:   rs.name,
		Interval: time.Duration(t-rs.repStart) * time.Microsecond,
		Applied:  rs.reg.Applied(),
		Usage:    map[string]shares.Usage{Tenant: {Offered: rs.repOffered, Admitted: rs.repAdmit}},
	}
	rs.repStart, rs.repOffered, rs.repAdmit = t, 0, 0
	if cut, _ := w.partitioned(i, t); cut || w.rngNet.Float64() < w.spec.Network.LossReports {
		w.res.LostReports++
		return
	}
	w.reports = append(w.reports, sentReport{region: i, sentAt: t, rep: rep})
	w.schedule(t+w.delay(w.spec.Network.Report), kReportRecv, i, len(w.reports)-1)
}

// promptReport sends region i's report at t, out of its period, because it
// just applied a shrink that a grow elsewhere may wait for; at most one such
// report per interval.
func (w *world) promptReport(i int, t int64) {
	rs := w.regions[i]
	if w.spec.PeriodicReports || (rs.lastExtra >= 0 && t-rs.lastExtra < w.spec.Interval.Microseconds()) {
		return
	}
	rs.lastExtra = t
	w.sendReport(i, t)
}

func (w *world) receiveReport(n int, t int64) error {
	sr := w.reports[n]
	if cut, _ := w.partitioned(sr.region, t); cut || w.leader == nil {
		w.res.LostReports++
		return nil
	}
	rn, err := w.leader.Report(w.at(t), sr.rep)
	w.tracef(t, "leader got %s report sent %dµs applied %d usage %+v", sr.rep.Region, sr.sentAt, sr.rep.Applied, sr.rep.Usage[Tenant])
	if err != nil {
		return fmt.Errorf("report from %s at %v: %w", sr.rep.Region, time.Duration(t)*time.Microsecond, err)
	}
	w.renewals = append(w.renewals, sentRenewal{sentAt: sr.sentAt, rn: rn})
	w.schedule(t+w.delay(w.spec.Network.Renewal), kRenewal, sr.region, len(w.renewals)-1)
	if !w.spec.TickOnly && w.leader.Growable() {
		// The report acknowledged a shrink that a deferred grow waits for:
		// grow now rather than at the next rebalance.
		w.write(t, w.leader.Grow(w.at(t)))
	}
	return nil
}

func (w *world) rebalance(t int64) {
	if w.leader == nil {
		return
	}
	w.write(t, w.leader.Rebalance(w.at(t), map[string]shares.Budget{Tenant: w.budget}))
}

// write persists and delivers the changes the leader made at t.
func (w *world) write(t int64, changes []shares.Change) {
	w.res.Writes += len(changes)
	for _, c := range changes {
		w.tracef(t, "leader wrote %+v", c)
		i, ok := w.byName[c.Region]
		if !ok || c.Tenant != Tenant {
			continue
		}
		w.persisted[c.Region] = c
		w.changes = append(w.changes, c)
		rs := w.regions[i]
		// A region's watch delivers its grants in the order written; one
		// that is cut off gets them once it heals.
		at := max(t+w.delay(w.spec.Network.Grant), rs.lastGrant)
		if cut, heal := w.partitioned(i, at); cut {
			at = max(heal+w.delay(w.spec.Network.Grant), rs.lastGrant)
		}
		rs.lastGrant = at
		w.schedule(at, kGrant, i, len(w.changes)-1)
	}
}

func (w *world) persistedChanges() []shares.Change {
	out := make([]shares.Change, 0, len(w.persisted))
	for _, name := range w.spec.Regions {
		if c, ok := w.persisted[name]; ok {
			out = append(out, c)
		}
	}
	return out
}

func (w *world) sample(t int64) {
	w.refreshAll(t)
	s := Sample{
		At:       time.Duration(t) * time.Microsecond,
		Offered:  w.secOffered,
		Admitted: w.secAdmit,
		Ideal:    w.secIdeal,
		Regions:  make([]RegionSample, len(w.regions)),
	}
	scale := 1.0
	if w.secOffered > w.budget.Rate {
		scale = w.budget.Rate / w.secOffered
	}
	for i, rs := range w.regions {
		s.Regions[i] = RegionSample{
			Offered: rs.secOffered, Admitted: rs.secAdmit,
			Grant: rs.eff.rate, Burst: rs.eff.burst, Leased: rs.eff.leased,
			Share: rs.secOffered * scale,
		}
		rs.secOffered, rs.secAdmit = 0, 0
		if !rs.eff.leased && t > w.warm {
			w.res.FloorSeconds++
		}
	}
	w.secOffered, w.secAdmit, w.secIdeal = 0, 0, 0
	w.res.Series = append(w.res.Series, s)
}

func (w *world) finish() {
	r := w.res
	if r.Ideal > 0 {
		r.Utilisation = float64(r.Admitted) / float64(r.Ideal)
	}
	r.Excess, r.OverAdmission = overAdmission(w.admissions, r.Rate, r.Burst)
	r.Events = slices.Clone(w.spec.Events)
	if len(r.Events) == 0 {
		r.Events = []time.Duration{0}
	}
	tr := newTracking(r.Series, r.Rate, len(r.Regions))
	r.Convergence = tr.convergence(r.Events, r.Rate)
	r.ConvergenceWorst = 0
	for _, c := range r.Convergence {
		if c < 0 {
			r.ConvergenceWorst = -1
			break
		}
		r.ConvergenceWorst = max(r.ConvergenceWorst, c)
	}
	// Without events convergence is measured from the cold start, which the
	// warm-up already leaves out of the error.
	if len(w.spec.Events) > 0 {
		r.RegionError = tr.regionError(r.Events, r.Convergence, r.Warmup, r.Rate)
	} else {
		r.RegionError = tr.regionError(nil, nil, r.Warmup, r.Rate)
	}
}
