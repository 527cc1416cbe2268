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

// TokensID is the ID of the tenant's second budget (Spec.Tokens).
var TokensID = shares.BudgetID(Tenant, "tokens")

// DefaultPods is the number of pods per region when Spec.Pods is 0.
const DefaultPods = 2

// TokensResult is a run's second budget: its budget, the units admitted
// and what the central limiter admitted of them in [Warmup, Duration),
// and the peaks of Σ enforced over regions (I4 for it), over the whole run.
type TokensResult struct {
	Rate                  float64
	Burst                 int64
	PerRequest            int64
	Admitted, Ideal       int64
	PeakRateSum           float64
	PeakBurstSum          int64
	AdmittedRun, Duration float64 // units admitted over the whole run, and its seconds (for R·t + B)
}

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

	// Tokens is what the run measured of the second budget (nil without
	// Spec.Tokens).
	Tokens *TokensResult
	// Users is what the run measured of the users' per-user limits (nil
	// without Spec.Users).
	Users *UsersResult
	// Cost is the leader's measured work: wall-clock time on the machine
	// that ran the simulation, the one part of a Result that is not
	// deterministic.
	Cost Cost

	// GrantChanges counts the grant changes the leaders made (Rebalance and
	// Grow). Nothing is written to etcd: each change reaches the pods of its
	// region in the answers to their next reports.
	GrantChanges int
	// SteadyChanges counts those made after the warm-up.
	SteadyChanges int
	// EntriesSent counts the grants the leaders' answers carried (each
	// change once per pod, more when a pod needs a full sync); FullSyncs the
	// answers that carried all of a region's grants.
	EntriesSent, FullSyncs int64
	// Terms counts the leadership terms (1 plus the failovers that took
	// place); LearningAnswers the answers a leader gave while learning
	// (no grants); Renewals those that renewed what a pod reported holding.
	Terms           int
	LearningAnswers int64
	Renewals        int64
	// Learned is how long each term after the first learned (the roster
	// may end it early: see shares.LeaderConfig.Roster).
	Learned []time.Duration
	// PeakRateSum and PeakBurstSum are the largest sums over regions of
	// the largest rate (and burst) any pod of the region enforced, at one
	// instant (I4 wants ≤ R and ≤ B).
	PeakRateSum  float64
	PeakBurstSum int64
	// PeakRateAt and PeakBurstAt are the first instants the peaks were
	// reached.
	PeakRateAt  time.Duration
	PeakBurstAt time.Duration
	// FloorSeconds counts the pod-seconds after the warm-up at whose end a
	// pod enforced no leased grant (its floor after its lease lapsed, or
	// nothing before it first synced).
	FloorSeconds int
	// LostReports counts reports lost (loss, partition, no leader).
	LostReports int

	// ShiftLoss is, per event, the units one central limiter admitted and
	// the regions did not in the ShiftWindow after it, in seconds of R
	// (0.5 means half a second of the whole budget went unused);
	// ShiftLossWorst the largest.
	ShiftLoss      []float64
	ShiftLossWorst float64
	// TimeTo90 is, per event, how long the region furthest below its fair
	// share after it took until its admitted rate over 300 ms reached 90%
	// of that share, at 100 ms resolution (0: no region was more than 5%
	// of R below; -1: not within ShiftWindow). TimeTo90Worst is the
	// largest (-1 if any never did).
	TimeTo90      []time.Duration
	TimeTo90Worst time.Duration

	Series []Sample
}

// GrantChangesPerMinute is SteadyChanges per simulated minute after the
// warm-up.
func (r *Result) GrantChangesPerMinute() float64 {
	return float64(r.SteadyChanges) / (r.Duration - r.Warmup).Minutes()
}

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

// Cost is the wall-clock time the leader's calls took in a run.
type Cost struct {
	// Rebalances counts the periodic rebalance passes; RebalanceTime is
	// their total time.
	Rebalances    int
	RebalanceTime time.Duration
	// Reports counts the reports the leader answered; ReportTime is the
	// total time of those calls.
	Reports    int
	ReportTime time.Duration
}

// PerRebalance is the mean time of one rebalance pass.
func (c Cost) PerRebalance() time.Duration {
	if c.Rebalances == 0 {
		return 0
	}
	return c.RebalanceTime / time.Duration(c.Rebalances)
}

// PerReport is the mean time the leader took to answer one report.
func (c Cost) PerReport() time.Duration {
	if c.Reports == 0 {
		return 0
	}
	return c.ReportTime / time.Duration(c.Reports)
}

type kind uint8

