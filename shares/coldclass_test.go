package shares_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

// A leased pod that holds no grant of a budget enforces the cold floor of
// the budget's class (the tenant's budget, each budget name, each global
// limit's keys), lowered by the floor its own reading of the budget gives.
// The leader counts that class's cold floor in the region's ceiling until
// the region acknowledges its first grant. The class matters where the
// pod's reading is behind the leader's (I4 counts pods with stale views):
// a budget of its own the pod has not read yet, or a class default the
// leader lowered while the pod still holds the older cold floor. The
// other classes' cold floors are larger or smaller than the right one, so
// counting the wrong one over-grants (Σ enforced above R) or under-grants
// (the first grants leave part of R unused while every region is within
// its floor).
//
// Three regions, two pods each. c/1's view of etcd is behind the leader's,
// and it does not report in the round the traffic starts, so it enforces
// a cold floor while a and b take their first grants.
func TestColdFloorOfItsClass(t *testing.T) {
	key := shares.KeyBudgetID("t1", "user", "alice")
	cases := []struct {
		name string
		// deflt is the tenant budget's default (class 0); named, the
		// named budgets' and keyed limits' defaults by class, set in
		// this order (so that the classes are numbered by it).
		deflt shares.Budget
		named []namedDefault
		// budgets are budgets of their own, set as the traffic starts
		// (an ID with one from the start holds floor grants before any
		// traffic), which c/1 has not read.
		budgets map[string]shares.Budget
		// lowered: class defaults the leader lowers once the pods have
		// their cold floors (before the traffic), which c/1 has not read.
		lowered []namedDefault
		demand  map[string]map[string]float64 // by ID, by region
		// c1: what c/1 enforces for each ID before its first grant.
		c1 map[string]float64
	}{
		{
			// tokens' cold floor (100/s a region) is far above the
			// tenant budget's (1/s) and above t1/tokens' own floor
			// (20/s): counting class 0's lets a and b take 288/s each
			// beside c/1's 100/s, 675/s of 600/s.
			name:    "named cold floor above the tenant budget's",
			deflt:   shares.Budget{Rate: 30, Burst: 6},
			named:   []namedDefault{{"tokens", shares.Budget{Rate: 3000, Burst: 600}}},
			budgets: map[string]shares.Budget{"t1/tokens": {Rate: 600, Burst: 120}},
			demand: map[string]map[string]float64{
				"t1/tokens": {"a": 400, "b": 400},
				"t1":        {"a": 20, "b": 20},
			},
			c1: map[string]float64{"t1/tokens": 100, "t1": 1},
		},
		{
			// The reverse: the tenant budget's cold floor (100/s) is
			// far above tokens' (20/s): counting it for t1/tokens
			// leaves 75/s of its 600/s idle at first (and grants
			// nothing at all once Σ cold floors passes R), while t1,
			// whose own budget c/1 has not read, needs it counted.
			name:    "tenant budget's cold floor above the named one's",
			deflt:   shares.Budget{Rate: 3000, Burst: 600},
			named:   []namedDefault{{"tokens", shares.Budget{Rate: 600, Burst: 120}}},
			budgets: map[string]shares.Budget{"t1": {Rate: 600, Burst: 120}},
			demand: map[string]map[string]float64{
				"t1/tokens": {"a": 400, "b": 400},
				"t1":        {"a": 400, "b": 400},
			},
			c1: map[string]float64{"t1/tokens": 20, "t1": 100},
		},
		{
			// A global limit's keys (class "user=") beside a named
			// budget: the key limit's default falls from 3000/s to
			// 600/s, c/1 still holds its cold floor of 100/s, and
			// tokens' (20/s) or the tenant budget's (1/s) would let a
			// and b take too much.
			name:  "key class beside a named one, key default lowered",
			deflt: shares.Budget{Rate: 30, Burst: 6},
			named: []namedDefault{
				{"tokens", shares.Budget{Rate: 600, Burst: 120}},
				{"user=", shares.Budget{Rate: 3000, Burst: 600}},
			},
			lowered: []namedDefault{{"user=", shares.Budget{Rate: 600, Burst: 120}}},
			demand: map[string]map[string]float64{
				key:         {"a": 400, "b": 400},
				"t1/tokens": {"a": 400, "b": 400},
			},
			c1: map[string]float64{key: 100, "t1/tokens": 20},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newClassWorld(t, c.deflt, c.named)
			w.stale["c/1"] = true
			w.learn()
			for _, d := range c.lowered {
				w.setNamed(d.name, d.b)
			}
			maps.Copy(w.budgets, c.budgets)
			// The traffic starts; c/1 is silent for a round.
			w.demand = c.demand
			ids := slices.Sorted(maps.Keys(c.demand))
			w.reportAll("first reports", "c/1")
			first := w.rebalance()
			w.checkAll(ids, "first rebalance")
			w.reportAll("first grants applied", "c/1")
			// The window the test is about: c/1 enforces its cold floor.
			for id, want := range c.c1 {
				if rate, _, leased := w.r.pods["c/1"].Effective(w.r.now, id, w.own("c/1")(id)); leased || rate != want {
					t.Fatalf("c/1 enforces %.1f/s for %s (leased grant %v), want its cold floor %.1f/s", rate, id, leased, want)
				}
			}
			for _, id := range ids {
				w.checkFirst(id, first)
			}
			w.r.step(time.Second)
			for i := range 12 {
				w.reportAll(fmt.Sprintf("round %d", i))
				w.rebalance()
				w.reportAll(fmt.Sprintf("round %d, grants applied", i))
				w.r.step(time.Second)
			}
			// Converged: a and b share R.
			for _, id := range ids {
				b := w.leaderBudget(id)
				ga, gb := w.r.grant("a/1", id), w.r.grant("b/1", id)
				if s := ga.Rate + gb.Rate; s < 0.9*b.Rate || s > b.Rate*(1+1e-9) {
					t.Errorf("%s converged: grants a %.1f/s, b %.1f/s, want Σ within 10%% below R %.0f/s", id, ga.Rate, gb.Rate, b.Rate)
				}
			}
		})
	}
}

