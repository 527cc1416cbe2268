package shares_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

// early sends pod id's early report at r.now: tenant's rate stepped to
// offered units/s (over 150 ms), or, with tenant "", none (an answer to a
// nudge); with apply the answer reaches the pod.
func (r *rig) early(id, tenant string, offered float64, apply bool) shares.Answer {
	r.t.Helper()
	p := r.pods[id]
	term, applied := p.State()
	rep := shares.PodReport{Region: r.region[id], Pod: id, Term: term, Applied: applied, Partial: true,
		Interval: 150 * time.Millisecond, Usage: map[string]shares.Usage{}, Held: p.Held()}
	if tenant != "" {
		u := offered * 0.15
		rep.Usage[tenant] = shares.Usage{Offered: u, Admitted: u, Step: true}
	}
	a, err := r.l.Report(r.now, rep)
	if err != nil {
		r.t.Fatalf("early report of %s: %v", id, err)
	}
	if apply {
		p.Answered(r.now, r.now, a, r.own(id))
	}
	return a
}

// A step is rebalanced as its report arrives: the region that lost demand
// gets its shrink in the answer to its own early report, the grow elsewhere
// follows the moment both of its pods acknowledged it, and nothing waits for
// a rebalance tick. Σ enforced stays within R throughout.
func TestStepRebalancesOnArrival(t *testing.T) {
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60}}
	r := newRig(t, 1, []string{"a", "b"}, b, "a/1", "a/2", "b/1", "b/2")
	before := map[string]float64{"a": 400, "b": 20}
	r.learn("t", before)
	r.converge("t", before, 10, 300)
	bigA, smallB := r.grant("a/1", "t").Rate, r.grant("b/1", "t").Rate
	if bigA < 200 || smallB > 80 {
		t.Fatalf("converged grants a %.1f, b %.1f: want a most of R", bigA, smallB)
	}
	r.step(100 * time.Millisecond)

	// b's pods see demand jump (200/s each); a's see it fall (10/s each).
	ans := r.early("b/1", "t", 200, true)
	r.safe("t", 300, "after b/1's step")
	if n := len(r.l.ReportChanges()); n == 0 {
		t.Fatalf("b/1's step changed no grant (answer %+v)", ans)
	}
	r.early("a/1", "t", 10, true)
	if g := r.grant("a/1", "t").Rate; g >= bigA {
		t.Fatalf("a/1 holds %.1f after its step to 10/s, want a shrink below %.1f in its answer", g, bigA)
	}
	r.safe("t", 300, "after a/1's step")
	r.early("a/2", "t", 10, true)
	r.safe("t", 300, "after a/2's step")
	// Both a pods hold a shrink; their next early reports (each sent as
	// it applies a shrink) acknowledge it, and a/1 gets a/2's deeper
	// shrink with its answer and acknowledges that too.
	var grown []shares.Change
	for range 2 {
		r.early("a/1", "", 0, true)
		r.early("a/2", "", 0, true)
		if r.l.Growable() {
			grown = append(grown, r.l.Grow(r.now)...)
		}
		r.safe("t", 300, "acknowledging")
	}
	if len(grown) == 0 {
		t.Fatal("Grow made nothing after the acknowledgements")
	}
	nudged := r.l.Nudges()
	if len(nudged) == 0 {
		t.Fatal("grants changed but Nudges names no region")
	}
	// b's pods, nudged, report and get the grow.
	r.early("b/1", "", 0, true)
	r.early("b/2", "", 0, true)
	r.safe("t", 300, "after the grow")
	if g := r.grant("b/2", "t").Rate; g < 150 {
		t.Errorf("b/2 holds %.1f/s within the same second as the step, want most of R (≥ 150)", g)
	}
}

