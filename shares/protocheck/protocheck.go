package protocheck

import (
	"container/heap"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/allot-dev/allot/shares"
)

// Options shapes a run. The zero value of a field takes its default.
type Options struct {
	// Duration is the simulated span of a run. Default 120s.
	Duration time.Duration
	// Interval is the rebalance interval P. Default 1s.
	Interval time.Duration
	// ReportEvery is each pod's report interval. Default 1s.
	ReportEvery time.Duration
	// Lease is L. Default 5s.
	Lease time.Duration
	// SessionTTL is the election session TTL. Default 2s.
	SessionTTL time.Duration
	// Drift is the pods' lease margin. Default 100ms.
	Drift time.Duration
	// PodsPerRegion is how many pods each region starts with. Default 2.
	PodsPerRegion int
	// Faults scales how often faults are drawn (1: default, 0: none).
	Faults float64
	// Allowance is D, how long a budget decrease may take to reach every
	// pod. Default Lease + SessionTTL + 2·Interval + 2·ReportEvery + 1s.
	Allowance time.Duration
	// Mutate, when set, is applied to every leader's config (tests use it
	// to revert a rule and show the checker finds the hole).
	Mutate func(*shares.LeaderConfig)
	// NoTrace skips recording the trace (faster for many seeds).
	NoTrace bool
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Duration, 120*time.Second)
	def(&o.Interval, time.Second)
	def(&o.ReportEvery, time.Second)
	def(&o.Lease, 5*time.Second)
	def(&o.SessionTTL, 2*time.Second)
	def(&o.Drift, 100*time.Millisecond)
	if o.PodsPerRegion == 0 {
		o.PodsPerRegion = 2
	}
	if o.Faults == 0 {
		o.Faults = 1
	}
	if o.Faults < 0 {
		o.Faults = 0
	}
	def(&o.Allowance, o.Lease+o.SessionTTL+2*o.Interval+2*o.ReportEvery+time.Second)
	return o
}

// Violation is a broken invariant.
type Violation struct {
	At     time.Duration
	Tenant string
	What   string
}

func (v Violation) String() string {
	return fmt.Sprintf("t=%v tenant %s: %s", v.At, v.Tenant, v.What)
}

// Result is one run.
type Result struct {
	Seed      uint64
	Events    int
	Violation *Violation
	// Trace is every event up to the violation (or the whole run).
	Trace []string
	// Counts of what happened, to show the run exercised the faults.
	Reports, Answers, Rejected, Terms, Faults int
	// Forgotten counts tenants the leaders forgot (idle, without a budget).
	Forgotten int
	// Renewals counts learning answers that renewed what a pod held.
	Renewals int
	// Pushes counts the answers leaders pushed without a report; Steps the
	// grant changes rebalancing on a step made (as a report arrived, or
	// when a hold ended).
	Pushes, Steps int
	// EarlyEnds counts the terms whose learning the roster ended early.
	EarlyEnds int
	// Admitted counts the units admitted per tenant (demand met within
	// what pods enforced), and Ideal what one limiter would have admitted.
	PeakRatio float64 // largest Σ/bound seen (≤ 1 when safe)
}

// tenants: two with budgets of their own, one on the default tier, and
// c's named budget "tok" (shares.BudgetID) on the tier's default of it.
var tenantNames = []string{"a", "b", "c", "c/tok"}

// coldNames are tenants no pod ever sees, checked only: every leased pod
// enforces its region's cold floor for them (of the default tier, and of
// its "tok"), so I4 holds for the cold floors themselves at every event.
var coldNames = []string{"z", "z/tok"}

const (
	regionPoolSize = 3
	maxPodsRegion  = 4
)

type snapshot struct {
	at      time.Duration
	regions []string
	budgets map[string]shares.Budget // a, b
	deflt   shares.Budget            // c and every tenant without a budget
	named   shares.Budget            // c/tok: every named budget "tok" without one
}

func (s *snapshot) budget(t string) shares.Budget {
	if b, ok := s.budgets[t]; ok {
		return b
	}
	if _, name := shares.SplitBudgetID(t); name != "" {
		return s.named
	}
	return s.deflt
}

