package shares_test

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

// rigDefault is the rig's default tier.
var rigDefault = shares.Budget{Rate: 30, Burst: 6}

// rig drives one Leader and several Pods per region by hand: every report
// is answered at once and the answer applied, unless the test says not.
type rig struct {
	t       *testing.T
	now     time.Time
	cfg     shares.LeaderConfig
	l       *shares.Leader
	pods    map[string]*shares.Pod
	region  map[string]string
	budgets map[string]shares.Budget
	regions []string
	// lagging pods read these budgets instead (their view of etcd is
	// behind the leader's).
	lagging map[string]map[string]shares.Budget
	// named are the default budgets of named budgets (see
	// shares.BudgetID), by name.
	named map[string]shares.Budget
	// deflt, when set, is the default tier the pods read (else
	// rigDefault); laggingDeflt, the one these pods read instead.
	deflt        *shares.Budget
	laggingDeflt map[string]shares.Budget
}

func newRig(t *testing.T, term uint64, regions []string, budgets map[string]shares.Budget, pods ...string) *rig {
	t.Helper()
	r := &rig{t: t, now: time.Unix(1_800_000_000, 0), pods: map[string]*shares.Pod{}, region: map[string]string{},
		budgets: budgets, regions: regions}
	r.cfg = shares.LeaderConfig{Config: shares.DefaultConfig(regions...), Term: term, Learning: 12 * time.Second}
	r.cfg.Interval, r.cfg.Lease = time.Second, 5*time.Second
	r.newLeader(term)
	for _, id := range pods {
		r.addPod(id)
	}
	return r
}

func (r *rig) newLeader(term uint64) {
	r.t.Helper()
	r.cfg.Term = term
	l, err := shares.NewLeader(r.now, r.cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	d := rigDefault
	l.SetDefault(&d)
	r.l = l
}

// addPod adds a pod named region/name.
func (r *rig) addPod(id string) {
	reg, _, _ := strings.Cut(id, "/")
	r.pods[id] = shares.NewPod(reg, 50*time.Millisecond)
	r.region[id] = reg
}

func (r *rig) own(id string) func(string) shares.Ceiling {
	return func(t string) shares.Ceiling {
		budgets := r.budgets
		if v, ok := r.lagging[id]; ok {
			budgets = v
		}
		b, ok := budgets[t]
		if _, name := shares.SplitBudgetID(t); !ok && name != "" {
			b = r.named[name] // (zero when it has none: no floor)
		} else if !ok {
			b = rigDefault // the default tier
			if d, lag := r.laggingDeflt[id]; lag {
				b = d
			} else if r.deflt != nil {
				b = *r.deflt
			}
		}
		fr, fb := shares.Floor(b, r.regions, r.region[id])
		return shares.Ceiling{Rate: fr, Burst: fb}
	}
}

// report sends pod id's report, offering offered units/s of tenant t over
// the last second; with apply the answer reaches the pod.
func (r *rig) report(id, tenant string, offered float64, apply bool) shares.Answer {
	r.t.Helper()
	p := r.pods[id]
	term, applied := p.State()
	heard, renewed, leased := p.Standing(r.now)
	a, err := r.l.Report(r.now, shares.PodReport{Region: r.region[id], Pod: id, Term: term, Applied: applied,
		Interval: time.Second, Usage: map[string]shares.Usage{tenant: {Offered: offered, Admitted: offered}}, Held: p.Held(),
		Heard: heard, RenewedBy: renewed, Leased: leased})
	if err != nil {
		r.t.Fatalf("report of %s: %v", id, err)
	}
	if apply {
		p.Answered(r.now, r.now, a, r.own(id))
	}
	return a
}

func (r *rig) rebalance() []shares.Change {
	r.l.SetBudgets(r.budgets)
	ch := r.l.Rebalance(r.now)
	if r.l.Growable() {
		ch = append(ch, r.l.Grow(r.now)...)
	}
	return ch
}

// sum is Σ over regions of the largest rate any pod of the region enforces
// for tenant.
func (r *rig) sum(tenant string) float64 {
	byRegion := map[string]float64{}
	for id, p := range r.pods {
		rate, _, _ := p.Effective(r.now, tenant, r.own(id)(tenant))
		byRegion[r.region[id]] = max(byRegion[r.region[id]], rate)
	}
	var s float64
	for _, v := range byRegion {
		s += v
	}
	return s
}

func (r *rig) safe(tenant string, rate float64, when string) {
	r.t.Helper()
	if s := r.sum(tenant); s > rate*(1+1e-9) {
		r.t.Fatalf("%s: Σ enforced %.2f/s > R %.0f/s (%s)", when, s, rate, r.describe(tenant))
	}
}

func (r *rig) describe(tenant string) string {
	var b strings.Builder
	for id, p := range r.pods {
		rate, burst, leased := p.Effective(r.now, tenant, r.own(id)(tenant))
		fmt.Fprintf(&b, "%s %.1f/%d leased=%v; ", id, rate, burst, leased)
	}
	return b.String()
}

func (r *rig) step(d time.Duration) { r.now = r.now.Add(d) }

// ids returns the pods in a fixed order.
func (r *rig) ids() []string {
	out := make([]string, 0, len(r.pods))
	for id := range r.pods {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// learn steps past the learning period, every pod reporting each second.
func (r *rig) learn(tenant string, demand map[string]float64) {
	for r.l.Learning(r.now) {
		for _, id := range r.ids() {
			r.report(id, tenant, demand[r.region[id]], true)
		}
		r.rebalance()
		r.step(time.Second)
	}
}

func (r *rig) converge(tenant string, demand map[string]float64, rounds int, rate float64) {
	for range rounds {
		for _, id := range r.ids() {
			r.report(id, tenant, demand[r.region[id]], true)
		}
		r.rebalance()
		for _, id := range r.ids() {
			r.report(id, tenant, demand[r.region[id]], true)
		}
		r.safe(tenant, rate, "converging")
		r.step(time.Second)
	}
}

func (r *rig) grant(id, tenant string) shares.Grant {
	g, _ := r.pods[id].Grant(tenant)
	return g
}

// Shrink before grow counts every pod: while one pod of a region has not
// applied the region's shrink (and its lease is valid), no other region
// grows into it, however early its peer acknowledged.
func TestLeaderWaitsForEveryPod(t *testing.T) {
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60}}
	r := newRig(t, 1, []string{"a", "b"}, b, "a/1", "a/2", "b/1", "b/2")
	r.learn("t", map[string]float64{"a": 400, "b": 20})
	r.converge("t", map[string]float64{"a": 400, "b": 20}, 10, 300)
	big := r.grant("a/2", "t").Rate
	if big < 200 {
		t.Fatalf("a holds %.1f/s after converging on its demand, want most of R", big)
	}
	// Demand moves to b. a/1 applies every answer; a/2's answers are lost.
	shift := map[string]float64{"a": 20, "b": 400}
	for range 4 {
		r.report("a/1", "t", 20, true)
		r.report("a/2", "t", 20, false)
		r.report("b/1", "t", 400, true)
		r.report("b/2", "t", 400, true)
		r.rebalance()
		r.report("a/1", "t", 20, true)
		r.report("b/1", "t", 400, true)
		r.report("b/2", "t", 400, true)
		r.safe("t", 300, "a/2 still holds its old grant")
		r.step(time.Second)
	}
	if g := r.grant("a/2", "t").Rate; g != big {
		t.Fatalf("a/2 holds %.1f/s, want its old %.1f/s (its answers were lost)", g, big)
	}
	if gb := r.grant("b/1", "t").Rate; gb > 300-big+1e-6 {
		t.Fatalf("b grew to %.1f/s while a/2 may enforce %.1f/s", gb, big)
	}
	// a/2 applies the shrink: b grows.
	r.converge("t", shift, 6, 300)
	if gb := r.grant("b/1", "t").Rate; gb < 200 {
		t.Fatalf("b holds %.1f/s once every pod of a applied the shrink, want most of R", gb)
	}
}

// A new leader grants nothing for its learning period: an older term's pod
// that reports first (holding a shrunk grant) does not speak for a peer that
// may still enforce the old, larger one.
func TestNewLeaderLearnsBeforeGranting(t *testing.T) {
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60}}
	r := newRig(t, 1, []string{"a", "b"}, b, "a/1", "a/2", "b/1", "b/2")
	r.learn("t", map[string]float64{"a": 400, "b": 20})
	r.converge("t", map[string]float64{"a": 400, "b": 20}, 10, 300)
	// The old leader shrinks a; only a/1 applies it; then it is gone.
	r.report("a/1", "t", 20, true)
	r.report("a/2", "t", 20, false)
	r.report("b/1", "t", 400, true)
	r.rebalance()
	r.report("a/1", "t", 20, true)

	r.newLeader(2)
	start := r.now
	for r.now.Sub(start) < 12*time.Second {
		// a/1 reports first every time.
		for _, id := range []string{"a/1", "b/1", "b/2", "a/2"} {
			a := r.report(id, "t", map[string]float64{"a": 20, "b": 400}[r.region[id]], true)
			// It may renew what a pod holds (nothing changed the budget),
			// never grant.
			if !a.Learning || len(a.Entries) != 0 {
				t.Fatalf("at +%v the learning leader answered %+v", r.now.Sub(start), a)
			}
		}
		if ch := r.rebalance(); len(ch) != 0 {
			t.Fatalf("learning leader granted %+v", ch)
		}
		r.safe("t", 300, "learning")
		r.step(time.Second)
	}
	r.converge("t", map[string]float64{"a": 20, "b": 400}, 8, 300)
	if gb := r.grant("b/2", "t").Rate; gb < 200 {
		t.Fatalf("after learning b holds %.1f/s, want most of R", gb)
	}
	if term, _ := r.pods["a/2"].State(); term != 2 {
		t.Fatalf("a/2 holds grants of term %d, want 2", term)
	}
}

