package shares_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

// A tenant under its budget whose per-interval counts wander as a sparse
// key's do (a few units each interval, Poisson) keeps its grants once they
// cover its demand: the leader does not move the spare from region to
// region with every interval's noise (without that rule: 100 changes in
// these 60 rebalances).
func TestUnderBudgetNoiseKeepsGrants(t *testing.T) {
	cfg := shares.DefaultConfig(regions...)
	l := newLeader(t, cfg, shares.Budget{Rate: 5, Burst: 10})
	mean := map[string]float64{"us-east": 0.35, "eu-west": 0.1, "ap-south": 0.05}
	rng := rand.New(rand.NewPCG(1, 2))
	noisy := func() map[string]float64 {
		d := map[string]float64{}
		for _, r := range regions { // (in order: the same draws every run)
			d[r] = float64(poisson(rng, mean[r]*cfg.Interval.Seconds())) / cfg.Interval.Seconds()
		}
		return d
	}
	for range 10 {
		l.round(noisy(), true)
	}
	const rounds = 60
	changes := 0
	for range rounds {
		changes += len(l.round(noisy(), true))
		var sum float64
		for _, r := range regions {
			sum += l.rate(r)
		}
		if sum > 5*(1+1e-9) {
			t.Fatalf("Σ grants %.3f above R = 5", sum)
		}
	}
	for _, r := range regions {
		if got := l.rate(r); got < mean[r] {
			t.Errorf("%s: grant %.2f/s below its mean demand %.2f/s", r, got, mean[r])
		}
	}
	// Two minutes of noise: a change a region every 10 s at most.
	if changes > 20 {
		t.Errorf("%d grant changes in %d rebalances of noise under the budget, want ≤ 20", changes, rounds)
	}
	t.Logf("%d grant changes in %d rebalances", changes, rounds)
}

func poisson(rng *rand.Rand, mean float64) int {
	l, k, p := math.Exp(-mean), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// A key seen once is not read as a burst: its first sight asks for a grant
// at a rate over the time since the last periodic report (at least a
// Window), and one decision at its second look is no step.
func TestTrackerSparseKey(t *testing.T) {
	tr, err := shares.NewTracker(t0, shares.TrackerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(1500 * time.Millisecond)
	if !tr.Add(now, "k", 1, 1) {
		t.Fatal("a first sight is a step (it asks for a grant)")
	}
	usage, interval := tr.TakeSteps(now)
	u, ok := usage["k"]
	if !ok || !u.Step {
		t.Fatalf("step report %+v lacks k as a step", usage)
	}
	if rate := u.Offered / interval.Seconds(); rate > 1/1.5+1e-9 {
		t.Errorf("first sight 1.5 s after the last report reads as %.2f/s, want ≤ %.2f/s (one unit over that time)", rate, 1/1.5)
	}
	// Its next decision, seconds later, is alone in its window.
	now = now.Add(2 * time.Second)
	if tr.Add(now, "k", 1, 1) {
		usage, interval := tr.TakeSteps(now)
		t.Errorf("a lone decision at the second look is a step: %+v over %v", usage["k"], interval)
	}
	// A busy key still says its rate at its second look.
	busy := t0.Add(1500 * time.Millisecond)
	if !tr.Add(busy, "b", 1, 1) {
		t.Fatal("b's first sight is no step")
	}
	tr.TakeSteps(busy)
	stepped := false
	for i := 1; i <= 40 && !stepped; i++ {
		at := busy.Add(time.Duration(i) * 25 * time.Millisecond) // 40/s
		if tr.Add(at, "b", 1, 1) {
			stepped = true
			usage, interval := tr.TakeSteps(at)
			if rate := usage["b"].Offered / interval.Seconds(); rate < 20 {
				t.Errorf("busy key's second look reads %.1f/s, want near 40/s", rate)
			}
		}
	}
	if !stepped {
		t.Error("a key at 40/s never said its rate at its second look")
	}
}

// Bursts absorb clumps of arrivals, whose size grows far slower than the
// rate: half of the burst above the floors is split equally among the
// regions with a grant above their floor, half in proportion to rate. At
// 70/20/10 of 1.5R the quietest region gets 43 of B = 200 (in proportion
// to rate alone it got 20, which a Poisson clump at its 105/s overruns).
func TestBurstSplitFavoursQuietRegions(t *testing.T) {
	l := newLeader(t, shares.DefaultConfig(regions...), shares.Budget{Rate: 1000, Burst: 200})
	l.converge(map[string]float64{"us-east": 1050, "eu-west": 300, "ap-south": 150})
	g := l.a.Grants("t")
	var sum int64
	for _, r := range regions {
		sum += g[r].Burst
	}
	if sum > 200 {
		t.Fatalf("Σ bursts %d above B = 200: %+v", sum, g)
	}
	if g["ap-south"].Burst < 40 || g["eu-west"].Burst < 40 {
		t.Errorf("bursts %d/%d/%d: the quiet regions got less than 40 each", g["us-east"].Burst, g["eu-west"].Burst, g["ap-south"].Burst)
	}
	if g["us-east"].Burst <= g["eu-west"].Burst {
		t.Errorf("bursts %d/%d/%d: the busiest region got no more than the others", g["us-east"].Burst, g["eu-west"].Burst, g["ap-south"].Burst)
	}
}

// FirstSights counts the steps that are tenants seen for the first time
// (the pod reports them within the acknowledgement's gap), not a known
// tenant's step, and TakeSteps clears it with the steps.
func TestTrackerFirstSights(t *testing.T) {
	tr, err := shares.NewTracker(t0, shares.TrackerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Second)
	tr.Add(now, "a", 1, 1)
	tr.Add(now, "b", 1, 1)
	tr.Add(now, "a", 1, 1) // (already stepped)
	if n, s := tr.FirstSights(), tr.Steps(); n != 2 || s != 2 {
		t.Fatalf("two tenants seen for the first time: FirstSights %d, Steps %d, want 2 and 2", n, s)
	}
	tr.TakeSteps(now)
	if n := tr.FirstSights(); n != 0 {
		t.Fatalf("after TakeSteps: FirstSights %d, want 0", n)
	}
	// a, a Window on, at a rate that says something: a step (its second
	// look), not a first sight.
	stepped := false
	for i := 1; i <= 400 && !stepped; i++ {
		stepped = tr.Add(now.Add(time.Duration(i)*time.Millisecond), "a", 1, 1)
	}
	if !stepped {
		t.Fatal("a's second look is no step")
	}
	if n := tr.FirstSights(); n != 0 {
		t.Errorf("a known tenant's step counted as a first sight (%d)", n)
	}
}