type event struct {
	at  time.Duration
	seq int
	fn  func()
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type coord struct {
	id      int
	alive   bool
	etcdCut bool
	view    int // snapshot index seen
	lead    *shares.Leader
	leading bool          // holds the election in etcd
	stopAt  time.Duration // when a deposed leader notices (-1: not deposed)
	regions []string      // the regions of its term
	elected uint64        // its election's number
	sub     uint64        // terms it started in that election
	// roster: the pods it knows are on the roster (read when elected,
	// plus its own writes since).
	roster map[shares.PodKey]bool
}

type pod struct {
	id        string
	region    string
	alive     bool
	st        *shares.Pod
	view      int
	etcdCut   bool
	coordCut  bool
	leader    int // coordinator it reports to (-1: unknown)
	lastSent  time.Duration
	promptAt  time.Duration
	promptSet bool
	seq       uint64
	resendDue bool
	// blind: cut from etcd while no coordinator leads, the pod can learn
	// of a budget change from nobody: the budget it reads counts in the
	// bound (see bound) until D after it regains a way (blindUntil).
	blind      bool
	blindUntil time.Duration
}

type world struct {
	opt    Options
	rng    *rand.Rand
	t0     time.Time
	now    time.Duration
	q      queue
	seq    int
	events int
	pool   []string
	snaps  []snapshot
	coords []*coord
	term   uint64
	elect  int // the coordinator holding the election (-1: none)
	pods   []*pod
	podN   int
	redis  map[string]bool // down
	demand map[string]float64
	idle   time.Duration // the leaders' IdleTimeout
	hold   time.Duration // the leaders' StepHold
	// roster: the pods any leader may have leased, as etcd holds them
	// (nil: the leaders keep no roster and always learn for the full
	// period). A leader adds a pod before it answers it, a write that
	// fails unless it holds the election, and drops those it finds
	// prunable.
	roster map[shares.PodKey]bool
	// leaders: every term's, to count early ends.
	leaders []*shares.Leader
	res     *Result
	trace   []string
	stop    bool
}

// Run runs one seed.
func Run(seed uint64, opt Options) Result {
	opt = opt.withDefaults()
	w := &world{
		opt:    opt,
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		t0:     time.Unix(1_700_000_000, 0),
		pool:   []string{"r0", "r1", "r2"},
		redis:  map[string]bool{},
		demand: map[string]float64{},
		elect:  -1,
		res:    &Result{Seed: seed},
	}
	w.setup()
	for w.q.Len() > 0 && !w.stop {
		e := heap.Pop(&w.q).(*event)
		if e.at > opt.Duration {
			break
		}
		w.now = e.at
		e.fn()
		w.events++
		w.check()
	}
	w.res.Events = w.events
	w.res.Trace = w.trace
	for _, l := range w.leaders {
		if l.Stats().EarlyEnd > 0 {
			w.res.EarlyEnds++
		}
	}
	return *w.res
}

func (w *world) at(d time.Duration, fn func()) {
	w.seq++
	heap.Push(&w.q, &event{at: w.now + d, seq: w.seq, fn: fn})
}

func (w *world) logf(format string, args ...any) {
	if w.opt.NoTrace {
		return
	}
	w.trace = append(w.trace, fmt.Sprintf("%8.3fs ", w.now.Seconds())+fmt.Sprintf(format, args...))
}

func (w *world) clock() time.Time { return w.t0.Add(w.now) }

func (w *world) dur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

func (w *world) chance(p float64) bool { return w.rng.Float64() < p*w.opt.Faults }

func (w *world) setup() {
	regions := slices.Clone(w.pool)
	switch w.rng.IntN(6) {
	case 0, 1:
		regions = regions[:2]
	case 2:
		regions = regions[:1]
	}
	s := snapshot{regions: regions, budgets: map[string]shares.Budget{
		"a": {Rate: 300, Burst: 60},
		"b": {Rate: 100, Burst: 20, Mode: shares.ModePinned, Home: regions[0]},
	}, deflt: shares.Budget{Rate: 50, Burst: 10}, named: shares.Budget{Rate: 500, Burst: 50}}
	if w.rng.IntN(2) == 0 {
		s.budgets["b"] = shares.Budget{Rate: 100, Burst: 20}
	}
	w.snaps = append(w.snaps, s)
	// Idle tenants without a budget of their own are forgotten after this
	// long (c, or b once its record is deleted, when their demand stops).
	w.idle = []time.Duration{0, 3 * time.Second, 6 * time.Second}[w.rng.IntN(3)]
	w.hold = []time.Duration{0, shares.DefaultStepHold, 400 * time.Millisecond}[w.rng.IntN(3)]
	if w.rng.IntN(4) != 0 {
		w.roster = map[shares.PodKey]bool{}
	}
	for i := range 2 {
		w.coords = append(w.coords, &coord{id: i, alive: true, stopAt: -1})
	}
	for _, r := range w.pool {
		for range w.opt.PodsPerRegion {
			w.startPod(r, w.dur(0, w.opt.ReportEvery))
		}
	}
	w.newDemand()
	w.elect = -1
	w.at(w.dur(0, 50*time.Millisecond), w.election)
	w.at(w.opt.Interval, w.tick)
	w.scheduleFaults()
}

// newDemand draws every tenant's offered rate per region.
func (w *world) newDemand() {
	s := &w.snaps[len(w.snaps)-1]
	for _, t := range tenantNames {
		R := s.budget(t).Rate
		quiet := t != "a" && w.rng.IntN(3) == 0 // no traffic anywhere: it may be forgotten
		for _, r := range w.pool {
			x := 0.0
			switch w.rng.IntN(4) {
			case 0:
			case 1:
				x = R * 0.1 * w.rng.Float64()
			case 2:
				x = R * 0.6 * w.rng.Float64()
			default:
				x = R * 1.5 * w.rng.Float64()
			}
			if quiet {
				x = 0
			}
			w.demand[t+"/"+r] = x
		}
	}
	w.logf("demand %v", w.demandString())
	w.at(w.dur(3*time.Second, 15*time.Second), w.newDemand)
	// Pods see the step and report it early (most of them, soon).
	for _, p := range w.pods {
		if p.alive && w.rng.IntN(4) != 0 {
			w.at(w.dur(10*time.Millisecond, 400*time.Millisecond), func() { w.report(p, step) })
		}
	}
}

func (w *world) demandString() string {
	keys := make([]string, 0, len(w.demand))
	for k := range w.demand {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%.0f ", k, w.demand[k])
	}
	return b.String()
}

func (w *world) startPod(region string, delay time.Duration) *pod {
	w.podN++
	p := &pod{id: fmt.Sprintf("%s-p%d", region, w.podN), region: region, alive: true,
		st: shares.NewPod(region, w.opt.Drift), view: len(w.snaps) - 1, leader: w.elect}
	w.pods = append(w.pods, p)
	w.logf("pod %s starts", p.id)
	w.at(delay, func() { w.report(p, periodic) })
	return p
}

// ---- etcd: snapshots and the election ----

// publish writes a new snapshot and delivers it to every party whose etcd
// link is up, each after its own watch delay.
func (w *world) publish(s snapshot, what string) {
	s.at = w.now
	w.snaps = append(w.snaps, s)
	k := len(w.snaps) - 1
	w.logf("etcd: %s (rev %d)", what, k)
	for _, p := range w.pods {
		w.deliverView(func() bool { return p.alive && !p.etcdCut }, func() { w.podView(p, k) })
	}
	for _, c := range w.coords {
		w.deliverView(func() bool { return c.alive && !c.etcdCut }, func() {
			if k > c.view {
				c.view = k
				w.coordView(c)
			}
		})
	}
}

func (w *world) deliverView(ok func() bool, apply func()) {
	w.at(w.dur(time.Millisecond, 300*time.Millisecond), func() {
		if ok() {
			apply()
		}
	})
}

// podView moves p's copy of etcd to snapshot k.
func (w *world) podView(p *pod, k int) {
	if k <= p.view {
		return
	}
	p.view = k
	p.st.LowerFloors(func(t string) shares.Ceiling { return w.own(p, t) })
}

// coordView reacts to a new view: a leader whose region set changed starts
// a new term (and learns again).
func (w *world) coordView(c *coord) {
	if c.lead == nil {
		return
	}
	s := &w.snaps[c.view]
	if !slices.Equal(s.regions, c.regions) {
		w.logf("coordinator %d: regions changed to %v: new term", c.id, s.regions)
		w.startTerm(c)
		return
	}
	if w.rng.IntN(2) == 0 {
		// As the coordinator does, hand the budgets over as they change:
		// those that changed are rebalanced when the leader flushes.
		w.setCold(c)
		c.lead.SetBudgets(maps.Clone(s.budgets))
		w.nudge(c)
	}
}

// election elects an eligible coordinator when none holds the election.
func (w *world) election() {
	if w.elect >= 0 {
		return
	}
	var cands []*coord
	for _, c := range w.coords {
		if c.alive && !c.etcdCut && c.lead == nil {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return
	}
	c := cands[w.rng.IntN(len(cands))]
	w.elect = c.id
	for _, p := range w.pods {
		if p.blind {
			p.blind, p.blindUntil = false, w.now+w.opt.Allowance
		}
	}
	w.term++
	c.elected, c.sub = w.term, 0
	c.leading = true
	c.stopAt = -1
	if w.roster != nil {
		c.roster = maps.Clone(w.roster) // read once elected
	}
	w.startTerm(c)
	for _, p := range w.pods {
		w.deliverView(func() bool { return p.alive && !p.etcdCut }, func() { p.leader = c.id })
	}
}

func (w *world) startTerm(c *coord) {
	// As the coordinator numbers terms: the election (a revision, larger
	// for every later leader) in the high bits, then the terms this
	// leadership started (a deposed leader that has not noticed may still
	// start one, below every later leader's).
	c.sub++
	term := c.elected<<20 | c.sub
	s := &w.snaps[c.view]
	cfg := shares.LeaderConfig{
		Config:   shares.DefaultConfig(s.regions...),
		Term:     term,
		Learning: w.opt.Lease + w.opt.SessionTTL,
		// A deposed leader notices within 200 ms here (see depose).
		Deposed:     200 * time.Millisecond,
		IdleTimeout: w.idle,
		StepHold:    w.hold,
		ValidTenant: func(t string) error {
			if t, name := shares.SplitBudgetID(t); strings.ContainsAny(t, "{}") || strings.ContainsAny(name, "/{}") || strings.Contains(t, "..") {
				return errors.New("invalid tenant name")
			}
			return nil
		},
	}
	cfg.Interval, cfg.Lease = w.opt.Interval, w.opt.Lease
	if c.roster != nil {
		cfg.RosterKnown = true
		for k := range c.roster {
			cfg.Roster = append(cfg.Roster, k)
		}
		slices.SortFunc(cfg.Roster, func(a, b shares.PodKey) int { return strings.Compare(a.Region+"/"+a.Pod, b.Region+"/"+b.Pod) })
	}
	if w.opt.Mutate != nil {
		w.opt.Mutate(&cfg)
	}
	l, err := shares.NewLeader(w.clock(), cfg)
	if err != nil {
		panic(err)
	}
	w.leaders = append(w.leaders, l)
	c.lead = l
	c.regions = slices.Clone(s.regions)
	// (c.stopAt stays: a deposed leader that starts a term before it
	// notices still notices on time, as the coordinator's session context
	// ends every term it started.)
	w.setCold(c)
	w.res.Terms++
	w.logf("coordinator %d leads term %d (regions %v, learning until %v)", c.id, term, s.regions, (w.now + cfg.Learning).Seconds())
}

func (w *world) setCold(c *coord) {
	d, n := w.snaps[c.view].deflt, w.snaps[c.view].named
	c.lead.SetDefault(&d)
	c.lead.SetNamedDefault("tok", &n)
}

// depose ends c's hold on the election (crash, resign or session expiry)
// and schedules the next election.
func (w *world) depose(c *coord, how string, noticeAfter time.Duration, electAfter time.Duration) {
	if w.elect != c.id {
		return
	}
	w.elect = -1
	for _, p := range w.pods {
		if p.alive && p.etcdCut {
			p.blind = true // (no leader to hand it a lower floor)
		}
	}
	c.leading = false
	if noticeAfter <= 0 {
		c.lead = nil
	} else {
		c.stopAt = w.now + noticeAfter
		w.at(noticeAfter, func() {
			if c.stopAt >= 0 && w.now >= c.stopAt {
				c.lead, c.stopAt = nil, -1
				w.logf("coordinator %d notices it was deposed", c.id)
			}
		})
	}
	w.logf("coordinator %d deposed (%s)", c.id, how)
	w.at(electAfter, w.election)
}

// ---- the leader's loop ----

func (w *world) tick() {
	w.at(w.opt.Interval, w.tick)
	for _, c := range w.coords {
		if c.lead == nil || !c.alive {
			continue
		}
		w.rebalance(c)
	}
}

// rebalance runs c's leader's rebalance: on its tick, or when RebalanceDue.
func (w *world) rebalance(c *coord) {
	s := &w.snaps[c.view]
	w.setCold(c) // the default tier, for every tenant without a budget
	c.lead.SetBudgets(maps.Clone(s.budgets))
	before := c.lead.Stats().Forgotten
	ch := c.lead.Rebalance(w.clock())
	if f := c.lead.Stats().Forgotten - before; f > 0 {
		w.res.Forgotten += int(f)
		w.logf("coordinator %d forgot %d tenant(s)", c.id, f)
	}
	if len(ch) > 0 {
		w.logf("coordinator %d rebalance: %s", c.id, changes(ch))
	}
	w.nudge(c)
	w.prune(c)
}

// prune drops from the roster the pods c's leader finds prunable: a write
// that fails unless c holds the election.
func (w *world) prune(c *coord) {
	if w.roster == nil || c.roster == nil || !c.leading || c.etcdCut {
		return
	}
	now := w.clock()
	var gone []string
	keys := slices.SortedFunc(maps.Keys(c.roster), func(a, b shares.PodKey) int {
		return strings.Compare(a.Region+"/"+a.Pod, b.Region+"/"+b.Pod)
	})
	for _, k := range keys {
		if !c.lead.Prunable(now, k.Region, k.Pod) {
			continue
		}
		// The coordinator forgets the pod before the delete; a delete
		// that fails may or may not have been applied (a timeout after
		// the commit), and the pod stays forgotten either way, so that
		// its next report puts it on the roster again.
		delete(c.roster, k)
		if w.chance(0.05) && w.rng.IntN(2) == 0 {
			gone = append(gone, k.Pod+" (delete failed, not applied)")
			continue
		}
		delete(w.roster, k)
		gone = append(gone, k.Pod)
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		w.logf("coordinator %d prunes the roster: %v", c.id, gone)
	}
}

// admit puts p on the roster before c answers it, unless it is there:
// false when the write fails (c does not hold the election, or etcd is out
// of its reach).
func (w *world) admit(c *coord, r *shares.PodReport) bool {
	if w.roster == nil || c.roster == nil {
		return true
	}
	k := shares.PodKey{Region: r.Region, Pod: r.Pod}
	if c.roster[k] || c.lead.Admissible(w.clock(), *r) != nil {
		return true // (Report refuses what is not admissible)
	}
	if !c.leading || c.etcdCut {
		w.logf("coordinator %d cannot add %s to the roster", c.id, r.Pod)
		return false
	}
	c.roster[k], w.roster[k] = true, true
	return true
}

func changes(cs []shares.Change) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "[%s/%s %.1f/%d floor %.1f/%d e%d] ", c.Tenant, c.Region, c.Grant.Rate, c.Grant.Burst, c.Grant.FloorRate, c.Grant.FloorBurst, c.Grant.Epoch)
	}
	return b.String()
}