type namedDefault struct {
	name string
	b    shares.Budget
}

// classWorld is a rig whose pods read budgets by class: the tenant
// budget's default, the named defaults (by shares.BudgetClass), and
// budgets of their own, which stale pods have not read (they read the
// defaults as they were before any lowering).
type classWorld struct {
	t       *testing.T
	r       *rig
	deflt   shares.Budget
	named   map[string]shares.Budget // the leader's, by class
	old     map[string]shares.Budget // stale pods', by class
	budgets map[string]shares.Budget // by ID
	stale   map[string]bool          // pods whose view is behind
	demand  map[string]map[string]float64
}

func newClassWorld(t *testing.T, deflt shares.Budget, named []namedDefault) *classWorld {
	t.Helper()
	budgets := map[string]shares.Budget{}
	r := newRig(t, 1, []string{"a", "b", "c"}, budgets, "a/1", "a/2", "b/1", "b/2", "c/1", "c/2")
	w := &classWorld{t: t, r: r, deflt: deflt, named: map[string]shares.Budget{}, budgets: budgets, stale: map[string]bool{}}
	d := deflt
	r.l.SetDefault(&d)
	for _, n := range named {
		w.setNamed(n.name, n.b)
	}
	w.old = maps.Clone(w.named)
	return w
}

// setNamed sets class name's default on the leader (and in current views).
func (w *classWorld) setNamed(name string, b shares.Budget) {
	w.named[name] = b
	w.r.l.SetNamedDefault(name, &b)
}

// leaderBudget returns id's budget as the leader reads it.
func (w *classWorld) leaderBudget(id string) shares.Budget {
	if b, ok := w.budgets[id]; ok {
		return b
	}
	_, name := shares.SplitBudgetID(id)
	if name == "" {
		return w.deflt
	}
	return w.named[shares.BudgetClass(name)]
}

// viewBudget returns id's budget as pod reads it: a stale pod knows no
// budget of its own and the class defaults as they were first set.
func (w *classWorld) viewBudget(pod, id string) shares.Budget {
	if !w.stale[pod] {
		return w.leaderBudget(id)
	}
	return w.firstDefault(id)
}

// firstDefault returns the default of id's class as first set: the
// largest it had (lowering only lowers), whose floors are the class's
// cold floors the leader must count.
func (w *classWorld) firstDefault(id string) shares.Budget {
	_, name := shares.SplitBudgetID(id)
	if name == "" {
		return w.deflt
	}
	return w.old[shares.BudgetClass(name)]
}