// While a new leader learns, it renews the lease of what each pod reports
// holding, so a leader change costs no admissions; it grants nothing; and
// after learning, the grants it renewed count as the region's ceilings
// until the pod applies the new term's. It does not renew grants made under
// a budget higher than the one it reads: a cut reaches pods as their
// leases lapse, as without renewal.
func TestLearningRenewsHeldGrants(t *testing.T) {
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60}}
	demand := map[string]float64{"a": 400, "b": 100}
	setup := func() *rig {
		r := newRig(t, 1, []string{"a", "b"}, b, "a/1", "a/2", "b/1", "b/2")
		// A deposed leader notices within 2 s (the session TTL).
		r.cfg.Learning, r.cfg.Deposed = r.cfg.Lease+2*time.Second, 2*time.Second
		r.newLeader(1)
		r.learn("t", demand)
		r.converge("t", demand, 10, 300)
		if s := r.sum("t"); s < 280 {
			t.Fatalf("term 1 converged to Σ %.1f/s, want about R", s)
		}
		return r
	}

	t.Run("same budget", func(t *testing.T) {
		r := setup()
		before := r.sum("t")
		r.newLeader(2)
		start := r.now
		for r.l.Learning(r.now) {
			for _, id := range r.ids() {
				a := r.report(id, "t", demand[r.region[id]], true)
				if !a.Learning || len(a.Entries) != 0 {
					t.Fatalf("at +%v the learning leader answered %s %+v", r.now.Sub(start), id, a)
				}
			}
			if ch := r.rebalance(); len(ch) != 0 {
				t.Fatalf("learning leader granted %+v", ch)
			}
			r.safe("t", 300, "learning")
			// Every pod keeps its grant: the world admits what it did.
			if s := r.sum("t"); s < before-1e-9 {
				t.Fatalf("at +%v pods enforce Σ %.1f/s, want the %.1f/s they held (%s)", r.now.Sub(start), s, before, r.describe("t"))
			}
			r.step(time.Second)
		}
		if st := r.l.Stats(); st.Renewed == 0 {
			t.Fatalf("stats %+v: no renewal counted", st)
		}
		r.converge("t", demand, 6, 300)
		if term, _ := r.pods["a/1"].State(); term != 2 {
			t.Fatalf("a/1 holds grants of term %d after learning, want 2", term)
		}
	})

	t.Run("budget cut", func(t *testing.T) {
		r := setup()
		cut := map[string]shares.Budget{"t": {Rate: 100, Burst: 20}}
		r.newLeader(2)
		r.budgets = cut
		r.l.SetBudgets(cut)
		r.l.Rebalance(r.now)
		start := r.now
		for r.l.Learning(r.now) {
			for _, id := range r.ids() {
				if a := r.report(id, "t", demand[r.region[id]], true); a.Lease != 0 {
					t.Fatalf("at +%v the learning leader renewed %s's grants made under R = 300 with R = 100: %+v", r.now.Sub(start), id, a)
				}
			}
			r.rebalance()
			if r.now.Sub(start) > r.cfg.Lease {
				r.safe("t", 100, "learning after the cut, leases lapsed")
			}
			r.step(time.Second)
		}
	})

	t.Run("budget cut shortly before the leader changed", func(t *testing.T) {
		// The old leader shrinks under the cut; while that runs, grants it
		// makes under the new budget may sit beside older ones that fit
		// only the old, so they are stamped with the old budget and the
		// next leader (reading the new one) renews none of them.
		r := setup()
		cut := map[string]shares.Budget{"t": {Rate: 100, Burst: 20}}
		r.budgets = cut
		r.converge("t", demand, 2, 300)
		if g := r.grant("a/1", "t"); g.BudgetRate != 300 || g.BudgetBurst != 60 {
			t.Fatalf("a grant made 2 s after a cut from 300/60 is stamped %+v, want the old budget", g)
		}
		r.newLeader(2)
		r.l.SetBudgets(cut)
		noRenewal(t, r, demand, "grants made while a cut ran")
	})

	t.Run("full mode, then rebalanced", func(t *testing.T) {
		// In full mode every region holds all of R: the grants are
		// stamped with what the regions may enforce together (2R), so a
		// leader reading the same R rebalanced renews none of them.
		full := map[string]shares.Budget{"t": {Rate: 300, Burst: 60, Mode: shares.ModeFull}}
		r := newRig(t, 1, []string{"a", "b"}, full, "a/1", "a/2", "b/1", "b/2")
		r.cfg.Learning, r.cfg.Deposed = r.cfg.Lease+2*time.Second, 0
		r.newLeader(1)
		r.learn("t", demand)
		r.converge("t", demand, 3, 600)
		if g := r.grant("a/1", "t"); g.BudgetRate != 600 {
			t.Fatalf("a full-mode grant is stamped %+v, want BudgetRate 600 (2 regions × 300)", g)
		}
		r.newLeader(2)
		r.budgets = b
		r.l.SetBudgets(b)
		noRenewal(t, r, demand, "full-mode grants under a rebalanced budget")
	})

	t.Run("lease ends before a deposed leader surely stopped", func(t *testing.T) {
		r := setup()
		// Term 1's last answers were 3 s before term 2 starts: their
		// leases end 2 s into it (less the drift), before term 1 surely
		// noticed (2 s), and term 1 may have given their room away by
		// then. The renewal reaches them 1 s into term 2, leased.
		r.step(2 * time.Second)
		r.newLeader(2)
		r.l.SetBudgets(r.budgets)
		for range 2 {
			for _, id := range r.ids() {
				r.report(id, "t", demand[r.region[id]], true)
			}
			r.step(time.Second)
		}
		for _, id := range r.ids() {
			if _, _, leased := r.pods[id].Effective(r.now, "t", r.own(id)("t")); leased {
				t.Fatalf("%s took a renewal of a lease that ended before the older leader surely stopped", id)
			}
		}
		if st := r.l.Stats(); st.Renewed == 0 {
			t.Fatalf("stats %+v: the leader offered no renewal (the pods must have refused it)", st)
		}
	})

	t.Run("grants changed since the report", func(t *testing.T) {
		r := setup()
		// A report of a/1 leaves for the old leader, whose answer (a
		// shrink of a) is late; meanwhile a/1 reports to a new one.
		term, applied := r.pods["a/1"].State()
		demand2 := map[string]float64{"a": 10, "b": 400}
		for range 3 {
			for _, id := range r.ids() {
				r.report(id, "t", demand2[r.region[id]], id != "a/1")
			}
			r.rebalance()
		}
		old, err := r.l.Report(r.now, shares.PodReport{Region: "a", Pod: "a/1", Term: term, Applied: applied,
			Interval: time.Second, Usage: map[string]shares.Usage{"t": {Offered: 10, Admitted: 10}}})
		if err != nil || len(old.Entries) == 0 {
			t.Fatalf("old leader's answer: %+v, %v", old, err)
		}
		r.step(time.Second)
		sent := r.now
		r.newLeader(2)
		r.l.SetBudgets(r.budgets)
		p := r.pods["a/1"]
		// a/1's last report went unanswered, so its next one says what it
		// holds (it has not heard of term 2: an answer of term 1 still
		// applies).
		p.Unanswered()
		renewal, err := r.l.Report(sent, shares.PodReport{Region: "a", Pod: "a/1", Term: term, Applied: applied,
			Interval: time.Second, Held: p.Held(), Usage: map[string]shares.Usage{"t": {Offered: 10, Admitted: 10}}})
		if err != nil || renewal.Lease == 0 {
			t.Fatalf("new leader's learning answer: %+v, %v", renewal, err)
		}
		// The old answer lands first: a/1 now holds other grants than it
		// reported, so the renewal does not apply to them.
		p.Answered(sent, sent.Add(-time.Second), old, r.own("a/1"))
		p.Answered(sent, sent, renewal, r.own("a/1"))
		// The old answer's lease ran from a second before sent, a renewal's
		// would run from sent.
		r.step(r.cfg.Lease - time.Second)
		if _, _, leased := p.Effective(r.now, "t", r.own("a/1")("t")); leased {
			t.Fatal("a/1 renewed grants it did not report holding")
		}
	})

	t.Run("older answers ignored after a renewal", func(t *testing.T) {
		r := setup()
		// Term 1 moves a's grant; the answer carrying it to a/1 is late.
		var late shares.Answer
		for range 3 {
			for _, id := range r.ids() {
				a := r.report(id, "t", map[string]float64{"a": 10, "b": 400}[r.region[id]], id != "a/1")
				if id == "a/1" && len(a.Entries) > 0 {
					late = a
				}
			}
			r.rebalance()
		}
		if len(late.Entries) == 0 {
			t.Fatal("term 1 did not change a's grant")
		}
		held := r.grant("a/1", "t")
		r.newLeader(2)
		r.l.SetBudgets(r.budgets)
		r.report("a/1", "t", 10, true) // asks what a/1 holds
		if a := r.report("a/1", "t", 10, true); a.Lease == 0 {
			t.Fatalf("no renewal: %+v", a)
		}
		r.pods["a/1"].Answered(r.now, r.now, late, r.own("a/1"))
		if g := r.grant("a/1", "t"); g != held {
			t.Fatalf("a/1 applied an answer of term 1 after term 2 renewed it: holds %+v, renewed %+v", g, held)
		}
	})
}