// ---- reports ----

func (w *world) podsIn(region string) int {
	n := 0
	for _, p := range w.pods {
		if p.alive && p.region == region {
			n++
		}
	}
	return n
}

func (w *world) own(p *pod, t string) shares.Ceiling {
	s := &w.snaps[p.view]
	fr, fb := shares.Floor(s.budget(t), s.regions, p.region)
	return shares.Ceiling{Rate: fr, Burst: fb}
}

// Kinds of report.
const (
	periodic = iota // every ReportEvery
	prompt          // soon after applying a shrink
	step            // early, partial: tenants whose demand stepped
	nudged          // early, partial, no usage: the leader nudged the pod
	resend          // a periodic one again, soon after one failed
)

func (w *world) report(p *pod, kind int) {
	if !p.alive {
		return
	}
	if kind == periodic {
		w.at(w.opt.ReportEvery+w.dur(0, w.opt.ReportEvery/10), func() { w.report(p, periodic) })
	}
	interval := w.now - p.lastSent
	partial := kind == step || kind == nudged
	if partial {
		interval = 150 * time.Millisecond
	} else {
		if interval <= 0 {
			interval = time.Millisecond
		}
		p.lastSent = w.now
	}
	term, applied := p.st.State()
	p.seq++
	now := w.clock()
	heard, renewed, leased := p.st.Standing(now)
	r := shares.PodReport{Region: p.region, Pod: p.id, Seq: p.seq, Term: term, Applied: applied, Interval: interval,
		Usage: map[string]shares.Usage{}, LivePods: w.podsIn(p.region), Held: p.st.Held(), Partial: partial,
		Heard: heard, RenewedBy: renewed, Leased: leased}
	for _, t := range tenantNames {
		if kind == nudged || (kind == step && w.rng.IntN(3) == 0) {
			continue
		}
		x := w.demand[t+"/"+p.region] / float64(max(1, w.podsIn(p.region)))
		if x == 0 && kind != step {
			continue
		}
		rate, _, _ := p.st.Effective(now, t, w.own(p, t))
		if w.redis[p.region] {
			if d := p.st.FailOpenShare(now); d > 0 {
				rate /= float64(d)
			} else {
				rate = 0
			}
		}
		sec := interval.Seconds()
		// A step reads the rate a short window saw: noisy.
		noise := 1.0
		if kind == step {
			noise = 0.5 + w.rng.Float64()
		}
		r.Usage[t] = shares.Usage{Offered: x * sec * noise, Admitted: min(x, rate) * sec * noise, Step: kind == step || w.rng.IntN(20) == 0}
	}
	sentAt := now
	target := p.leader
	if target < 0 {
		target = 0
	}
	if p.coordCut {
		// The report fails: the pod tries again soon (once at a time).
		if !p.resendDue && kind != nudged {
			p.resendDue = true
			w.at(w.dur(250*time.Millisecond, 500*time.Millisecond), func() {
				p.resendDue = false
				w.report(p, resend)
			})
		}
		return
	}
	w.send(func() { w.deliverReport(target, p, r, sentAt, true) })
	if w.chance(0.02) {
		// A replay of this report, later: by the network (its answer
		// reaches the pod) or by an eavesdropper (it does not).
		toPod := w.rng.IntN(2) == 0
		w.at(w.dur(time.Second, 10*time.Second), func() {
			w.logf("replay of %s's report (answer to pod: %v)", p.id, toPod)
			w.deliverReport(target, p, r, sentAt, toPod)
		})
	}
}