// A partial report changes only the tenants it carries: the pod's rates of
// the others stay as its last periodic report said, and a report that
// carries no usage at all still renews the region's lease (a region must not
// be revoked while a pod of it holds a lease the leader just gave).
func TestPartialReportsKeepTheRest(t *testing.T) {
	b := map[string]shares.Budget{"t": {Rate: 300, Burst: 60}, "u": {Rate: 300, Burst: 60}}
	r := newRig(t, 1, []string{"a", "b"}, b, "a/1", "b/1")
	demand := map[string]float64{"a": 200, "b": 50}
	r.learn("t", demand)
	r.converge("t", demand, 6, 300)
	r.rebalance()
	rates := r.l.TenantRates("t")
	r.early("a/1", "u", 150, true)
	r.rebalance()
	if got := r.l.TenantRates("t"); got[0].Offered < 0.9*rates[0].Offered {
		t.Errorf("t's rate in a after a partial report of u: %+v, was %+v: want it kept", got, rates)
	}
	// a/1 sends only reports without usage, for longer than a lease: its
	// region stays leased, so its grants are not revoked (and their room
	// is not given to b, which reports as usual).
	g := r.grant("a/1", "t")
	for range 12 {
		r.step(time.Second)
		r.early("a/1", "", 0, true)
		r.report("b/1", "t", 50, true)
		r.rebalance()
		r.report("b/1", "t", 50, true)
		r.safe("t", 300, "reports without usage")
		r.early("a/1", "", 0, true)
	}
	if now := r.grant("a/1", "t"); now.Rate < g.FloorRate || !r.pods["a/1"].Leased(r.now) {
		t.Errorf("a/1 holds %+v (lease valid %v) after a lease of answers to reports without usage, had %+v", now, r.pods["a/1"].Leased(r.now), g)
	}
}

// The tracker notices a step within a few hundred milliseconds, reports the
// new rate near its true value, and stays quiet under steady Poisson noise.
func TestTrackerSteps(t *testing.T) {
	for _, c := range []struct {
		name          string
		before, after float64
		within        time.Duration
	}{
		{"up tenfold", 50, 500, 150 * time.Millisecond},
		{"down fivefold", 350, 70, 350 * time.Millisecond},
		{"doubling", 200, 400, 350 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 11))
			t0 := time.Unix(1_800_000_000, 0)
			tr, err := shares.NewTracker(t0, shares.TrackerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			now := t0
			stepAt := t0.Add(10 * time.Second)
			nextFull := t0.Add(2 * time.Second)
			for {
				rate := c.before
				if !now.Before(stepAt) {
					rate = c.after
				}
				now = now.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
				if !now.Before(nextFull) {
					tr.TakeAll(now)
					nextFull = nextFull.Add(2 * time.Second)
				}
				stepped := tr.Add(now, "t", 1, 1)
				if !stepped {
					if now.After(stepAt.Add(2 * time.Second)) {
						t.Fatalf("no step %v after the rate moved from %v to %v/s", now.Sub(stepAt), c.before, c.after)
					}
					continue
				}
				if now.Before(stepAt) {
					if now.Sub(t0) > 400*time.Millisecond { // (the first sight, and one window on)
						t.Fatalf("step at %v, before the rate moved", now.Sub(t0))
					}
					tr.TakeSteps(now)
					continue
				}
				if d := now.Sub(stepAt); d > c.within {
					t.Errorf("step seen %v after it happened, want within %v", d, c.within)
				}
				u, iv := tr.TakeSteps(now)
				got := u["t"].Offered / iv.Seconds()
				if !u["t"].Step || got < 0.5*c.after || got > 1.5*c.after {
					t.Errorf("step report %+v over %v = %.0f/s, want Step and within 50%% of %v/s", u["t"], iv, got, c.after)
				}
				return
			}
		})
	}

	// Ten minutes of steady Poisson traffic (with denials) per rate.
	for _, rate := range []float64{20, 120, 300, 2000} {
		rng := rand.New(rand.NewPCG(3, uint64(rate)))
		t0 := time.Unix(1_800_000_000, 0)
		tr, _ := shares.NewTracker(t0, shares.TrackerConfig{})
		now, next, steps := t0, t0.Add(2*time.Second), 0
		for now.Before(t0.Add(10 * time.Minute)) {
			now = now.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
			if !now.Before(next) {
				tr.TakeAll(now)
				next = next.Add(2 * time.Second)
			}
			adm := 1.0
			if rng.Float64() < 0.2 {
				adm = 0
			}
			if tr.Add(now, "t", 1, adm) {
				steps++
				tr.TakeSteps(now)
			}
		}
		// The first sight and its second look a Window on, and at most
		// one step of noise (each step is said twice: at once, and over
		// a whole Window after it).
		if steps > 4 {
			t.Errorf("%v/s steady: %d steps in 10 minutes, want ≤ 4", rate, steps)
		}
	}
}