// noRenewal has every pod report for two rounds and fails if a learning
// answer renews what one holds.
func noRenewal(t *testing.T, r *rig, demand map[string]float64, what string) {
	t.Helper()
	for range 2 {
		for _, id := range r.ids() {
			if a := r.report(id, "t", demand[r.region[id]], true); a.Lease != 0 {
				t.Fatalf("the learning leader renewed %s's %s: %+v", id, what, a)
			}
		}
		r.step(time.Second)
	}
}

// Impossible and invalid reports are errors and change nothing.
func TestImpossibleReports(t *testing.T) {
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60}}
	setup := func() *rig {
		r := newRig(t, 7, []string{"a", "b"}, b, "a/1", "a/2", "b/1")
		r.cfg.ValidTenant = func(s string) error {
			if strings.Contains(s, "..") || strings.Contains(s, "/") {
				return errors.New("invalid tenant name")
			}
			return nil
		}
		r.newLeader(7)
		r.learn("t", map[string]float64{"a": 200, "b": 50})
		r.converge("t", map[string]float64{"a": 200, "b": 50}, 3, 300)
		return r
	}
	forged, twin := setup(), setup()
	epoch := forged.l.Epoch("a")
	cases := []struct {
		name string
		rep  shares.PodReport
		want error
	}{
		{"term above the leader's", shares.PodReport{Region: "a", Pod: "a/1", Term: 8, Applied: 1, Interval: time.Second}, shares.ErrForgedReport},
		{"epoch never issued", shares.PodReport{Region: "a", Pod: "a/1", Term: 7, Applied: epoch + 1, Interval: time.Second}, shares.ErrForgedReport},
		{"epoch 2^64-1", shares.PodReport{Region: "a", Pod: "a/2", Term: 7, Applied: math.MaxUint64, Interval: time.Second}, shares.ErrForgedReport},
		{"unknown region", shares.PodReport{Region: "mars", Pod: "m", Interval: time.Second}, shares.ErrUnknownRegion},
		{"path in tenant", shares.PodReport{Region: "a", Pod: "a/9", Interval: time.Second, Usage: map[string]shares.Usage{"../../x": {Offered: 1, Admitted: 1}}}, shares.ErrInvalidReport},
		{"admitted above offered", shares.PodReport{Region: "a", Pod: "a/9", Interval: time.Second, Usage: map[string]shares.Usage{"t": {Offered: 1, Admitted: 1e9}}}, shares.ErrInvalidReport},
		{"negative offered", shares.PodReport{Region: "a", Pod: "a/9", Interval: time.Second, Usage: map[string]shares.Usage{"t": {Offered: -5}}}, shares.ErrInvalidReport},
		{"NaN", shares.PodReport{Region: "a", Pod: "a/9", Interval: time.Second, Usage: map[string]shares.Usage{"t": {Offered: math.NaN()}}}, shares.ErrInvalidReport},
		{"no interval", shares.PodReport{Region: "a", Pod: "a/9"}, shares.ErrInvalidReport},
		{"no pod", shares.PodReport{Region: "a", Interval: time.Second}, shares.ErrInvalidReport},
	}
	for _, c := range cases {
		if _, err := forged.l.Report(forged.now, c.rep); !errors.Is(err, c.want) {
			t.Errorf("%s: Report = %v, want %v", c.name, err, c.want)
		}
	}
	// The forged reports changed nothing: the leader answers and rebalances
	// exactly as its twin that never saw them.
	for _, r := range []*rig{forged, twin} {
		r.step(time.Second)
		r.converge("t", map[string]float64{"a": 50, "b": 200}, 4, 300)
	}
	for _, id := range forged.ids() {
		if g, w := forged.grant(id, "t"), twin.grant(id, "t"); g != w {
			t.Errorf("%s: grant %+v after forged reports, %+v without", id, g, w)
		}
	}
	if p, w := forged.l.Pods("a", forged.now), twin.l.Pods("a", twin.now); len(p) != len(w) {
		t.Errorf("forged reports left %d pods in a, want %d", len(p), len(w))
	}
}