// nudge pushes to the pods of the regions whose grants c's leader changed
// what changed (shares.Leader.Push; a message: delayed, lost or
// duplicated), or has them report soon, and schedules the leader's flush
// of the steps a hold deferred.
func (w *world) nudge(c *coord) {
	if c.lead == nil {
		return
	}
	for _, region := range c.lead.Nudges() {
		for _, p := range w.pods {
			if !p.alive || p.region != region || p.coordCut {
				continue
			}
			if w.rng.IntN(4) == 0 {
				w.send(func() {
					if p.alive && !p.coordCut {
						w.report(p, nudged)
					}
				})
				continue
			}
			ans, ok := c.lead.Push(w.clock(), region, p.id)
			if !ok {
				continue
			}
			w.res.Pushes++
			w.logf("coordinator %d pushes to %s: epoch %d entries %d share 1/%d report now %v", c.id, p.id, ans.Epoch, len(ans.Entries), ans.SharePods, ans.ReportNow)
			w.send(func() {
				if !p.alive || p.coordCut {
					return
				}
				if ans.ReportNow {
					w.report(p, nudged)
					return
				}
				w.applyAnswer(p, ans, time.Time{}, true)
			})
		}
	}
	if due, any := c.lead.StepsDue(); any {
		lead := c.lead
		w.at(max(due.Sub(w.clock()), 0), func() {
			if c.lead != lead || !c.alive {
				return
			}
			if ch := lead.FlushSteps(w.clock()); len(ch) > 0 {
				w.res.Steps += len(ch)
				w.logf("coordinator %d flushes steps: %s", c.id, changes(ch))
			}
			w.nudge(c)
		})
	}
}

