package shares_test

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

// A cold floor the policy lowers is counted at its older value only while
// a pod may still hold it: until every lease an answer carried while it was
// current has ended. Then a new tenant's first grant in another region is
// whole again, at its first report.
//
// Two regions, two pods each. The default tier is pinned to b (b's cold
// floor the whole budget, a's none), then to a. Right after the switch b's
// pods still hold the old cold floor: a new tenant seen in a gets nothing
// in a (Σ enforced would be 2R). Every pod reports each second (their
// answers carry the new cold floors); once the leases granted before the
// switch have ended, a tenant seen for the first time in a gets the whole
// budget in the answer to that first report, while b's pods, holding the
// new cold floor (none), enforce nothing for it.
func TestLoweredColdFloorRetires(t *testing.T) {
	r := newRig(t, 1, []string{"a", "b"}, map[string]shares.Budget{}, "a/1", "a/2", "b/1", "b/2")
	pinned := func(home string) *shares.Budget {
		return &shares.Budget{Rate: 30, Burst: 6, Mode: shares.ModePinned, Home: home}
	}
	r.l.SetDefault(pinned("b"))
	r.deflt = pinned("b")
	r.learn("x", map[string]float64{"a": 5, "b": 5})
	r.converge("x", map[string]float64{"a": 5, "b": 5}, 2, 30)
	if rate, _, _ := r.pods["b/1"].Effective(r.now, "n", r.own("b/1")("n")); rate != 30 {
		t.Fatalf("b/1 enforces %.1f/s for a tenant it holds no grant of, want its cold floor 30/s", rate)
	}
	switched := r.now
	r.l.SetDefault(pinned("a"))
	// b's pods have not heard of the switch: they enforce 30/s for any
	// new tenant (their own reading has not moved either).
	r.deflt = pinned("a")
	r.laggingDeflt = map[string]shares.Budget{"b/1": *pinned("b"), "b/2": *pinned("b")}
	r.step(100 * time.Millisecond)
	r.early("a/1", "n", 20, true)
	if g := r.grant("a/1", "n"); g.Rate > 0 {
		t.Fatalf("right after the switch a/1 got %.1f/s of n while b's pods still hold the old cold floor (30/s): Σ 60/s of 30/s", g.Rate)
	}
	r.safe("n", 30, "right after the switch")
	r.laggingDeflt = nil
	// Every pod reports each second.
	for r.now.Before(switched.Add(r.cfg.Lease + 2*time.Second)) {
		r.step(time.Second)
		for _, id := range r.ids() {
			r.report(id, "x", 5, true)
		}
		r.rebalance()
		r.safe("n", 30, "after the switch")
	}
	for _, id := range []string{"b/1", "b/2"} {
		if rate, _, _ := r.pods[id].Effective(r.now, "m", r.own(id)("m")); rate != 0 {
			t.Fatalf("%s enforces %.1f/s for a tenant it holds no grant of, want the new cold floor (none)", id, rate)
		}
	}
	r.early("a/1", "m", 20, true)
	if g := r.grant("a/1", "m"); g.Rate < 30*(1-1e-9) {
		t.Errorf("%v after the switch, a tenant seen first in a got %.1f/s in the answer to that report, want the whole 30/s (b's pods hold no cold floor)", r.now.Sub(switched), g.Rate)
	}
	r.safe("m", 30, "the new tenant's first grant")
}