// A pod that joins gets no fail-open share until every other leased pod of
// its region has taken the smaller one.
func TestFailOpenShareWaitsForPeers(t *testing.T) {
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60}}
	r := newRig(t, 1, []string{"a", "b"}, b, "a/1", "a/2", "b/1")
	r.learn("t", map[string]float64{"a": 100, "b": 100})
	r.converge("t", map[string]float64{"a": 100, "b": 100}, 2, 300)
	if d := r.pods["a/1"].FailOpenShare(r.now); d != 2 {
		t.Fatalf("a/1's share 1/%d, want 1/2", d)
	}
	r.addPod("a/3")
	if a := r.report("a/3", "t", 10, true); a.SharePods != 0 {
		t.Fatalf("a joining pod got 1/%d while its peers may hold 1/2", a.SharePods)
	}
	shareSum := func() float64 {
		var s float64
		for _, id := range []string{"a/1", "a/2", "a/3"} {
			if d := r.pods[id].FailOpenShare(r.now); d > 0 {
				s += 1 / float64(d)
			}
		}
		return s
	}
	r.report("a/1", "t", 10, true)
	if s := shareSum(); s > 1+1e-9 {
		t.Fatalf("Σ shares %.3f > 1 after one peer took 1/3", s)
	}
	r.report("a/2", "t", 10, true)
	if a := r.report("a/3", "t", 10, true); a.SharePods != 0 {
		t.Fatalf("the new pod got 1/%d before its peers acknowledged taking 1/3", a.SharePods)
	}
	// Their next reports acknowledge the answers that carried 1/3.
	r.report("a/1", "t", 10, true)
	r.report("a/2", "t", 10, true)
	if a := r.report("a/3", "t", 10, true); a.SharePods != 3 {
		t.Fatalf("after both peers took 1/3 the new pod gets 1/%d, want 1/3", a.SharePods)
	}
	if s := shareSum(); s > 1+1e-9 {
		t.Fatalf("Σ shares %.3f > 1", s)
	}
	// Without a lease, no share at all.
	r.step(10 * time.Second)
	if d := r.pods["a/1"].FailOpenShare(r.now); d != 0 {
		t.Fatalf("a pod whose lease lapsed holds a share 1/%d", d)
	}
}

// Budget and policy changes are transitions the leader runs: a pod never
// raises what it enforces on its own reading, so pinned → rebalanced and a
// larger floor fraction keep Σ ≤ R with two pods per region.
func TestBudgetTransitions(t *testing.T) {
	point6 := 0.6
	cases := []struct {
		name     string
		from, to shares.Budget
	}{
		{"pinned to rebalanced", shares.Budget{Rate: 300, Burst: 60, Mode: shares.ModePinned, Home: "a"}, shares.Budget{Rate: 300, Burst: 60}},
		{"rebalanced to pinned elsewhere", shares.Budget{Rate: 300, Burst: 60}, shares.Budget{Rate: 300, Burst: 60, Mode: shares.ModePinned, Home: "c"}},
		{"floor 0.1 to 0.6", shares.Budget{Rate: 300, Burst: 60}, shares.Budget{Rate: 300, Burst: 60, Floor: &point6}},
		{"budget lowered", shares.Budget{Rate: 300, Burst: 60}, shares.Budget{Rate: 100, Burst: 20}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := map[string]shares.Budget{"t": c.from}
			r := newRig(t, 1, []string{"a", "b", "c"}, b, "a/1", "a/2", "b/1", "b/2", "c/1", "c/2")
			demand := map[string]float64{"a": 250, "b": 100, "c": 5}
			r.learn("t", demand)
			r.converge("t", demand, 8, c.from.Rate)
			// The pods read the new budget at once (their own reading);
			// the leader only at the next rebalance, and one pod per
			// region misses two answers.
			r.budgets["t"] = c.to
			bound := max(c.from.Rate, c.to.Rate)
			for i := range 12 {
				for _, id := range r.ids() {
					r.report(id, "t", demand[r.region[id]], !strings.HasSuffix(id, "/2") || i > 1)
				}
				r.safe("t", bound, fmt.Sprintf("round %d after the change", i))
				r.rebalance()
				r.safe("t", bound, fmt.Sprintf("round %d after the rebalance", i))
				r.step(time.Second)
			}
			r.safe("t", c.to.Rate, "after the transition")
		})
	}
}

// A pod cut off from the coordinators keeps the floor of its last grant, but
// lowers it as soon as its own reading of the budget does: when a pinned
// tenant is rebalanced and the home region's pod is cut off, the others grow
// once its lease has lapsed, and the cut-off pod is down to the rebalanced
// floor by then.
func TestCutOffPodLowersItsFloor(t *testing.T) {
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60, Mode: shares.ModePinned, Home: "a"}}
	r := newRig(t, 1, []string{"a", "b"}, b, "a/1", "a/2", "b/1")
	demand := map[string]float64{"a": 300, "b": 300}
	r.learn("t", demand)
	r.converge("t", demand, 6, 300)
	if g := r.grant("a/2", "t"); g.FloorRate < 299 {
		t.Fatalf("a/2's grant %+v: want the pinned home's whole budget as its floor", g)
	}
	// a/2 is cut off from the coordinators; the tenant is rebalanced.
	r.budgets["t"] = shares.Budget{Rate: 300, Burst: 60}
	r.pods["a/2"].LowerFloors(r.own("a/2")) // its copy of the budget changed
	for i := range 15 {
		for _, id := range []string{"a/1", "b/1"} {
			r.report(id, "t", demand[r.region[id]], true)
		}
		r.rebalance()
		r.safe("t", 300, fmt.Sprintf("round %d with a/2 cut off", i))
		r.step(time.Second)
	}
	if gb := r.grant("b/1", "t").Rate; gb < 100 {
		t.Fatalf("b holds %.1f/s: want it grown once a/2's lease lapsed", gb)
	}
}

// A pod whose lease lapsed enforces nothing for a tenant it holds no grant
// of: the leader stops counting the cold floor once the leased pods have the
// tenant's first grant.
func TestNoColdFloorWithoutLease(t *testing.T) {
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60}}
	r := newRig(t, 1, []string{"a", "b"}, b, "a/1", "b/1", "b/2")
	r.learn("t", map[string]float64{"a": 300})
	r.converge("t", map[string]float64{"a": 300}, 3, 300)
	// b/2 is cut off; a new tenant, pinned to a, appears.
	r.budgets["u"] = shares.Budget{Rate: 30, Burst: 6, Mode: shares.ModePinned, Home: "a"}
	for i := range 15 {
		for _, id := range []string{"a/1", "b/1"} {
			r.report(id, "u", map[string]float64{"a": 60, "b": 10}[r.region[id]], true)
		}
		r.rebalance()
		r.safe("u", 30, fmt.Sprintf("round %d with b/2 cut off", i))
		r.step(time.Second)
	}
	if ga := r.grant("a/1", "u").Rate; ga < 29 {
		t.Fatalf("a holds %.1f/s of the pinned tenant, want all of it", ga)
	}
	// Whatever its own reading says, the cut-off pod enforces nothing for u.
	if rate, burst, _ := r.pods["b/2"].Effective(r.now, "u", shares.Ceiling{Rate: 100, Burst: 10}); rate != 0 || burst != 0 {
		t.Fatalf("b/2, its lease lapsed and holding no grant of u, enforces %.1f/s burst %d", rate, burst)
	}
}