// send delivers a message after a delay, or drops or duplicates it.
func (w *world) send(fn func()) {
	if w.chance(0.03) {
		return
	}
	w.at(w.dur(time.Millisecond, 150*time.Millisecond), fn)
	if w.chance(0.02) {
		w.at(w.dur(time.Millisecond, 600*time.Millisecond), fn)
	}
}

func (w *world) deliverReport(target int, p *pod, r shares.PodReport, sentAt time.Time, answerToPod bool) {
	c := w.coords[target]
	if answerToPod && p.coordCut {
		return
	}
	if !c.alive {
		// The connection fails: the pod tries the next coordinator it
		// knows of (answers list every candidate), since etcd may be out
		// of its reach.
		if answerToPod {
			p.leader = (target + 1) % len(w.coords)
			p.st.Unanswered()
		}
		return
	}
	if c.lead == nil {
		// A follower names the leader it knows (if it reaches etcd), or
		// the pod tries the next coordinator.
		if answerToPod {
			next := (target + 1) % len(w.coords)
			if !c.etcdCut && w.elect >= 0 {
				next = w.elect
			}
			w.send(func() { p.leader = next; p.st.Unanswered() })
		}
		return
	}
	if !w.admit(c, &r) {
		if answerToPod {
			w.send(func() { p.st.Unanswered() })
		}
		return
	}
	w.res.Reports++
	ans, err := c.lead.Report(w.clock(), r)
	if err != nil {
		w.res.Rejected++
		w.logf("coordinator %d rejects %s: %v", c.id, p.id, err)
		if answerToPod && errors.Is(err, shares.ErrUnknownRegion) {
			w.send(func() {
				if p.alive && !p.coordCut {
					p.st.Removed()
				}
			})
		}
		return
	}
	if ch := c.lead.ReportChanges(); len(ch) > 0 {
		w.res.Steps += len(ch)
		w.logf("coordinator %d steps on %s's report: %s", c.id, p.id, changes(ch))
	}
	w.logf("coordinator %d answers %s (t%d/e%d): term %d learning=%v full=%v epoch %d entries %d share 1/%d",
		c.id, p.id, r.Term, r.Applied, ans.Term, ans.Learning, ans.Full, ans.Epoch, len(ans.Entries), ans.SharePods)
	if c.lead.Growable() {
		if ch := c.lead.Grow(w.clock()); len(ch) > 0 {
			w.logf("coordinator %d grow: %s", c.id, changes(ch))
		}
	}
	if c.lead.RebalanceDue(w.clock()) {
		w.logf("coordinator %d: rebalance due", c.id)
		w.rebalance(c)
	}
	w.nudge(c)
	if !answerToPod {
		return
	}
	w.send(func() {
		if !p.alive || p.coordCut {
			return
		}
		w.applyAnswer(p, ans, sentAt, false)
	})
}