// An answer that renews a pod's lease brings the pod's cold floor down to
// its own even when it does not set it (an answer behind the epoch a push
// moved the pod to, or one to an older report): the leader stops counting
// a lowered cold floor once the leases of the answers that carried it have
// ended, so a lease from a later answer must not keep the older floor.
func TestRenewingAnswerLowersColdFloor(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	high, low := shares.Ceiling{Rate: 30, Burst: 6}, shares.Ceiling{Rate: 3, Burst: 1}
	ownAll := func(string) shares.Ceiling { return high }
	for _, c := range []struct {
		name string
		// apply delivers the later answer (cold low, lease renewed) after
		// the pod applied a first answer (cold high) at t0.
		apply func(p *shares.Pod, later shares.Answer)
	}{
		{"behind the epoch a push moved the pod to", func(p *shares.Pod, later shares.Answer) {
			p.Pushed(t0.Add(time.Second), shares.Answer{Term: 1, Epoch: 3, Cold: high}, ownAll)
			p.Answered(t0.Add(2*time.Second), t0.Add(1500*time.Millisecond), later, ownAll)
		}},
		{"to an older report than the last answered", func(p *shares.Pod, later shares.Answer) {
			p.Answered(t0.Add(1500*time.Millisecond), t0.Add(1200*time.Millisecond), shares.Answer{Term: 1, Epoch: 2, Lease: 5 * time.Second, Cold: high}, ownAll)
			later.Lease = 10 * time.Second // (ends after the one above)
			p.Answered(t0.Add(2*time.Second), t0.Add(time.Second), later, ownAll)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := shares.NewPod("a", 0)
			p.Answered(t0, t0, shares.Answer{Term: 1, Epoch: 1, Full: true, Lease: 5 * time.Second, Cold: high}, ownAll)
			before := p.LeaseUntil()
			c.apply(p, shares.Answer{Term: 1, Epoch: 2, Lease: 5 * time.Second, Cold: low})
			if !p.LeaseUntil().After(before) {
				t.Fatalf("the later answer did not renew the lease (%v, was %v): the case tests nothing", p.LeaseUntil(), before)
			}
			if rate, burst, _ := p.Effective(t0.Add(3*time.Second), "new", high); rate != low.Rate || burst != low.Burst {
				t.Errorf("a tenant without a grant gets %.1f/s burst %d under a lease the later answer renewed, want its cold floor %.1f/s burst %d", rate, burst, low.Rate, low.Burst)
			}
		})
	}
}

// A cold floor that rises with no other falling reaches no pod before the
// tenants granted elsewhere hold a grant in the region: their grants
// elsewhere were made counting the lower cold floor here. Three regions,
// two pods each, a default tier without floors (no cold floor anywhere);
// a new tenant steps in a and takes all of its budget (b and c get zero
// first grants only at the periodic pass); then the default tier's floor
// becomes 10%, every region's cold floor rising from 0 to 3.3/s. b's and
// c's pods take the raised cold floor with their next answer, and with it
// a zero grant of the tenant: Σ enforced stays within R (without the zero
// grants, b and c enforced 3.3/s each beside a's 100/s).
func TestRaisedColdFloorSparesGrantedTenants(t *testing.T) {
	r := newRig(t, 1, []string{"a", "b", "c"}, map[string]shares.Budget{}, "a/1", "a/2", "b/1", "b/2", "c/1", "c/2")
	none := 0.0
	deflt := &shares.Budget{Rate: 100, Burst: 20, Floor: &none}
	r.l.SetDefault(deflt)
	r.deflt = deflt
	r.learn("x", map[string]float64{"a": 5, "b": 5, "c": 5})
	r.converge("x", map[string]float64{"a": 5, "b": 5, "c": 5}, 2, 100)
	r.step(100 * time.Millisecond)
	r.early("a/1", "n", 150, true)
	r.report("a/2", "x", 5, true)
	if g := r.grant("a/1", "n"); g.Rate < 99 {
		t.Fatalf("a/1 holds %.1f/s of the new tenant after its step, want all of the 100/s (the test needs a's grant)", g.Rate)
	}
	for _, id := range []string{"b/1", "c/1"} {
		r.report(id, "x", 5, true)
		if _, ok := r.pods[id].Grant("n"); ok {
			t.Fatalf("%s holds a grant of the new tenant before the switch: the test needs it on its cold floor", id)
		}
	}
	r.safe("n", 100, "after the step")
	floor := 0.1
	raised := &shares.Budget{Rate: 100, Burst: 20, Floor: &floor}
	r.l.SetDefault(raised)
	r.deflt = raised
	for _, id := range r.ids() {
		r.report(id, "x", 5, true)
		r.safe("n", 100, id+" applied the answer after the switch")
	}
	if rate, _, _ := r.pods["b/1"].Effective(r.now, "m", r.own("b/1")("m")); rate < 3 {
		t.Fatalf("b/1 enforces %.1f/s for a tenant it never saw, want the raised cold floor 3.3/s (else the test tests nothing)", rate)
	}
	for range 4 {
		r.step(time.Second)
		for _, id := range r.ids() {
			r.report(id, "x", 5, true)
		}
		r.rebalance()
		r.safe("n", 100, "converging after the switch")
	}
}