// A late answer to an older report that moves a pod's epoch forward also
// sets its fail-open share: the leader counts a pod reporting epoch E as
// holding epoch E's share, so keeping an older epoch's larger share let two
// pods of one region fail open with 1/1 and 1/2.
func TestLateAnswerMovesTheShareWithTheEpoch(t *testing.T) {
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60}}
	r := newRig(t, 1, []string{"a", "b"}, b, "a/1", "b/1")
	r.learn("t", map[string]float64{"a": 100, "b": 100})
	r.converge("t", map[string]float64{"a": 100, "b": 100}, 2, 300)
	p := r.pods["a/1"]
	term, applied := p.State()
	oldSent := r.now
	old := shares.PodReport{Region: "a", Pod: "a/1", Term: term, Applied: applied, Interval: time.Second,
		Usage: map[string]shares.Usage{"t": {Offered: 100, Admitted: 100}}}
	r.step(100 * time.Millisecond)
	r.report("a/1", "t", 100, true)
	if d := p.FailOpenShare(r.now); d != 1 {
		t.Fatalf("a/1 alone in its region holds 1/%d, want 1/1", d)
	}
	r.addPod("a/2")
	if a := r.report("a/2", "t", 100, true); a.SharePods != 0 {
		t.Fatalf("a joining pod got 1/%d while a/1 holds 1/1", a.SharePods)
	}
	// The old report reaches the leader late; its answer (newer epoch, no
	// share: a/1 has not acknowledged the raise) reaches a/1.
	a, err := r.l.Report(r.now, old)
	if err != nil {
		t.Fatal(err)
	}
	p.Answered(r.now, oldSent, a, r.own("a/1"))
	if _, e := p.State(); e != a.Epoch {
		t.Fatalf("a/1 applied epoch %d, the answer carried %d", e, a.Epoch)
	}
	// a/1 reports that epoch; its answer is lost. a/2 is then handed 1/2.
	r.report("a/1", "t", 100, false)
	if a := r.report("a/2", "t", 100, true); a.SharePods != 2 {
		t.Fatalf("a/2's share 1/%d after a/1 acknowledged the raise, want 1/2", a.SharePods)
	}
	var sum float64
	for _, id := range []string{"a/1", "a/2"} {
		if d := r.pods[id].FailOpenShare(r.now); d > 0 {
			sum += 1 / float64(d)
		}
	}
	if sum > 1+1e-9 {
		t.Fatalf("Σ fail-open shares of region a = %.2f > 1 (a/1 1/%d, a/2 1/%d)", sum,
			p.FailOpenShare(r.now), r.pods["a/2"].FailOpenShare(r.now))
	}
}

// A pod that reaches the coordinators but not etcd holds an older term's
// grant while leaders change and learn; a budget cut reaches it in the
// learning answers: they lower its floors (the checker's seed 55294: the
// pod kept a pinned home's floor of the old budget, 100/s against 30.2/s).
func TestLearningAnswersLowerHeldFloors(t *testing.T) {
	old := map[string]shares.Budget{"t": {Rate: 300, Burst: 60}}
	r := newRig(t, 1, []string{"a", "b"}, old, "a/1", "b/1")
	r.learn("t", map[string]float64{"a": 100, "b": 100})
	r.converge("t", map[string]float64{"a": 100, "b": 100}, 2, 300)
	g := r.grant("a/1", "t")
	if g.FloorRate <= 0 {
		t.Fatalf("a/1 holds no floor: %+v", g)
	}
	// The budget is cut tenfold; a/1 does not see etcd (r.own keeps the
	// old budget). A new leader takes over and learns.
	cut := map[string]shares.Budget{"t": {Rate: 30, Burst: 6}}
	r.step(time.Second)
	r.newLeader(2)
	r.l.SetBudgets(cut)
	r.l.Rebalance(r.now)
	r.report("a/1", "t", 100, true) // learns the new term: its next report carries what it holds
	if a := r.report("a/1", "t", 100, true); !a.Learning || len(a.Entries) != 1 {
		t.Fatalf("learning answer to a pod holding a grant whose floor the cut lowers: %+v", a)
	}
	fr, fb := shares.Floor(cut["t"], r.regions, "a")
	r.step(10 * time.Second) // a/1's lease lapsed: it enforces floors
	rate, burst, leased := r.pods["a/1"].Effective(r.now, "t", r.own("a/1")("t"))
	if leased || rate > fr+1e-9 || burst > fb {
		t.Fatalf("a/1 enforces %.2f/s burst %d (leased %v) after the cut, want at most the new floor %.2f/s burst %d (old floor %.2f/s)",
			rate, burst, leased, fr, fb, g.FloorRate)
	}
}

// An idle tenant without a budget of its own is forgotten: its grants
// shrink to the cold floor, a tombstone drops them once every leased pod
// applied that, and the leader frees it once every leased pod applied the
// tombstone. Nothing along the way raises what a region may enforce above
// the default tier's budget; a pod that was cut off meanwhile drops its
// grant with the full answer it gets when it reports again; a late answer
// does not bring a dropped grant back; and the tenant comes back as new.
func TestIdleTenantIsForgotten(t *testing.T) {
	r := newRig(t, 1, []string{"a", "b"}, map[string]shares.Budget{"t": {Rate: 300, Burst: 60}}, "a/1", "a/2", "b/1", "b/2")
	r.cfg.IdleTimeout, r.cfg.First = 5*time.Second, true
	r.newLeader(1)
	demand := map[string]float64{"a": 25, "b": 5}
	r.converge("x", demand, 6, rigDefault.Rate)
	if g := r.grant("a/1", "x"); g.Rate <= 15 {
		t.Fatalf("a/1 holds %+v of x, want most of the default tier", g)
	}
	before := r.l.Tenants()
	// b/2 is cut off. x goes idle: its pods keep reporting t only.
	// An answer to a report of a/2 as of an old epoch carries x's grant;
	// it arrives late, below.
	term, _ := r.pods["a/2"].State()
	late, err := r.l.Report(r.now, shares.PodReport{Region: "a", Pod: "a/2", Term: term, Applied: 1, Interval: time.Second,
		Usage: map[string]shares.Usage{"t": {Offered: 100, Admitted: 100}}})
	if err != nil || len(late.Entries) == 0 {
		t.Fatalf("report as of epoch 1: %+v, %v", late, err)
	}
	var forgotten bool
	for i := range 20 {
		for _, id := range []string{"a/1", "a/2", "b/1"} {
			r.report(id, "t", 100, true)
		}
		r.rebalance()
		for _, id := range []string{"a/1", "a/2", "b/1"} {
			r.report(id, "t", 100, true)
		}
		r.safe("x", rigDefault.Rate, fmt.Sprintf("idle round %d", i))
		r.step(time.Second)
		if r.l.Tenants() == before-1 {
			forgotten = true
			break
		}
	}
	if !forgotten {
		t.Fatalf("x still tracked after 20 idle rounds (%d tenants)", r.l.Tenants())
	}
	if st := r.l.Stats(); st.Forgotten != 1 {
		t.Fatalf("Forgotten = %d, want 1", st.Forgotten)
	}
	cold, _ := shares.Floor(rigDefault, r.regions, "a")
	for _, id := range []string{"a/1", "a/2", "b/1"} {
		if _, ok := r.pods[id].Grant("x"); ok {
			t.Fatalf("%s still holds a grant of forgotten x", id)
		}
		if rate, _, _ := r.pods[id].Effective(r.now, "x", r.own(id)("x")); rate > cold*(1+1e-9) {
			t.Fatalf("%s enforces %.2f/s for forgotten x, want the cold floor %.2f", id, rate, cold)
		}
	}
	// The late answer to a/2's report from before x went idle carries
	// nothing a/2 applies now.
	r.pods["a/2"].Answered(r.now, r.now.Add(-30*time.Second), late, r.own("a/2"))
	if g, ok := r.pods["a/2"].Grant("x"); ok {
		t.Fatalf("a late answer brought back a/2's dropped grant of x: %+v", g)
	}
	// b/2 comes back holding x's old grant: the answer drops it.
	if _, ok := r.pods["b/2"].Grant("x"); !ok {
		t.Fatal("b/2 (cut off) should still hold its old grant of x")
	}
	if a := r.report("b/2", "t", 100, true); !a.Full {
		t.Fatalf("b/2, behind the tombstone, got a delta answer: %+v", a)
	}
	if g, ok := r.pods["b/2"].Grant("x"); ok {
		t.Fatalf("b/2 kept the grant of forgotten x after its full answer: %+v", g)
	}
	// x comes back: a new tenant, granted again, never above R.
	r.converge("x", demand, 8, rigDefault.Rate)
	if g := r.grant("a/1", "x"); g.Rate <= 15 {
		t.Fatalf("x back: a/1 holds %+v, want most of the default tier again", g)
	}
	if r.l.Tenants() != before {
		t.Fatalf("%d tenants after x came back, want %d", r.l.Tenants(), before)
	}
}