// own is pod's floor of a budget by its own reading.
func (w *classWorld) own(pod string) func(string) shares.Ceiling {
	return func(id string) shares.Ceiling {
		fr, fb := shares.Floor(w.viewBudget(pod, id), w.r.regions, w.r.region[pod])
		return shares.Ceiling{Rate: fr, Burst: fb}
	}
}

// report sends pod's report of its share of the region's demand (two pods
// a region) and applies the answer.
func (w *classWorld) report(pod string) {
	w.t.Helper()
	r := w.r
	p := r.pods[pod]
	term, applied := p.State()
	heard, renewed, leased := p.Standing(r.now)
	use := map[string]shares.Usage{}
	for id, d := range w.demand {
		v := d[r.region[pod]] / 2
		use[id] = shares.Usage{Offered: v, Admitted: v}
	}
	a, err := r.l.Report(r.now, shares.PodReport{Region: r.region[pod], Pod: pod, Term: term, Applied: applied,
		Interval: time.Second, Usage: use, Held: p.Held(), Heard: heard, RenewedBy: renewed, Leased: leased})
	if err != nil {
		w.t.Fatalf("report of %s: %v", pod, err)
	}
	p.Answered(r.now, r.now, a, w.own(pod))
}

// reportAll has every pod but skip report, checking every ID with demand
// after each answer.
func (w *classWorld) reportAll(when string, skip ...string) {
	w.t.Helper()
	for _, pod := range w.r.ids() {
		if !slices.Contains(skip, pod) {
			w.report(pod)
			for _, id := range slices.Sorted(maps.Keys(w.demand)) {
				w.check(id, when+", "+pod+" answered")
			}
		}
	}
}

func (w *classWorld) rebalance() []shares.Change {
	w.r.l.SetBudgets(w.budgets)
	ch := w.r.l.Rebalance(w.r.now)
	if w.r.l.Growable() {
		ch = append(ch, w.r.l.Grow(w.r.now)...)
	}
	return ch
}

// learn runs the learning period without traffic, then one rebalance and
// one report of every pod: every pod is synced and leased, with the cold
// floors of every class.
func (w *classWorld) learn() {
	for w.r.l.Learning(w.r.now) {
		w.reportAll("learning")
		w.rebalance()
		w.r.step(time.Second)
	}
	w.rebalance()
	w.reportAll("learnt")
	for _, pod := range w.r.ids() {
		if p := w.r.pods[pod]; !p.Synced() || !p.Leased(w.r.now) {
			w.t.Fatalf("%s after learning: synced %v, leased %v", pod, p.Synced(), p.Leased(w.r.now))
		}
	}
	w.r.step(time.Second)
}

// enforced is Σ over regions of the largest rate and burst a pod of the
// region enforces for id, and what each pod enforces.
func (w *classWorld) enforced(id string) (float64, int64, string) {
	byR, byB := map[string]float64{}, map[string]int64{}
	var d strings.Builder
	for _, pod := range w.r.ids() {
		rate, burst, leased := w.r.pods[pod].Effective(w.r.now, id, w.own(pod)(id))
		reg := w.r.region[pod]
		byR[reg], byB[reg] = max(byR[reg], rate), max(byB[reg], burst)
		fmt.Fprintf(&d, "%s %.1f/%d leased=%v; ", pod, rate, burst, leased)
	}
	var s float64
	var sb int64
	for reg := range byR {
		s += byR[reg]
		sb += byB[reg]
	}
	return s, sb, d.String()
}

// check fails the test when what the pods enforce for id exceeds its
// budget (the leader's).
func (w *classWorld) check(id, when string) {
	w.t.Helper()
	b := w.leaderBudget(id)
	if s, sb, d := w.enforced(id); s > b.Rate*(1+1e-9) || sb > b.Burst {
		w.t.Fatalf("%s: %s: Σ enforced %.1f/s burst %d > R %.0f/s burst %d (%s)", when, id, s, sb, b.Rate, b.Burst, d)
	}
}

func (w *classWorld) checkAll(ids []string, when string) {
	w.t.Helper()
	for _, id := range ids {
		w.check(id, when)
	}
}