const (
	kArrival    kind = iota // a fresh arrival at region who
	kRetry                  // a retry at region who; n is the retry number, u the user
	kReport                 // pod who sends its periodic report
	kReportRecv             // the leader receives report n
	kAnswer                 // pod who receives answer n
	kRebalance              // the leader rebalances
	kLeaderDown             // the leader dies
	kLeaderUp               // failover n's new leader starts its term
	kSample                 // record a sample
	kExtra                  // pod who sends its report out of period (debounced)
	kFlush                  // the leader rebalances the steps a hold deferred
	kResend                 // pod who reports again after a report failed
)

type event struct {
	at   int64 // µs since the start
	seq  uint64
	kind kind
	who  int32 // region or pod index
	n    int32
	u    int32 // a retry's user (Spec.Users)
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
	pod    int
	sentAt int64
	rep    shares.PodReport
}

type sentAnswer struct {
	sentAt int64 // when the pod sent the report this answers
	ans    shares.Answer
	push   bool // pushed (shares.Leader.Push): answers no report
}

type enforced struct {
	rate   float64
	burst  int64
	leased bool
	limit  gcra.Limit
	ok     bool // limit valid (rate > 0, burst ≥ 1)
}

// podState is one regional pod: its side of the protocol, what it enforces
// and its counters since its last report.
type podState struct {
	id     string
	region int
	st     *shares.Pod
	eff    enforced

	tokEff  enforced // the tokens budget's (Spec.Tokens)
	tracker *shares.Tracker
	// lastExtra is when the last report out of period was sent (-1:
	// never); extraDue is set while one is scheduled (kExtra).
	lastExtra int64
	extraDue  bool
	extraAt   int64
	seq       uint64 // reports sent
	fails     int    // reports in a row that failed
	resendDue bool   // a kResend is scheduled
	// fsTokens, fsAt: the budget of early reports carrying a first sight
	// within ackGap (regional's: firstPerSec a second, firstBurst at once),
	// as of fsAt (-1: full).
	fsTokens float64
	fsAt     int64
}

// regionState is one region: its one GCRA key (the region's Redis), which
// every pod of the region decides against with the limit it enforces, its
// traffic, and its pods.
type regionState struct {
	name string
	key  gcra.State
	gen  *generator
	pods []int // indices into world.pods
	// own is the tenant's floor by the pods' own reading of the budget.
	own shares.Ceiling
	// tokKey, tokOwn: the tokens budget's key and floor (Spec.Tokens).
	tokKey gcra.State
	tokOwn shares.Ceiling

	// counters since the last sample
	secOffered, secAdmit float64
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

	rngNet, rngRetry, rngLB *rand.Rand

	regions []*regionState
	pods    []*podState

	leader      *shares.Leader
	stepChanges int64 // the leader's StepChanges counted so far
	flushAt     int64 // a kFlush is scheduled then (-1: none)
	term        uint64
	stats       shares.LeaderStats // of the terms that ended

	reports []sentReport
	answers []sentAnswer

	central    *central
	tok        *tokWorld  // Spec.Tokens; nil without
	users      *userWorld // Spec.Users; nil without
	fine       fine
	admissions []int64
	secIdeal   float64
	secAdmit   float64
	secOffered float64

	res *Result
	// termStart: when the current term started.
	termStart time.Time

	// trace, when set (by tests), is told of every message and change.
	trace func(t int64, format string, args ...any)
}

// tokWorld is the second budget's part of the world.
type tokWorld struct {
	budget  shares.Budget
	per     int64
	central *central
}