// Busiest ranks tenants by what their pods offered, summed over regions, as
// of the last rebalance; TenantRates gives each region's sum over its pods.
func TestBusiestAndTenantRates(t *testing.T) {
	r := newRig(t, 1, []string{"a", "b"}, map[string]shares.Budget{}, "a/1", "a/2", "b/1")
	r.cfg.First = true
	r.newLeader(1)
	offered := map[string]float64{"t1": 10, "t2": 40, "t3": 25, "t4": 25, "t5": 0}
	for _, id := range r.ids() {
		use := map[string]shares.Usage{}
		for tn, x := range offered {
			use[tn] = shares.Usage{Offered: x, Admitted: x / 2}
		}
		term, applied := r.pods[id].State()
		if _, err := r.l.Report(r.now, shares.PodReport{Region: r.region[id], Pod: id, Term: term, Applied: applied,
			Interval: 2 * time.Second, Usage: use}); err != nil {
			t.Fatal(err)
		}
	}
	r.rebalance()
	if got, want := strings.Join(r.l.Busiest(3), " "), "t2 t3 t4"; got != want {
		t.Fatalf("Busiest(3) = %s, want %s", got, want)
	}
	if got := r.l.Busiest(10); len(got) != 4 {
		t.Fatalf("Busiest(10) = %v, want the 4 tenants that offered anything", got)
	}
	// t2: 40 units over 2 s per pod: 20/s per pod, a has two pods.
	got := r.l.TenantRates("t2")
	if len(got) != 2 || got[0].Offered != 40 || got[1].Offered != 20 || got[0].Admitted != 20 {
		t.Fatalf("TenantRates(t2) = %+v, want a 40/s (admitted 20/s), b 20/s", got)
	}
	if r.l.TenantRates("nobody") != nil {
		t.Fatal("TenantRates of an unknown tenant is not nil")
	}
}

// A report that covers less than an Interval (a pod reports early after a
// shrink) is merged with the rates before it: a few milliseconds of traffic
// must not set the pod's rate (Interval 1 s here).
func TestShortReportsMergeWithTheLastInterval(t *testing.T) {
	type rep struct {
		every   time.Duration
		offered float64 // units in the report
	}
	for _, tc := range []struct {
		name string
		reps []rep
		want float64 // the pod's offered rate after them
	}{
		{"one full interval", []rep{{time.Second, 100}}, 100},
		{"a full interval replaces", []rep{{time.Second, 100}, {time.Second, 40}}, 40},
		{"a longer one replaces", []rep{{time.Second, 100}, {2 * time.Second, 40}}, 20},
		// 20 ms without an arrival: 98 of the 100/s interval's units
		// plus none, over 1 s.
		{"an empty early report", []rep{{time.Second, 100}, {20 * time.Millisecond, 0}}, 98},
		// 20 ms with 10 units (a 500/s reading alone): 98 + 10.
		{"a busy early report", []rep{{time.Second, 100}, {20 * time.Millisecond, 10}}, 108},
		// Two early ones of 50 ms: each keeps 950 ms of the rates
		// before it (95 units at 100/s) and adds its 5.
		{"two early reports", []rep{{time.Second, 100}, {50 * time.Millisecond, 5}, {50 * time.Millisecond, 5}}, 100},
		// A first report shorter than an Interval has nothing to merge.
		{"an early first report", []rep{{100 * time.Millisecond, 3}}, 30},
		// The previous span is shorter than what is missing: all of it.
		{"after a short first", []rep{{100 * time.Millisecond, 3}, {100 * time.Millisecond, 5}}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 1, []string{"a"}, map[string]shares.Budget{}, "a/1")
			r.cfg.First = true
			r.newLeader(1)
			for _, x := range tc.reps {
				r.now = r.now.Add(x.every)
				term, applied := r.pods["a/1"].State()
				if _, err := r.l.Report(r.now, shares.PodReport{Region: "a", Pod: "a/1", Term: term, Applied: applied,
					Interval: x.every, Usage: map[string]shares.Usage{"t": {Offered: x.offered, Admitted: x.offered}}}); err != nil {
					t.Fatal(err)
				}
			}
			r.rebalance()
			got := r.l.TenantRates("t")
			if len(got) != 1 || math.Abs(got[0].Offered-tc.want) > 1e-9 || math.Abs(got[0].Admitted-tc.want) > 1e-9 {
				t.Fatalf("TenantRates(t) = %+v, want offered and admitted %v/s", got, tc.want)
			}
		})
	}
}

// With unknown tenants denied (no default tier) the leader does not track
// a tenant pods report without a budget of its own, and forgets one whose
// budget record goes away (after shrinking its grants to the cold floor,
// 0, and dropping them).
func TestDeniedTenantsNotTracked(t *testing.T) {
	b := map[string]shares.Budget{"listed": {Rate: 100, Burst: 20}}
	r := newRig(t, 1, []string{"a", "b"}, b, "a/1", "b/1")
	r.cfg.First = true
	r.newLeader(1)
	r.l.SetDefault(nil)
	r.converge("listed", map[string]float64{"a": 50, "b": 50}, 4, 100)
	r.converge("stranger", map[string]float64{"a": 50, "b": 50}, 2, 0)
	if n := r.l.Tenants(); n != 1 {
		t.Fatalf("%d tenants tracked, want 1 (stranger has no budget and unknown tenants are denied)", n)
	}
	if _, ok := r.pods["a/1"].Grant("stranger"); ok {
		t.Fatal("a/1 holds a grant of the denied stranger")
	}
	// listed's record goes away: it is forgotten, its grants dropped.
	r.budgets = map[string]shares.Budget{}
	for i := 0; i < 10 && r.l.Tenants() > 0; i++ {
		r.converge("listed", map[string]float64{"a": 50, "b": 50}, 1, 100)
	}
	if n := r.l.Tenants(); n != 0 {
		t.Fatalf("%d tenants tracked after listed lost its budget, want 0", n)
	}
	r.converge("listed", map[string]float64{"a": 50, "b": 50}, 1, 0)
	for _, id := range []string{"a/1", "b/1"} {
		if rate, _, _ := r.pods[id].Effective(r.now, "listed", shares.Ceiling{Rate: 100, Burst: 20}); rate != 0 {
			t.Fatalf("%s enforces %.1f/s for a tenant without a budget while unknown tenants are denied", id, rate)
		}
	}
}