// applyAnswer applies an answer (or, with push, a push) at pod p.
func (w *world) applyAnswer(p *pod, ans shares.Answer, sentAt time.Time, push bool) {
	w.res.Answers++
	if ans.Learning && ans.Lease > 0 {
		w.res.Renewals++
	}
	shrunk := false
	for _, e := range ans.Entries {
		if g, ok := p.st.Grant(e.Tenant); ok && (e.Grant.Rate < g.Rate || e.Grant.Burst < g.Burst) {
			shrunk = true
		}
	}
	own := func(t string) shares.Ceiling { return w.own(p, t) }
	_, renewedBefore, _ := p.st.Standing(w.clock())
	if push {
		p.st.Pushed(w.clock(), ans, own)
	} else {
		p.st.Answered(w.clock(), sentAt, ans, own)
	}
	if _, renewed, _ := p.st.Standing(w.clock()); renewed > renewedBefore {
		shrunk = true // (report soon: the leader learns the renewal applied)
	}
	if shrunk && (!p.promptSet || w.now-p.promptAt >= 20*time.Millisecond) {
		p.promptSet, p.promptAt = true, w.now
		w.at(20*time.Millisecond, func() { w.report(p, prompt) })
	}
}

// forge sends reports the leader must refuse.
func (w *world) forge() {
	for _, c := range w.coords {
		if c.lead == nil {
			continue
		}
		r := w.pool[w.rng.IntN(len(w.pool))]
		var rep shares.PodReport
		switch w.rng.IntN(4) {
		case 0:
			rep = shares.PodReport{Region: r, Pod: "forger", Term: c.lead.Term() + 1, Interval: time.Second}
		case 1:
			rep = shares.PodReport{Region: r, Pod: w.pods[w.rng.IntN(len(w.pods))].id, Term: c.lead.Term(), Applied: c.lead.Epoch(r) + 1 + w.rng.Uint64N(1<<60), Interval: time.Second}
		case 2:
			rep = shares.PodReport{Region: r, Pod: "forger", Interval: time.Second, Usage: map[string]shares.Usage{"../../x": {Offered: 1, Admitted: 1}}}
		default:
			rep = shares.PodReport{Region: r, Pod: "forger", Interval: time.Second, Usage: map[string]shares.Usage{"a": {Offered: 1, Admitted: 5}}}
		}
		if _, err := c.lead.Report(w.clock(), rep); err == nil {
			w.violate("-", fmt.Sprintf("forged report accepted: %+v", rep))
		} else {
			w.logf("forged report refused: %v", err)
		}
	}
}

// ---- faults ----

func (w *world) scheduleFaults() {
	if w.opt.Faults == 0 {
		return
	}
	next := func() time.Duration { return w.dur(time.Second, time.Duration(float64(8*time.Second)/w.opt.Faults)) }
	var fault func()
	fault = func() {
		w.at(next(), fault)
		w.res.Faults++
		w.oneFault()
	}
	w.at(next(), fault)
}

func (w *world) livePods() []*pod {
	var out []*pod
	for _, p := range w.pods {
		if p.alive {
			out = append(out, p)
		}
	}
	return out
}