// budgets are the budgets the leader shares.
func (w *world) budgets() map[string]shares.Budget {
	m := map[string]shares.Budget{Tenant: w.budget}
	if w.tok != nil {
		m[TokensID] = w.tok.budget
	}
	return m
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
	w := &world{
		spec:     spec,
		budget:   b,
		cfg:      cfg,
		off:      epoch.UnixMicro(),
		end:      spec.Duration.Microseconds(),
		warm:     spec.Warmup.Microseconds(),
		rngNet:   rand.New(rand.NewPCG(seed, 0x6e6574)),
		rngRetry: rand.New(rand.NewPCG(seed, 0x7265747279)),
		rngLB:    rand.New(rand.NewPCG(seed, 0x6c62)),
		flushAt:  -1,
		res: &Result{
			Scenario: spec.Name, Mode: mode, Seed: seed,
			Regions: slices.Clone(spec.Regions), Rate: b.Rate, Burst: b.Burst,
			Duration: spec.Duration, Warmup: spec.Warmup,
		},
	}
	var err error
	w.central, err = newCentral(b.Rate, b.Burst, w.off)
	if err != nil {
		return nil, fmt.Errorf("central limiter: %w", err)
	}
	if tk := spec.Tokens; tk != nil {
		tb := tk.Budget
		tb.Mode, tb.Home = mode, b.Home
		c, err := newCentral(tb.Rate, tb.Burst, w.off)
		if err != nil {
			return nil, fmt.Errorf("central tokens limiter: %w", err)
		}
		w.tok = &tokWorld{budget: tb, per: tk.PerRequest, central: c}
		w.res.Tokens = &TokensResult{Rate: tb.Rate, Burst: tb.Burst, PerRequest: tk.PerRequest, Duration: spec.Duration.Seconds()}
	}
	if u := spec.Users; u != nil {
		if w.users, err = newUserWorld(w, u, mode, seed); err != nil {
			return nil, fmt.Errorf("users: %w", err)
		}
	}
	pods := spec.pods()
	w.fine.region = make([][]float64, len(spec.Regions))
	for i, name := range spec.Regions {
		fr, fb := shares.Floor(b, cfg.Regions, name)
		rs := &regionState{name: name, own: shares.Ceiling{Rate: fr, Burst: fb}}
		if w.tok != nil {
			tr, tb := shares.Floor(w.tok.budget, cfg.Regions, name)
			rs.tokOwn = shares.Ceiling{Rate: tr, Burst: tb}
		}
		if tr, ok := spec.Traffic[name]; ok {
			rs.gen = newGenerator(tr, rand.New(rand.NewPCG(seed, uint64(i)+1)))
		}
		for k := range pods {
			tracker, err := shares.NewTracker(w.at(0), shares.TrackerConfig{})
			if err != nil {
				return nil, err
			}
			rs.pods = append(rs.pods, len(w.pods))
			w.pods = append(w.pods, &podState{
				id: fmt.Sprintf("%s-%d", name, k), region: i,
				st: shares.NewPod(name, spec.Drift), lastExtra: -1, fsAt: -1, tracker: tracker,
			})
		}
		w.regions = append(w.regions, rs)
	}
	if w.users != nil {
		w.users.addPods(len(w.pods))
	}
	// The first term started one learning period before the run: the
	// scenarios measure a running system, not the cold start of its
	// coordinator, and no older term's lease can be outstanding at zero.
	if err := w.startTerm(-spec.Lease.Microseconds(), spec.Lease); err != nil {
		return nil, err
	}
	return w, nil
}

// startTerm makes a new leader whose term starts at t and learns for
// learning.
func (w *world) startTerm(t int64, learning time.Duration) error {
	if w.leader != nil {
		w.endTerm()
	}
	w.term++
	cfg := shares.LeaderConfig{Config: w.cfg, Term: w.term, Learning: learning, StepHold: shares.DefaultStepHold}
	if !w.spec.NoRoster && w.term > 1 {
		// Every pod: each one reported to an older term.
		cfg.RosterKnown = true
		for _, ps := range w.pods {
			cfg.Roster = append(cfg.Roster, shares.PodKey{Region: w.regions[ps.region].name, Pod: ps.id})
		}
	}
	l, err := shares.NewLeader(w.at(t), cfg)
	if err != nil {
		return fmt.Errorf("leader term %d: %w", w.term, err)
	}
	// A coordinator hands a new leader the budgets at once (a learning
	// answer renews only grants whose budget it knows).
	l.SetBudgets(w.budgets())
	if w.users != nil {
		l.SetNamedDefault(UserLimit+"=", w.users.classDefault())
	}
	w.leader, w.stepChanges, w.termStart = l, 0, w.at(t)
	w.res.Terms++
	w.tracef(t, "term %d starts, learning for %v", w.term, learning)
	return nil
}

// endTerm discards the leader, keeping its counters.
func (w *world) endTerm() {
	if w.leader == nil {
		return
	}
	s := w.leader.Stats()
	if w.term > 1 {
		w.res.Learned = append(w.res.Learned, w.leader.LearningUntil().Sub(w.termStart))
	}
	w.stats.Reports += s.Reports
	w.stats.Learning += s.Learning
	w.stats.Renewed += s.Renewed
	w.stats.FullSyncs += s.FullSyncs
	w.stats.EntriesSent += s.EntriesSent
	w.leader = nil
}

func (w *world) at(t int64) time.Time { return time.UnixMicro(w.off + t) }

func (w *world) schedule(at int64, k kind, who, n int) {
	w.seq++
	w.q.push(event{at: at, seq: w.seq, kind: k, who: int32(who), n: int32(n)})
}

// scheduleRetry schedules retry n of user u's request at region i.
func (w *world) scheduleRetry(at int64, i, n, u int) {
	w.seq++
	w.q.push(event{at: at, seq: w.seq, kind: kRetry, who: int32(i), n: int32(n), u: int32(u)})
}

func (w *world) delay(j Jitter) int64 {
	lo, hi := j.Min.Microseconds(), j.Max.Microseconds()
	if hi <= lo {
		return lo
	}
	return lo + w.rngNet.Int64N(hi-lo+1)
}