// A floor-fraction change keeps R but moves floors between regions. A pod
// on its floors (its lease lapsed) lowers its floor on its own reading of
// etcd, which may come after the leader's: until then the region may
// enforce the old floor, and the leader does not hand the difference to
// others for two intervals.
func TestFloorChangeWaitsForLaggingViews(t *testing.T) {
	zero := 0.0
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60, Mode: shares.ModePinned, Home: "c", Floor: &zero}}
	r := newRig(t, 1, []string{"a", "b", "c"}, b, "a/1", "b/1", "c/1")
	r.cfg.First = true
	r.newLeader(1)
	r.converge("t", map[string]float64{"c": 300}, 3, 300)
	// c/1 is cut off from the leader: its lease lapses and it enforces its
	// floor, the whole budget.
	for range 8 {
		for _, id := range []string{"a/1", "b/1"} {
			r.report(id, "t", 100, true)
		}
		r.rebalance()
		r.step(time.Second)
	}
	if rate, _, leased := r.pods["c/1"].Effective(r.now, "t", r.own("c/1")("t")); leased || rate != 300 {
		t.Fatalf("c/1 cut off enforces %.1f/s (leased %v), want its floor 300/s", rate, leased)
	}
	// The floor fraction goes to 0.3: c's floor falls to 240/s, a's and
	// b's rise to 30/s. The leader reads it at once, c/1 later.
	r.lagging = map[string]map[string]shares.Budget{"c/1": {"t": b["t"]}}
	f := 0.3
	r.budgets = map[string]shares.Budget{"t": {Rate: 300, Burst: 60, Mode: shares.ModePinned, Home: "c", Floor: &f}}
	// round: a/1 and b/1 report around a rebalance; c/1 stays cut off.
	round := func(when string) {
		t.Helper()
		for _, id := range []string{"a/1", "b/1"} {
			r.report(id, "t", 100, true)
		}
		r.rebalance()
		for _, id := range []string{"a/1", "b/1"} {
			r.report(id, "t", 100, true)
		}
		r.safe("t", 300, when)
		r.step(time.Second)
	}
	for i := range 2 {
		round(fmt.Sprintf("round %d after the floor change, c/1's view behind", i))
	}
	// c/1 reads the change; the others get their floors.
	delete(r.lagging, "c/1")
	r.pods["c/1"].LowerFloors(r.own("c/1"))
	for i := range 3 {
		round(fmt.Sprintf("round %d after c/1 read the change", i))
	}
	if g := r.grant("a/1", "t"); g.Rate < 30-1e-9 {
		t.Fatalf("a/1 holds %+v once every view is current, want its 30/s floor", g)
	}
}

// A tenant of the default tier that went idle while a new leader learned
// may still be enforced, in a region, at an older term's grant that fills
// the whole budget (a region alone in the policy holds all of it): when the
// region set grows, the new regions' leased pods must not enforce their cold
// floors beside it. Retiring cannot shrink that grant, so the tenant is
// rebalanced until it is gone.
func TestIdleHeldGrantWhenRegionsGrow(t *testing.T) {
	r := newRig(t, 1, []string{"a"}, map[string]shares.Budget{}, "a/1", "a/2")
	r.cfg.First = true
	r.newLeader(1)
	r.converge("x", map[string]float64{"a": 40}, 6, rigDefault.Rate)
	if g := r.grant("a/1", "x"); g.Rate < rigDefault.Rate*(1-1e-9) {
		t.Fatalf("a/1 holds %+v of x in a one-region policy, want all of %v/s", g, rigDefault.Rate)
	}

	// The policy gains regions b and c: a new term, learning for the lease
	// and a session TTL. a/1 keeps reporting for a while, then is cut off
	// with a valid lease; x goes idle before learning ends.
	r.regions = []string{"a", "b", "c"}
	r.cfg.Config = shares.DefaultConfig(r.regions...)
	r.cfg.Interval, r.cfg.Lease = time.Second, 5*time.Second
	r.cfg.First, r.cfg.IdleTimeout = false, 2*time.Second
	r.cfg.Learning, r.cfg.Deposed = r.cfg.Lease+2*time.Second, 2*time.Second
	delete(r.pods, "a/2")
	r.newLeader(2)
	for _, id := range []string{"b/1", "b/2", "c/1"} {
		r.addPod(id)
	}
	start := r.now
	for r.l.Learning(r.now) {
		for _, id := range r.ids() {
			if id == "a/1" && r.now.Sub(start) > 4*time.Second {
				continue // cut off
			}
			r.report(id, "t", 1, true)
		}
		r.rebalance()
		r.safe("x", rigDefault.Rate, "learning")
		r.step(500 * time.Millisecond)
	}
	if !r.pods["a/1"].Leased(r.now) || r.grant("a/1", "x").Rate < rigDefault.Rate*(1-1e-9) {
		t.Fatalf("a/1 should still enforce x's whole budget under a renewed lease: %s", r.describe("x"))
	}
	for range 8 {
		r.rebalance()
		for _, id := range []string{"b/1", "b/2", "c/1"} {
			r.report(id, "t", 1, true)
			r.safe("x", rigDefault.Rate, "after learning, "+id+" answered")
		}
		r.step(500 * time.Millisecond)
	}
}