// checkFirst checks the first grants of id (every region's, none
// acknowledged) against its class's cold floors: Σ over regions of the
// larger of the grant and the cold floor a leased pod without the grant
// may enforce (the largest the class had) fills R, and no more, as
// demand exceeds R.
func (w *classWorld) checkFirst(id string, first []shares.Change) {
	w.t.Helper()
	b := w.leaderBudget(id)
	cold := w.firstDefault(id)
	got := map[string]shares.Grant{}
	for _, c := range first {
		if c.Tenant == id {
			got[c.Region] = c.Grant
		}
	}
	var s float64
	var sb int64
	var d strings.Builder
	for _, reg := range w.r.regions {
		g, ok := got[reg]
		if !ok {
			w.t.Errorf("%s: no first grant in %s (first rebalance: %v)", id, reg, got)
			continue
		}
		cr, cb := shares.Floor(cold, w.r.regions, reg)
		s += max(g.Rate, cr)
		sb += max(g.Burst, cb)
		fmt.Fprintf(&d, "%s %.1f/%d (cold %.1f/%d); ", reg, g.Rate, g.Burst, cr, cb)
	}
	if s < 0.98*b.Rate || s > b.Rate*(1+1e-9) || sb > b.Burst {
		w.t.Errorf("%s first grants: Σ max(grant, cold floor) %.1f/s burst %d, want within 2%% below R %.0f/s, burst ≤ %d (%s)",
			id, s, sb, b.Rate, b.Burst, d.String())
	}
}

// The allocator alone: every region has reported, none has a grant, and
// each budget class has its own cold floor, set with SetCold and
// SetColdOf. The first rebalance must leave each class's cold floor to
// the regions that may enforce it and grant the rest: Σ over regions of
// the larger of the grant and the region's cold floor of the ID's class
// fills R (demand is above it) and does not pass R or B.
func TestAllocatorFirstGrantsLeaveTheirClassColdFloor(t *testing.T) {
	regs := []string{"a", "b", "c"}
	key := shares.KeyBudgetID("t1", "user", "alice")
	big, mid, tiny := shares.Ceiling{Rate: 100, Burst: 20}, shares.Ceiling{Rate: 80, Burst: 16}, shares.Ceiling{Rate: 1, Burst: 1}
	own := shares.Budget{Rate: 600, Burst: 120} // every ID's (floor 20/s, burst 4)
	cases := []struct {
		name string
		cold map[string]shares.Ceiling // by class name ("" for SetCold), in every region
	}{
		{"named and key classes above the tenant budget's", map[string]shares.Ceiling{"": tiny, "tokens": big, "user=": mid}},
		{"tenant budget's above the named and key classes", map[string]shares.Ceiling{"": big, "tokens": tiny, "user=": mid}},
		{"key class above the others", map[string]shares.Ceiling{"": tiny, "tokens": mid, "user=": big}},
	}
	classOf := func(id string) string {
		_, name := shares.SplitBudgetID(id)
		return shares.BudgetClass(name)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := shares.NewAllocator(shares.DefaultConfig(regs...))
			if err != nil {
				t.Fatal(err)
			}
			for _, reg := range regs {
				for _, name := range []string{"", "tokens", "user="} { // (classes numbered in this order)
					a.SetColdOf(reg, name, c.cold[name])
				}
			}
			ids := []string{"t1", "t1/tokens", key}
			budgets := map[string]shares.Budget{}
			for _, id := range ids {
				budgets[id] = own
			}
			now := t0
			for _, reg := range regs {
				use := map[string]shares.Usage{}
				if reg != "c" {
					for _, id := range ids {
						use[id] = shares.Usage{Offered: 400, Admitted: 400}
					}
				}
				if _, err := a.Report(now, shares.Report{Region: reg, Interval: time.Second, Usage: use}); err != nil {
					t.Fatalf("Report(%s) = %v", reg, err)
				}
			}
			a.Rebalance(now, budgets)
			for _, id := range ids {
				g := a.Grants(id)
				cold := c.cold[classOf(id)]
				var s float64
				var sb int64
				for _, reg := range regs {
					gr, ok := g[reg]
					if !ok {
						t.Fatalf("%s: no first grant in %s (grants %v)", id, reg, g)
					}
					s += max(gr.Rate, cold.Rate)
					sb += max(gr.Burst, cold.Burst)
				}
				if s < 0.98*own.Rate || s > own.Rate*(1+1e-9) || sb > own.Burst {
					t.Errorf("%s (cold floor %+v): Σ max(grant, cold floor) = %.1f/s burst %d, want within 2%% below %.0f/s, burst ≤ %d (grants %v)",
						id, cold, s, sb, own.Rate, own.Burst, g)
				}
			}
		})
	}
}