// A periodic report after a step counts the tenant from the step, scaled
// to the report's interval; one soon after it repeats the step's rate.
func TestTrackerCountsFromTheStep(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	tr, _ := shares.NewTracker(t0, shares.TrackerConfig{})
	// 100/s for 2 s, evenly.
	now := t0
	for range 200 {
		now = now.Add(10 * time.Millisecond)
		tr.Add(now, "t", 1, 1)
	}
	tr.TakeSteps(now) // the first sight
	u, iv := tr.TakeAll(now)
	if iv != 2*time.Second {
		t.Fatalf("interval %v, want 2s", iv)
	}
	_ = u
	// 400/s from here: a step, then 1.5 s more before the report.
	var stepAt time.Time
	for range 800 {
		now = now.Add(2500 * time.Microsecond)
		if tr.Add(now, "t", 1, 1) && stepAt.IsZero() {
			stepAt = now
			tr.TakeSteps(now)
		}
	}
	if stepAt.IsZero() {
		t.Fatal("no step from 100/s to 400/s")
	}
	u, iv = tr.TakeAll(now)
	if got := u["t"].Offered / iv.Seconds(); got < 380 || got > 420 {
		t.Errorf("periodic report after the step says %.0f/s, want 400/s (counted from the step)", got)
	}
	if err := (shares.TrackerConfig{Window: time.Millisecond}).Validate(); !errors.Is(err, shares.ErrInvalidConfig) {
		t.Errorf("Window 1ms: %v, want ErrInvalidConfig", err)
	}
	if err := (shares.TrackerConfig{MinChange: -1}).Validate(); !errors.Is(err, shares.ErrInvalidConfig) {
		t.Errorf("MinChange -1: %v, want ErrInvalidConfig", err)
	}
}

// A rate that moves again while a step's second look counts (demand that
// rose and left within a Window: a shift that came right after a step, or
// right after a tenant was first seen) is looked at again, over traffic
// after the look only, until it holds: the tracker says the new rate
// within a second, where the fall itself, to a few units a Window, may not
// pass the test of a step for many Windows.
func TestTrackerFollowsAFallWithinALook(t *testing.T) {
	for _, c := range []struct {
		name     string
		from     float64       // the rate until up (0: the tenant is first seen at up)
		up, down time.Duration // 200/s from up, 10/s from down
	}{
		{"after a step", 20, 10 * time.Second, 10*time.Second + 200*time.Millisecond},
		{"after the first sight", 0, 10 * time.Second, 10*time.Second + 160*time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 9))
			t0 := time.Unix(1_800_000_000, 0)
			tr, err := shares.NewTracker(t0, shares.TrackerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			up, down := t0.Add(c.up), t0.Add(c.down)
			now, nextFull := t0, t0.Add(2*time.Second)
			if c.from == 0 {
				now = up
			}
			var last float64 // the rate the last report said
			var saidAt time.Duration
			for now.Before(down.Add(3 * time.Second)) {
				rate := c.from
				switch {
				case !now.Before(down):
					rate = 10
				case !now.Before(up):
					rate = 200
				}
				now = now.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
				for !now.Before(nextFull) {
					nextFull = nextFull.Add(2 * time.Second)
					if now.Before(up) {
						u, iv := tr.TakeAll(now)
						last = u["t"].Offered / iv.Seconds()
					}
				}
				if tr.Add(now, "t", 1, 1) {
					u, iv := tr.TakeSteps(now)
					last = u["t"].Offered / iv.Seconds()
					if now.After(down) && last < 20 && saidAt == 0 {
						saidAt = now.Sub(down)
					}
				}
			}
			if saidAt == 0 || saidAt > time.Second {
				t.Errorf("rate %v → 200 → 10/s (%v apart): the tracker said %.1f/s last, and a rate below 20/s %v after the fall; want within a second", c.from, c.down-c.up, last, saidAt)
			}
			t.Logf("said %.1f/s %v after the fall", last, saidAt)
		})
	}
}