func (w *world) oneFault() {
	pods := w.livePods()
	heal := w.dur(2*time.Second, 20*time.Second)
	switch k := w.rng.IntN(14); k {
	case 0: // pod cut from etcd (one link at a time: not while it is cut from the coordinators)
		p := pods[w.rng.IntN(len(pods))]
		if p.coordCut {
			return
		}
		p.etcdCut = true
		if w.elect < 0 {
			p.blind = true
		}
		w.logf("fault: %s cut from etcd for %v", p.id, heal)
		w.at(heal, func() {
			p.etcdCut = false
			if p.blind {
				p.blind, p.blindUntil = false, w.now+w.opt.Allowance
			}
			w.podView(p, len(w.snaps)-1)
			p.leader = w.elect
			w.logf("heal: %s reaches etcd", p.id)
		})
	case 1: // pod cut from the coordinators (not while it is cut from etcd)
		p := pods[w.rng.IntN(len(pods))]
		if p.etcdCut {
			return
		}
		p.coordCut = true
		w.logf("fault: %s cut from the coordinators for %v", p.id, heal)
		w.at(heal, func() { p.coordCut = false; w.logf("heal: %s reaches the coordinators", p.id) })
	case 2: // leader cut from etcd: its session expires after the TTL
		if w.elect < 0 {
			return
		}
		c := w.coords[w.elect]
		c.etcdCut = true
		w.logf("fault: coordinator %d cut from etcd for %v", c.id, heal)
		ttl := w.opt.SessionTTL
		w.at(ttl, func() {
			if c.etcdCut && w.elect == c.id {
				w.depose(c, "session expired", w.dur(0, 200*time.Millisecond), w.dur(0, 100*time.Millisecond))
			}
		})
		w.at(heal, func() {
			c.etcdCut = false
			c.view = len(w.snaps) - 1
			w.logf("heal: coordinator %d reaches etcd", c.id)
			w.coordView(c)
			w.at(0, w.election)
		})
	case 3: // leader crash
		if w.elect < 0 {
			return
		}
		c := w.coords[w.elect]
		w.depose(c, "crashed", 0, w.opt.SessionTTL)
		c.alive = false
		w.at(heal, func() {
			c.alive, c.view = true, len(w.snaps)-1
			w.logf("coordinator %d restarts", c.id)
			w.at(0, w.election)
		})
	case 4: // leader resigns
		if w.elect < 0 {
			return
		}
		c := w.coords[w.elect]
		w.depose(c, "resigned", 0, w.dur(time.Millisecond, 50*time.Millisecond))
		w.at(w.dur(0, 100*time.Millisecond), w.election)
	case 5: // pod restart (a new identity)
		p := pods[w.rng.IntN(len(pods))]
		p.alive = false
		w.logf("fault: %s dies", p.id)
		w.at(w.dur(500*time.Millisecond, 3*time.Second), func() { w.startPod(p.region, 0) })
	case 6: // a new pod
		r := w.pool[w.rng.IntN(len(w.pool))]
		if w.podsIn(r) < maxPodsRegion {
			w.startPod(r, 0)
		}
	case 7: // Redis down in a region
		r := w.pool[w.rng.IntN(len(w.pool))]
		if w.redis[r] {
			return
		}
		w.redis[r] = true
		w.logf("fault: redis of %s down for %v", r, heal)
		w.at(heal, func() { w.redis[r] = false; w.logf("heal: redis of %s up", r) })
	case 8, 9: // a budget change
		w.changeBudget()
	case 10: // a region-set change
		w.changeRegions()
	case 11: // forged reports
		w.forge()
	case 12: // a pod dies for good
		if len(pods) > len(w.pool) {
			p := pods[w.rng.IntN(len(pods))]
			if w.podsIn(p.region) > 1 {
				p.alive = false
				w.logf("fault: %s dies for good", p.id)
			}
		}
	default: // the default tier changes: its budget, or its named budget
		s := w.cloneLast()
		if w.rng.IntN(3) == 0 {
			if w.rng.IntN(2) == 0 {
				// Its mode, home or floor: the regions' cold floors move
				// between them (pinned to a new home, the old one's
				// whole budget falls while the new one's rises).
				if nb, what, ok := w.reshape(s.named, s.regions); ok {
					s.named = nb
					w.publish(s, "default tier's tok: "+what)
				}
				return
			}
			s.named.Rate = 100 + w.rng.Float64()*1000
			s.named.Burst = 10 + w.rng.Int64N(100)
			w.publish(s, fmt.Sprintf("default tier's tok %.1f/s burst %d", s.named.Rate, s.named.Burst))
			return
		}
		if w.rng.IntN(2) == 0 {
			if nb, what, ok := w.reshape(s.deflt, s.regions); ok {
				s.deflt = nb
				w.publish(s, "default tier: "+what)
			}
			return
		}
		s.deflt.Rate = 10 + w.rng.Float64()*100
		s.deflt.Burst = 3 + w.rng.Int64N(20)
		w.publish(s, fmt.Sprintf("default tier %.1f/s burst %d", s.deflt.Rate, s.deflt.Burst))
	}
}

// reshape returns b with its mode, home or floor changed, valid for
// regions (ok false: none of a few draws was).
func (w *world) reshape(b shares.Budget, regions []string) (shares.Budget, string, bool) {
	for range 10 {
		nb := b
		var what string
		switch w.rng.IntN(3) {
		case 0:
			nb.Mode, nb.Home, nb.Weights = shares.ModePinned, regions[w.rng.IntN(len(regions))], nil
			what = "pinned to " + nb.Home
		case 1:
			nb.Mode, nb.Home, nb.Weights = shares.ModeRebalanced, "", nil
			what = "rebalanced"
		default:
			f := []float64{0, 0.05, 0.1, 0.3, 0.6}[w.rng.IntN(5)]
			nb.Floor = &f
			what = fmt.Sprintf("floor %.2f", f)
		}
		if nb.Validate(regions) == nil {
			return nb, what, true
		}
	}
	return b, "", false
}

func (w *world) cloneLast() snapshot {
	s := w.snaps[len(w.snaps)-1]
	s.regions = slices.Clone(s.regions)
	b := make(map[string]shares.Budget, len(s.budgets))
	for k, v := range s.budgets {
		if v.Floor != nil {
			f := *v.Floor
			v.Floor = &f
		}
		b[k] = v
	}
	s.budgets = b
	for _, d := range []*shares.Budget{&s.deflt, &s.named} {
		if d.Floor != nil {
			f := *d.Floor
			d.Floor = &f
		}
	}
	return s
}

