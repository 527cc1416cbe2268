package e2e

import (
	"math"
	"testing"
	"time"
)

// The schedule holds each target with one fault at a time (so a pod never
// has both links cut), stays inside the run, and over a few seeds draws
// every kind of fault.
func TestNemesisSchedule(t *testing.T) {
	topo := fullTopology()
	const d = 90 * time.Second
	kinds := map[faultKind]int{}
	for seed := range uint64(40) {
		s := nemesisSchedule(seed, topo, d)
		if len(s) < 8 {
			t.Fatalf("seed %d: only %d faults in %v", seed, len(s), d)
		}
		held := map[string]time.Duration{}
		for _, f := range s {
			kinds[f.kind]++
			if f.at < 10*time.Second || f.at+f.dur > d-10*time.Second {
				t.Fatalf("seed %d: %s outside [10s, %v)", seed, f, d-10*time.Second)
			}
			if f.dur == 0 {
				continue
			}
			key := f.target
			if f.kind == faultKillLeader || f.kind == faultCutLeaderEtcd {
				key = "coordinators"
			}
			if held[key] > f.at {
				t.Fatalf("seed %d: %s while %s is still held until %v", seed, f, key, held[key])
			}
			held[key] = f.at + f.dur
		}
		if again := nemesisSchedule(seed, topo, d); len(again) != len(s) || again[0] != s[0] {
			t.Fatalf("seed %d: the schedule is not a function of the seed", seed)
		}
	}
	for k := range numFaultKinds {
		if kinds[k] == 0 {
			t.Errorf("no %s in 40 seeds", k)
		}
	}
}

// A budget cut counts for lag more; a raise counts from its instant.
func TestBudgetLimit(t *testing.T) {
	s := func(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }
	sched := []fault{
		{at: s(20), kind: faultBudget, rate: 100, burst: 20},
		{at: s(50), kind: faultBudget, rate: 300, burst: 40},
	}
	lim := budgetLimit(sched, 200, 40, s(8), s(90))
	for _, c := range []struct {
		a, w float64
		want float64
	}{
		{0, 1, 40 + 200},        // the initial budget
		{21, 1, 40 + 200},       // the cut is not in force yet
		{27, 2, 40 + 200 + 100}, // in force from 28 s
		{27.5, 1, 40 + 150},     // half a second of each
		{29, 1, 20 + 100},       // the old burst out of force at 28 s
		{40, 1, 20 + 100},       // the cut alone
		{49, 2, 40 + 100 + 300}, // a raise counts at once
		{0, 60, 40 + 28*200 + 22*100 + 10*300},
	} {
		if got := lim(s(c.a), s(c.w)); math.Abs(got-c.want) > 1e-6 {
			t.Errorf("limit(%vs, %vs) = %.2f, want %.2f", c.a, c.w, got, c.want)
		}
	}
}