// With a roster of the pods older terms leased, a new leader ends learning
// once each of them has fixed what it holds (Deposed after the term started
// at the soonest), not a lease and a session TTL later; a pod of the roster
// that never reports, or one whose old lease it cannot renew, keeps it
// learning; and a pod ignores an older leader's answers once it heard of the
// newer term.
func TestRosterEndsLearningEarly(t *testing.T) {
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60}}
	demand := map[string]float64{"a": 400, "b": 100}
	all := []string{"a/1", "a/2", "b/1", "b/2"}
	setup := func() *rig {
		r := newRig(t, 1, []string{"a", "b"}, b, all...)
		r.cfg.Learning, r.cfg.Deposed = r.cfg.Lease+2*time.Second, 2*time.Second
		r.newLeader(1)
		r.learn("t", demand)
		r.converge("t", demand, 10, 300)
		return r
	}
	roster := func(r *rig, ids ...string) {
		r.cfg.RosterKnown, r.cfg.Roster = true, nil
		for _, id := range ids {
			r.cfg.Roster = append(r.cfg.Roster, shares.PodKey{Region: r.region[id], Pod: id})
		}
	}
	// run reports from every pod of ids each 250 ms until learning ends
	// or limit passes, checking Σ; it returns how long learning lasted.
	run := func(r *rig, limit time.Duration, ids ...string) time.Duration {
		t.Helper()
		start := r.now
		for r.l.Learning(r.now) && r.now.Sub(start) < limit {
			for _, id := range ids {
				r.report(id, "t", demand[r.region[id]], true)
			}
			r.rebalance()
			r.safe("t", 300, "learning")
			r.step(250 * time.Millisecond)
		}
		return r.now.Sub(start)
	}

	t.Run("every pod reports", func(t *testing.T) {
		r := setup()
		before := r.sum("t")
		roster(r, all...)
		r.newLeader(2)
		took := run(r, time.Minute, all...)
		if took < r.cfg.Deposed || took > r.cfg.Deposed+500*time.Millisecond {
			t.Fatalf("learning lasted %v, want Deposed (%v): every pod fixed what it holds within two reports", took, r.cfg.Deposed)
		}
		if e := r.l.Stats().EarlyEnd; e != r.cfg.Deposed {
			t.Fatalf("EarlyEnd %v, want %v", e, r.cfg.Deposed)
		}
		if s := r.sum("t"); s < before-1e-9 {
			t.Fatalf("pods enforce Σ %.1f/s after learning, want the %.1f/s they held", s, before)
		}
		// The first rebalance is due at once; then the term grants.
		if !r.l.RebalanceDue(r.now) {
			t.Fatal("RebalanceDue false right after learning ended")
		}
		demand2 := map[string]float64{"a": 100, "b": 400}
		r.converge("t", demand2, 8, 300)
		if g := r.grant("b/1", "t"); g.Rate < 150 {
			t.Fatalf("b/1 holds %+v after the shift, want most of R", g)
		}
		if term, _ := r.pods["b/1"].State(); term != 2 {
			t.Fatalf("b/1 holds grants of term %d, want 2", term)
		}
	})

	t.Run("a pod of the roster is silent", func(t *testing.T) {
		r := setup()
		roster(r, all...)
		r.newLeader(2)
		if took := run(r, time.Minute, "a/1", "b/1", "b/2"); took < r.cfg.Learning {
			t.Fatalf("learning lasted %v with a/2 silent, want the full %v", took, r.cfg.Learning)
		}
	})

	t.Run("no roster", func(t *testing.T) {
		r := setup()
		r.newLeader(2)
		if took := run(r, time.Minute, all...); took < r.cfg.Learning {
			t.Fatalf("learning lasted %v without a roster, want the full %v", took, r.cfg.Learning)
		}
	})

	t.Run("an empty roster", func(t *testing.T) {
		r := setup()
		// (Every pod of term 1 is dropped: none holds a lease.)
		for _, id := range all {
			r.pods[id].Removed()
		}
		roster(r)
		r.newLeader(2)
		if got := r.l.LearningUntil().Sub(r.now); got != r.cfg.Deposed {
			t.Fatalf("learning lasts %v with an empty roster, want Deposed (%v)", got, r.cfg.Deposed)
		}
	})

	t.Run("a lease it cannot renew", func(t *testing.T) {
		r := setup()
		// The budget was cut: no held grant is renewed, so each pod keeps
		// its old lease until it lapses and only then fixes its floors.
		cut := map[string]shares.Budget{"t": {Rate: 100, Burst: 20}}
		roster(r, all...)
		r.newLeader(2)
		r.budgets = cut
		r.l.SetBudgets(cut)
		var lapse time.Duration
		for _, id := range all {
			lapse = max(lapse, r.pods[id].LeaseUntil().Sub(r.now))
		}
		start := r.now
		for r.l.Learning(r.now) && r.now.Sub(start) < time.Minute {
			for _, id := range all {
				r.report(id, "t", demand[r.region[id]], true)
			}
			r.rebalance()
			if r.now.Sub(start) >= lapse {
				r.safe("t", 100, "learning after the cut, leases lapsed")
			}
			r.step(250 * time.Millisecond)
		}
		if took := r.now.Sub(start); took < lapse {
			t.Fatalf("learning ended after %v, before the old leases lapsed (%v)", took, lapse)
		}
		r.converge("t", demand, 8, 100)
	})

	t.Run("older answers ignored once the newer term is heard", func(t *testing.T) {
		r := setup()
		old := r.l
		p := r.pods["b/1"]
		term, applied := p.State()
		// Term 1 still runs (deposed, it has not noticed): demand moves to
		// b, and its answer to b/1 carrying the grow is late.
		for range 4 {
			for _, id := range all {
				r.report(id, "t", map[string]float64{"a": 10, "b": 400}[r.region[id]], id != "b/1")
			}
			r.rebalance()
			r.step(time.Second)
		}
		late, err := old.Report(r.now, shares.PodReport{Region: "b", Pod: "b/1", Term: term, Applied: applied, Interval: time.Second})
		if err != nil || len(late.Entries) == 0 {
			t.Fatalf("term 1's answer: %+v, %v", late, err)
		}
		held := r.grant("b/1", "t")
		roster(r, all...)
		r.newLeader(2)
		r.report("b/1", "t", 400, true) // heard of term 2
		p.Answered(r.now, r.now, late, r.own("b/1"))
		if g := r.grant("b/1", "t"); g != held {
			t.Fatalf("b/1 applied term 1's late answer after hearing of term 2: holds %+v, had %+v", g, held)
		}
	})
}

// A pod whose region left the policy drops what it holds; a late answer of
// its old term from before (a duplicate of a full answer, say) must not
// bring back a grant its leader has since replaced. The checker found one
// that did (seed 21486 of 25,000): the region's pod had acknowledged a
// shrink, the leader grew another region into it, and the region, removed,
// re-applied the older, larger grant under a fresh lease.
func TestRemovedPodIgnoresLateAnswers(t *testing.T) {
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60}}
	r := newRig(t, 1, []string{"a", "b"}, b, "a/1", "b/1")
	r.cfg.First = true
	r.newLeader(1)
	r.converge("t", map[string]float64{"a": 400, "b": 100}, 6, 300)
	p := r.pods["b/1"]
	term, _ := p.State()
	// A full answer to b/1 (it says it applied nothing), as of the smaller
	// grant b holds now.
	full, err := r.l.Report(r.now, shares.PodReport{Region: "b", Pod: "b/1", Term: term, Applied: 0, Interval: time.Second,
		Usage: map[string]shares.Usage{"t": {Offered: 100, Admitted: 100}}})
	if err != nil || !full.Full {
		t.Fatalf("a full answer to b/1: %+v, %v", full, err)
	}
	sent := r.now
	before := r.grant("b/1", "t")
	// Demand moves to b: b's grant grows (epochs move on), b/1 applies it.
	r.converge("t", map[string]float64{"a": 100, "b": 400}, 6, 300)
	if g := r.grant("b/1", "t"); g.Epoch <= before.Epoch {
		t.Fatalf("b/1 holds %+v, want a grant newer than %+v", g, before)
	}
	_, reached := p.State()
	p.Removed()
	p.Answered(r.now, sent, full, r.own("b/1"))
	if g, ok := p.Grant("t"); ok {
		t.Fatalf("removed at epoch %d, b/1 applied a late full answer of epoch %d: holds %+v", reached, full.Epoch, g)
	}
	// The leader's next full answer, of the epoch it has reached, applies.
	a := r.report("b/1", "t", 400, true)
	if !a.Full || a.Epoch < reached {
		t.Fatalf("answer after removal: full %v epoch %d, want a full answer of epoch ≥ %d", a.Full, a.Epoch, reached)
	}
	if _, ok := p.Grant("t"); !ok {
		t.Fatal("b/1 did not apply its leader's full answer after removal")
	}
}