func (w *world) partitioned(region int, t int64) bool {
	name := w.regions[region].name
	for _, p := range w.spec.Partitions {
		if p.Region == name && t >= p.From.Microseconds() && t < p.To.Microseconds() {
			return true
		}
	}
	return false
}

func (w *world) run() error {
	p := w.spec.Interval.Microseconds()
	for i, rs := range w.regions {
		if rs.gen != nil {
			if t, ok := rs.gen.next(w.end); ok {
				w.schedule(t, kArrival, i, 0)
			}
		}
	}
	for k := range w.pods {
		// Each pod reports on its own phase within the interval.
		w.schedule(w.rngNet.Int64N(p), kReport, k, 0)
	}
	w.schedule(p, kRebalance, 0, 0)
	for n, f := range w.spec.Failovers {
		w.schedule(f.At.Microseconds(), kLeaderDown, 0, n)
		w.schedule((f.At + f.Gap).Microseconds(), kLeaderUp, 0, n)
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
		i := int(e.who)
		switch e.kind {
		case kArrival:
			w.arrive(i, e.at, 0, -1)
			if t, ok := w.regions[i].gen.next(w.end); ok {
				w.schedule(t, kArrival, i, 0)
			}
		case kRetry:
			w.arrive(i, e.at, int(e.n), int(e.u))
		case kReport:
			w.sendReport(i, e.at, false)
			w.schedule(e.at+p, kReport, i, 0)
		case kExtra:
			if ps := w.pods[i]; ps.extraDue && ps.extraAt == e.at {
				ps.extraDue = false
				w.sendReport(i, e.at, true)
			}
		case kResend:
			// The leader may have lost this pod's rates: all of them.
			w.pods[i].resendDue = false
			w.sendReport(i, e.at, false)
		case kFlush:
			w.flushAt = -1
			if w.leader != nil {
				w.changed(e.at, w.leader.FlushSteps(w.at(e.at)))
				w.nudge(e.at, -1)
				w.scheduleFlush()
			}

		case kReportRecv:
			if err := w.receiveReport(int(e.n), e.at); err != nil {
				return err
			}
		case kAnswer:
			w.answered(i, int(e.n), e.at)
		case kRebalance:
			w.rebalance(e.at)
			w.schedule(e.at+p, kRebalance, 0, 0)
		case kLeaderDown:
			w.tracef(e.at, "leader of term %d dies", w.term)
			w.endTerm()
		case kLeaderUp:
			f := w.spec.Failovers[e.n]
			if err := w.startTerm(e.at, w.spec.Lease+f.sessionTTL()); err != nil {
				return err
			}
		case kSample:
			w.sample(e.at)
			if e.at < w.end {
				w.schedule(e.at+sampleEvery.Microseconds(), kSample, 0, 0)
			}
		}
	}
	return nil
}

// enforce refreshes what pod k enforces at t.
func (w *world) enforce(k int, t int64) {
	ps := w.pods[k]
	refresh(&ps.eff, ps.st, w.at(t), Tenant, w.regions[ps.region].own)
	if w.tok != nil {
		refresh(&ps.tokEff, ps.st, w.at(t), TokensID, w.regions[ps.region].tokOwn)
	}
}

// refresh sets e to what st enforces for budget id at now.
func refresh(e *enforced, st *shares.Pod, now time.Time, id string, own shares.Ceiling) {
	rate, burst, leased := st.Effective(now, id, own)
	if rate == e.rate && burst == e.burst {
		e.leased = leased
		return
	}
	*e = enforced{rate: rate, burst: burst, leased: leased}
	if rate > 0 && burst >= 1 {
		if l, err := gcra.FromPerSecond(rate, burst); err == nil {
			e.limit, e.ok = l, true
		}
	}
}

// refreshAll refreshes every pod at t and checks I4.
func (w *world) refreshAll(t int64) {
	for k := range w.pods {
		w.enforce(k, t)
	}
	w.checkI4(t, true)
	w.checkTokI4()
}

// checkTokI4 records the tokens budget's peak Σ over regions of the
// largest rate (and burst) any pod of the region enforces, by the pods'
// last refreshed values.
func (w *world) checkTokI4() {
	if w.tok == nil {
		return
	}
	var rate float64
	var burst int64
	for _, rs := range w.regions {
		var r float64
		var b int64
		for _, k := range rs.pods {
			r, b = max(r, w.pods[k].tokEff.rate), max(b, w.pods[k].tokEff.burst)
		}
		rate += r
		burst += b
	}
	tr := w.res.Tokens
	tr.PeakRateSum, tr.PeakBurstSum = max(tr.PeakRateSum, rate), max(tr.PeakBurstSum, burst)
}

