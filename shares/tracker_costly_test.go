package shares_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

// Costly decisions (tokens: 40 units each) at a steady Poisson rate are
// noise, not steps, once the tracker knows how many decisions its units
// came in: counted as units of one decision each, the same traffic looks
// 40 times noisier than a Poisson count and steps again and again.
func TestTrackerCostlyDecisionsAreNotSteps(t *testing.T) {
	steps := func(decisions bool) int {
		rng := rand.New(rand.NewPCG(7, 9))
		start := time.Unix(1_800_000_000, 0)
		tr, err := shares.NewTracker(start, shares.TrackerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		const rate, cost = 25.0, 40.0 // decisions per second, units each
		n := 0
		now, nextReport := start, start.Add(2*time.Second)
		for now.Before(start.Add(120 * time.Second)) {
			now = now.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
			for !now.Before(nextReport) {
				tr.TakeAll(nextReport)
				nextReport = nextReport.Add(2 * time.Second)
			}
			var stepped bool
			if decisions {
				stepped = tr.AddDecisions(now, "t", cost, cost, 1)
			} else {
				stepped = tr.Add(now, "t", cost, cost)
			}
			if stepped {
				tr.TakeSteps(now)
				if now.Sub(start) > 10*time.Second { // (past its first sight and looks)
					n++
				}
			}
		}
		return n
	}
	with, without := steps(true), steps(false)
	if with > 2 {
		t.Errorf("with decisions counted: %d steps in 110 s of steady traffic, want at most 2", with)
	}
	if without < 10*max(with, 1) {
		t.Errorf("units alone: %d steps, with decisions %d: the test no longer shows the lumps' noise", without, with)
	}
	t.Logf("steps of steady 25/s × 40-unit decisions in 110 s: %d counted as units, %d with decisions", without, with)
}