func (w *world) changeBudget() {
	s := w.cloneLast()
	t := []string{"a", "b"}[w.rng.IntN(2)]
	b, ok := s.budgets[t]
	if t == "b" && (!ok || w.rng.IntN(6) == 0) {
		// b's record is deleted (it falls to the default tier), or
		// written again.
		if ok {
			delete(s.budgets, "b")
			w.publish(s, "budget b: record deleted (default tier)")
		} else {
			s.budgets["b"] = shares.Budget{Rate: 100, Burst: 20}
			w.publish(s, "budget b: record written again")
		}
		return
	}
	var what string
	for try := 0; try < 10; try++ {
		nb := b
		switch w.rng.IntN(5) {
		case 0:
			nb.Rate = math.Round(b.Rate*(0.3+w.rng.Float64()*2.5)*10) / 10
			nb.Rate = min(max(nb.Rate, 10), 2000)
			what = fmt.Sprintf("rate %.1f", nb.Rate)
		case 1:
			nb.Burst = max(3, int64(float64(b.Burst)*(0.3+w.rng.Float64()*2.5)))
			what = fmt.Sprintf("burst %d", nb.Burst)
		default:
			var ok bool
			if nb, what, ok = w.reshape(b, s.regions); !ok {
				continue
			}
		}
		if nb.Validate(s.regions) == nil {
			s.budgets[t] = nb
			w.publish(s, fmt.Sprintf("budget %s: %s", t, what))
			return
		}
	}
}

func (w *world) changeRegions() {
	s := w.cloneLast()
	var next []string
	switch {
	case len(s.regions) == len(w.pool), len(s.regions) > 1 && w.rng.IntN(2) == 0:
		// One region fewer (down to one alone, which has no floor split).
		drop := w.rng.IntN(len(s.regions))
		for i, r := range s.regions {
			if i != drop {
				next = append(next, r)
			}
		}
	default:
		next = slices.Clone(w.pool)
	}
	for t, b := range s.budgets {
		if b.Validate(next) != nil {
			b.Mode, b.Home = shares.ModeRebalanced, ""
			s.budgets[t] = b
		}
	}
	for _, b := range []*shares.Budget{&s.deflt, &s.named} {
		if b.Validate(next) != nil {
			b.Mode, b.Home = shares.ModeRebalanced, ""
		}
	}
	s.regions = next
	w.publish(s, fmt.Sprintf("regions %v", next))
}

// ---- the invariant ----

// bound returns the largest budget of tenant in force during the last D.
func (w *world) bound(t string) (float64, int64) {
	var r float64
	var b int64
	from := w.now - w.opt.Allowance
	for i := len(w.snaps) - 1; i >= 0; i-- {
		s := &w.snaps[i]
		bt := s.budget(t)
		r, b = max(r, bt.Rate), max(b, bt.Burst)
		if s.at <= from {
			break
		}
	}
	// A pod that could learn of a decrease from nobody (cut from etcd
	// while no coordinator led) enforces what it read: the decrease takes
	// D from when it regains etcd or a leader, not from the change. That
	// holds for its floors too: a region set that grew lowers every
	// region's floor, and such a pod keeps the floor of the set it read
	// (the leader reserves the new one), so its excess counts on top, the
	// largest of its region's blind pods.
	cur := &w.snaps[len(w.snaps)-1]
	var excessR map[string]float64
	var excessB map[string]int64
	for _, p := range w.pods {
		if p.alive && (p.blind || w.now < p.blindUntil) {
			bt := w.snaps[p.view].budget(t)
			r, b = max(r, bt.Rate), max(b, bt.Burst)
			old := w.own(p, t)
			nr, nb := shares.Floor(cur.budget(t), cur.regions, p.region)
			if old.Rate > nr || old.Burst > nb {
				if excessR == nil {
					excessR, excessB = map[string]float64{}, map[string]int64{}
				}
				excessR[p.region] = max(excessR[p.region], old.Rate-nr)
				excessB[p.region] = max(excessB[p.region], old.Burst-nb)
			}
		}
	}
	for _, reg := range w.pool { // (in order: sums of floats are deterministic)
		r += excessR[reg]
		b += excessB[reg]
	}
	return r, b
}

func (w *world) check() {
	if w.res.Violation != nil {
		return
	}
	now := w.clock()
	for _, t := range slices.Concat(tenantNames, coldNames) {
		R, B := w.bound(t)
		var sum float64
		var sumB int64
		var detail strings.Builder
		for _, r := range w.pool {
			var maxR float64
			var maxB int64
			for _, p := range w.pods {
				if !p.alive || p.region != r {
					continue
				}
				rate, burst, leased := p.st.Effective(now, t, w.own(p, t))
				if w.redis[r] {
					d := p.st.FailOpenShare(now)
					if d > 0 {
						fr, fb := rate/float64(d), burst/int64(d)
						sum += fr
						sumB += fb
						fmt.Fprintf(&detail, "%s fail-open %.2f/%d (1/%d); ", p.id, fr, fb, d)
					}
					continue
				}
				fmt.Fprintf(&detail, "%s %.2f/%d leased=%v; ", p.id, rate, burst, leased)
				maxR, maxB = max(maxR, rate), max(maxB, burst)
			}
			sum += maxR
			sumB += maxB
		}
		if ratio := sum / R; ratio > w.res.PeakRatio {
			w.res.PeakRatio = ratio
		}
		if sum > R*(1+1e-9)+1e-9 || sumB > B {
			w.violate(t, fmt.Sprintf("Σ enforced %.3f/s burst %d > bound %.3f/s burst %d: %s", sum, sumB, R, B, detail.String()))
			return
		}
	}
}

func (w *world) violate(t, what string) {
	v := Violation{At: w.now, Tenant: t, What: what}
	w.res.Violation = &v
	w.logf("VIOLATION %s", v)
	w.stop = true
}