// regionMax returns the largest rate and burst any pod of rs enforces (by
// its last refreshed value): what the region's Redis path may enforce.
func (w *world) regionMax(rs *regionState) (float64, int64) {
	var rate float64
	var burst int64
	for _, k := range rs.pods {
		rate = max(rate, w.pods[k].eff.rate)
		burst = max(burst, w.pods[k].eff.burst)
	}
	return rate, burst
}

// checkI4 records the sum over regions of the largest rate (and burst) any
// pod of the region enforces. The sum uses each pod's last refreshed value;
// when it exceeds the largest seen so far every pod is refreshed at t
// first, so the peak is exact.
func (w *world) checkI4(t int64, fresh bool) {
	var rate float64
	var burst int64
	for _, rs := range w.regions {
		r, b := w.regionMax(rs)
		rate += r
		burst += b
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
		for _, ps := range w.pods {
			parts = append(parts, fmt.Sprintf("%s %.2f/%d leased=%v", ps.id, ps.eff.rate, ps.eff.burst, ps.eff.leased))
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

// arrive decides one unit arriving at region i at t: the region's load
// balancer hands it to one of its pods, which decides it against the
// region's key with the limit it enforces. u is a retry's user (Spec.Users;
// a fresh arrival, -1, draws one).
func (w *world) arrive(i int, t int64, retry, u int) {
	rs := w.regions[i]
	k := rs.pods[w.rngLB.IntN(len(rs.pods))]
	ps := w.pods[k]
	inWin := t >= w.warm
	rs.secOffered++
	w.secOffered++
	if w.users != nil && u < 0 {
		u = w.users.pick()
	}
	if w.centralAdmit(t, u) {
		bump(&w.fine.ideal, bucketOf(t))
		w.secIdeal++
		if inWin {
			w.res.Ideal++
		}
	}
	w.enforce(k, t)
	w.checkI4(t, false)
	w.checkTokI4()
	if w.users != nil {
		w.meetUser(u, t)
	}
	allowed := false
	var retryAfter time.Duration
	if ps.eff.ok {
		ns, r, _ := gcra.DecideMicros(rs.key, w.off+t, ps.eff.limit, 1)
		allowed, retryAfter = r.Allowed, r.RetryAfter
		if tk := w.tok; tk != nil {
			// One composite decision: both keys, or neither.
			allowed = allowed && ps.tokEff.ok
			if allowed {
				tns, tr, _ := gcra.DecideMicros(rs.tokKey, w.off+t, ps.tokEff.limit, tk.per)
				if allowed = tr.Allowed; allowed {
					rs.tokKey = tns
				} else {
					retryAfter = tr.RetryAfter
				}
			} else if !ps.tokEff.ok {
				retryAfter = time.Second
			}
		}
		var uns gcra.State
		if w.users != nil && allowed {
			var ra time.Duration
			if uns, allowed, ra = w.decideUser(i, k, u, t); !allowed {
				retryAfter = ra
			}
		}
		if allowed || (w.tok == nil && w.users == nil) {
			rs.key = ns
		}
		if allowed && w.users != nil {
			w.users.keys[i][u] = uns
		}
	}
	if inWin {
		w.res.Offered++
		if retry > 0 {
			w.res.Retries++
		}
	}
	adm := 0.0
	if allowed {
		adm = 1
	}
	stepped := ps.tracker.Add(w.at(t), Tenant, 1, adm)
	if tk := w.tok; tk != nil {
		stepped = ps.tracker.AddDecisions(w.at(t), TokensID, float64(tk.per), adm*float64(tk.per), 1) || stepped
		if allowed {
			w.res.Tokens.AdmittedRun += float64(tk.per)
			if inWin {
				w.res.Tokens.Admitted += tk.per
			}
		}
	}
	if uw := w.users; uw != nil {
		if inWin {
			uw.offered[u]++
			if !allowed {
				uw.denied[u]++
			}
		}
		stepped = ps.tracker.Add(w.at(t), uw.ids[u], 1, adm) || stepped
		if allowed {
			uw.admitUser(u, t)
			if inWin && u == 0 {
				uw.res.HeavyAdmitted++
			}
		}
	}
	if stepped && !w.spec.NoSteps {
		w.extraReport(k, t, false)
	}
	if allowed {
		bump(&w.fine.admit, bucketOf(t))
		bump(&w.fine.region[i], bucketOf(t))
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
			w.scheduleRetry(at, i, retry+1, u)
		}
	}
}

// centralAdmit is the central limiter's decision of one arrival at t (of
// user u with Spec.Users): of every budget at once with Spec.Tokens or
// Spec.Users.
func (w *world) centralAdmit(t int64, u int) bool {
	tk, uw := w.tok, w.users
	if tk == nil && uw == nil {
		return w.central.admit(t)
	}
	rs, ok := w.central.try(t, 1)
	var ts, us gcra.State
	if ok && tk != nil {
		ts, ok = tk.central.try(t, tk.per)
	}
	if ok && uw != nil {
		us, ok = uw.userCentral(u, t, w.off)
		if !ok && t >= w.warm {
			uw.bound[u] = true
		}
	}
	if !ok {
		return false
	}
	w.central.s = rs
	if tk != nil {
		tk.central.s = ts
		if t >= w.warm {
			w.res.Tokens.Ideal += tk.per
		}
	}
	if uw != nil {
		uw.central[u] = us
		if t >= w.warm && u == 0 {
			uw.res.HeavyIdeal++
		}
	}
	return true
}

// sendReport sends pod k's report at t: its periodic one, or with extra an
// early one (the tenants whose rates stepped, if any; else none, as an
// acknowledgement or an answer to a nudge).
func (w *world) sendReport(k int, t int64, extra bool) {
	ps := w.pods[k]
	rs := w.regions[ps.region]
	term, applied := ps.st.State()
	var usage map[string]shares.Usage
	var interval time.Duration
	if extra {
		ps.lastExtra = t
		if ps.tracker.FirstSights() > 0 {
			ps.fsTokens = max(0, ps.firstsLeft(t)-1)
		}
		usage, interval = ps.tracker.TakeSteps(w.at(t))
		interval = max(interval, time.Millisecond)
	} else {
		usage, interval = ps.tracker.TakeAll(w.at(t))
	}
	ps.seq++
	rep := shares.PodReport{
		Region:   rs.name,
		Pod:      ps.id,
		Seq:      ps.seq,
		Term:     term,
		Applied:  applied,
		Interval: interval,
		Usage:    usage,
		Partial:  extra,
		LivePods: len(rs.pods),
		Held:     ps.st.Held(),
	}
	rep.Heard, rep.RenewedBy, rep.Leased = ps.st.Standing(w.at(t))
	if w.partitioned(ps.region, t) || w.rngNet.Float64() < w.spec.Network.LossReports {
		w.res.LostReports++
		w.resend(k, t)
		return
	}
	if w.users != nil {
		w.users.res.Reports++
		w.users.res.UsageEntries += int64(len(usage))
	}
	w.reports = append(w.reports, sentReport{pod: k, sentAt: t, rep: rep})
	w.schedule(t+w.delay(w.spec.Network.Report), kReportRecv, 0, len(w.reports)-1)
}

// resendAfter is how long a pod waits to report again after a report
// failed (it notices within its report timeout), doubling with each
// failure in a row up to resendMax (or the interval): a pod cut off finds
// out within half a second that it can reach the coordinator again.
const (
	resendAfter = 250 * time.Millisecond
	resendMax   = 500 * time.Millisecond
)

// resend has pod k report again after its report at t failed.
func (w *world) resend(k int, t int64) {
	ps := w.pods[k]
	if w.spec.PeriodicReports || ps.resendDue {
		return
	}
	d := min(resendAfter<<min(ps.fails, 10), resendMax, w.spec.Interval)
	ps.fails++
	ps.resendDue = true
	w.schedule(t+d.Microseconds(), kResend, k, 0)
}

// Least times between two reports of a pod out of its period: to say a
// step (stepGap), and to acknowledge a shrink or say a tenant's first
// sight (ackGap; first sights at most firstPerSec a second, firstBurst at
// once, as regional's pods).
const (
	stepGap     = 100 * time.Millisecond
	ackGap      = 20 * time.Millisecond
	firstPerSec = 10
	firstBurst  = 5
)

// firstsLeft refills pod ps's first-sight budget to t and returns it.
func (ps *podState) firstsLeft(t int64) float64 {
	if ps.fsAt < 0 {
		ps.fsTokens = firstBurst
	} else {
		ps.fsTokens = min(firstBurst, ps.fsTokens+float64(t-ps.fsAt)/1e6*firstPerSec)
	}
	ps.fsAt = t
	return ps.fsTokens
}

// extraReport has pod k report at t, out of its period, because a tenant's
// rate stepped or (ack) it applied a shrink a grow elsewhere may wait for:
// at once, or when the gap after its last such report ends.
func (w *world) extraReport(k int, t int64, ack bool) {
	ps := w.pods[k]
	if w.spec.PeriodicReports {
		return
	}
	gap := stepGap
	if ack || ps.tracker.FirstSights() > 0 && ps.firstsLeft(t) >= 1 {
		// (A first sight asks for the tenant's grant: the pod enforces
		// its cold floor until the answer; ten such a second at most.)
		gap = ackGap
	}
	at := t
	if ps.lastExtra >= 0 {
		at = max(t, ps.lastExtra+gap.Microseconds())
	}
	if ps.extraDue && ps.extraAt <= at {
		return // one is on its way
	}
	if at == t {
		ps.extraDue = false
		w.sendReport(k, t, true)
		return
	}
	ps.extraDue, ps.extraAt = true, at
	w.schedule(at, kExtra, k, 0)
}

// scheduleFlush schedules the leader's FlushSteps when a deferred step is
// due.
func (w *world) scheduleFlush() {
	if w.leader == nil {
		return
	}
	due, any := w.leader.StepsDue()
	if !any {
		return
	}
	at := max(due.UnixMicro()-w.off, 0)
	if w.flushAt >= 0 && w.flushAt <= at {
		return
	}
	w.flushAt = at
	w.schedule(at, kFlush, 0, 0)
}

// nudge pushes to the pods of the regions whose grants the leader changed
// at t what changed (shares.Leader.Push), but not to pod except, whose
// answer carries it.
func (w *world) nudge(t int64, except int) {
	if w.leader == nil {
		return
	}
	regions := w.leader.Nudges()
	if w.spec.NoNudges {
		return
	}
	for _, name := range regions {
		for i, rs := range w.regions {
			if rs.name != name || w.partitioned(i, t) {
				continue
			}
			for _, k := range rs.pods {
				if k == except {
					continue
				}
				if ans, ok := w.leader.Push(w.at(t), name, w.pods[k].id); ok {
					w.answers = append(w.answers, sentAnswer{sentAt: t, ans: ans, push: true})
					w.schedule(t+w.delay(w.spec.Network.Renewal), kAnswer, k, len(w.answers)-1)
				}
			}
		}
	}
}

func (w *world) receiveReport(n int, t int64) error {
	sr := w.reports[n]
	ps := w.pods[sr.pod]
	if w.partitioned(ps.region, t) || w.leader == nil {
		w.res.LostReports++
		// The pod sees the call fail (at once here; within its report
		// timeout in a deployment): its next report carries what it holds.
		ps.st.Unanswered()
		w.resend(sr.pod, t)
		return nil
	}
	start := time.Now()
	ans, err := w.leader.Report(w.at(t), sr.rep)
	w.res.Cost.ReportTime += time.Since(start)
	w.res.Cost.Reports++
	w.tracef(t, "leader got %s report sent %dµs t%d/e%d usage %+v", sr.rep.Pod, sr.sentAt, sr.rep.Term, sr.rep.Applied, sr.rep.Usage[Tenant])
	if err != nil {
		return fmt.Errorf("report from %s at %v: %w", sr.rep.Pod, time.Duration(t)*time.Microsecond, err)
	}
	w.answers = append(w.answers, sentAnswer{sentAt: sr.sentAt, ans: ans})
	w.schedule(t+w.delay(w.spec.Network.Renewal), kAnswer, sr.pod, len(w.answers)-1)
	for _, c := range w.leader.ReportChanges() {
		w.tracef(t, "leader changed %s/%s to %+v (step)", c.Tenant, c.Region, c.Grant)
	}
	if s := w.leader.Stats(); s.StepChanges != w.stepChanges {
		w.res.GrantChanges += int(s.StepChanges - w.stepChanges)
		if t >= w.warm {
			w.res.SteadyChanges += int(s.StepChanges - w.stepChanges)
		}
		w.stepChanges = s.StepChanges
	}
	if !w.spec.TickOnly && w.leader.Growable() {
		// The report acknowledged a shrink that a deferred grow waits for:
		// grow now rather than at the next rebalance.
		w.changed(t, w.leader.Grow(w.at(t)))
	}
	if w.term > 1 && w.leader.RebalanceDue(w.at(t)) {
		// The roster ended learning early, or a region's older grants
		// stopped counting: rebalance now, not at the next tick (as the
		// coordinator does; the run's first term, which stands for a
		// system already running, keeps its first tick).
		w.tracef(t, "rebalance due (learning ended %v after the term started)", w.leader.Stats().EarlyEnd)
		w.rebalance(t)
	}
	w.nudge(t, sr.pod)
	w.scheduleFlush()
	return nil
}

// answered applies answer n at pod k at t (lost while the pod's region is
// cut off).
func (w *world) answered(k, n int, t int64) {
	ps := w.pods[k]
	if w.partitioned(ps.region, t) {
		return
	}
	sa := w.answers[n]
	if !sa.push {
		ps.fails = 0
	}
	shrunk := false
	for _, e := range sa.ans.Entries {
		if g, ok := ps.st.Grant(e.Tenant); ok && (e.Grant.Rate < g.Rate || e.Grant.Burst < g.Burst) {
			shrunk = true
		}
	}
	own := w.regions[ps.region].own
	_, renewedBefore, _ := ps.st.Standing(w.at(t))
	// The budgets this answer may grant that the pod held no grant of:
	// their keys, spent under the cold floor, are restated under the grant
	// as it applies (as regional's pods do).
	var cold []string
	if !sa.ans.Learning {
		for _, e := range sa.ans.Entries {
			if _, ok := ps.st.Grant(e.Tenant); !ok && !e.Grant.Dropped {
				cold = append(cold, e.Tenant)
			}
		}
	}
	if sa.push && sa.ans.ReportNow {
		w.extraReport(k, t, true)
		return
	}
	if sa.push {
		ps.st.Pushed(w.at(t), sa.ans, func(string) shares.Ceiling { return own })
	} else {
		ps.st.Answered(w.at(t), w.at(sa.sentAt), sa.ans, func(string) shares.Ceiling { return own })
	}
	w.tracef(t, "%s answered (sent %dµs): term %d learning=%v full=%v epoch %d entries %+v",
		ps.id, sa.sentAt, sa.ans.Term, sa.ans.Learning, sa.ans.Full, sa.ans.Epoch, sa.ans.Entries)
	w.refreshAll(t)
	w.checkUserEntries(sa.ans.Entries, t)
	w.restateCold(k, cold, t)
	if _, renewed, _ := ps.st.Standing(w.at(t)); renewed > renewedBefore {
		shrunk = true // (the leader learns at once that the renewal applied)
	}
	if shrunk {
		w.extraReport(k, t, true)
	}
}

// restateCold restates, under what pod k now enforces, its region's keys
// of the budgets in ids that it held no grant of before an answer at t and
// holds one of now (gcra.RestateMicros: nothing charged, nothing minted).
func (w *world) restateCold(k int, ids []string, t int64) {
	ps := w.pods[k]
	rs := w.regions[ps.region]
	for _, id := range ids {
		if _, ok := ps.st.Grant(id); !ok {
			continue
		}
		switch {
		case id == Tenant && ps.eff.ok:
			rs.key, _ = gcra.RestateMicros(rs.key, w.off+t, ps.eff.limit)
		case id == TokensID && w.tok != nil && ps.tokEff.ok:
			rs.tokKey, _ = gcra.RestateMicros(rs.tokKey, w.off+t, ps.tokEff.limit)
		case w.users != nil:
			if u, ok := w.users.index[id]; ok {
				if e := w.enforceUser(k, u, t); e.ok {
					w.users.keys[ps.region][u], _ = gcra.RestateMicros(w.users.keys[ps.region][u], w.off+t, e.limit)
				}
			}
		}
	}
}

func (w *world) rebalance(t int64) {
	if w.leader == nil {
		return
	}
	w.leader.SetBudgets(w.budgets())
	start := time.Now()
	changes := w.leader.Rebalance(w.at(t))
	w.res.Cost.RebalanceTime += time.Since(start)
	w.res.Cost.Rebalances++
	w.observeIDs(t)
	w.changed(t, changes)
	w.nudge(t, -1)
}

// changed counts the grant changes the leader made at t; they reach the
// pods in the answers to their next reports.
func (w *world) changed(t int64, changes []shares.Change) {
	if w.trace != nil && len(changes) > 0 && w.leader != nil {
		w.tracef(t, "demand %v", w.leader.Allocator().Demand(Tenant))
	}
	w.res.GrantChanges += len(changes)
	if t >= w.warm {
		w.res.SteadyChanges += len(changes)
	}
	for _, c := range changes {
		w.tracef(t, "leader changed %s/%s to %+v", c.Tenant, c.Region, c.Grant)
	}
}

func (w *world) sample(t int64) {
	w.refreshAll(t)
	w.checkUsers(t)
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
		rate, burst := w.regionMax(rs)
		leased := 0
		for _, k := range rs.pods {
			if w.pods[k].eff.leased {
				leased++
			} else if t > w.warm {
				w.res.FloorSeconds++
			}
		}
		s.Regions[i] = RegionSample{
			Offered: rs.secOffered, Admitted: rs.secAdmit,
			Grant: rate, Burst: burst, Leased: leased == len(rs.pods), LeasedPods: leased,
			Share: rs.secOffered * scale,
		}
		rs.secOffered, rs.secAdmit = 0, 0
	}
	w.secOffered, w.secAdmit, w.secIdeal = 0, 0, 0
	w.res.Series = append(w.res.Series, s)
}

func (w *world) finish() {
	w.endTerm()
	r := w.res
	r.EntriesSent, r.FullSyncs, r.LearningAnswers, r.Renewals = w.stats.EntriesSent, w.stats.FullSyncs, w.stats.Learning, w.stats.Renewed
	if r.Ideal > 0 {
		r.Utilisation = float64(r.Admitted) / float64(r.Ideal)
	}
	r.Excess, r.OverAdmission = overAdmission(w.admissions, r.Rate, r.Burst)
	r.Events = slices.Clone(w.spec.Events)
	if len(r.Events) == 0 {
		r.Events = []time.Duration{0}
	}
	w.eventMeasures()
	w.finishUsers()
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
