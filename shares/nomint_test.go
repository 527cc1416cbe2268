package shares_test

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/gcra"
)

// Enforcing a shrink-then-grow sequence of grants with gcra.Decide, whose
// no-mint conversion (gcra.Convert) restates each live key under its new
// limit, never admits more than B + R·Δ in any window, against greedy
// traffic in every region. The same sequence enforced by keys that start
// afresh on each change (the mistake the conversion prevents) exceeds it:
// the check can fail.
func TestGrantChangesNeverMint(t *testing.T) {
	const (
		R    = 1000.0
		B    = 200
		tick = time.Millisecond
		end  = 9 * time.Second
	)
	type step struct {
		at    time.Duration
		rate  float64
		burst int64
	}
	// Per region: shrinks first, grows only after (as if acknowledged).
	plans := [][]step{
		{{0, 600, 120}, {3 * time.Second, 200, 40}, {6400 * time.Millisecond, 700, 140}},
		{{0, 400, 80}, {3500 * time.Millisecond, 800, 160}, {6 * time.Second, 300, 60}},
	}
	for _, at := range []time.Duration{3 * time.Second, 3500 * time.Millisecond, 6 * time.Second, 6400 * time.Millisecond, end} {
		var sumR float64
		var sumB int64
		for _, p := range plans {
			cur := p[0]
			for _, s := range p {
				if s.at <= at-time.Nanosecond || (s.at == 0) {
					cur = s
				}
			}
			sumR += cur.rate
			sumB += cur.burst
		}
		if sumR > R || sumB > B {
			t.Fatalf("the plan itself exceeds the budget just before %v: (%v, %d)", at, sumR, sumB)
		}
	}

	run := func(fresh bool) (worst float64) {
		states := make([]gcra.State, len(plans))
		idx := make([]int, len(plans))
		var admitted []int64
		for now := time.Duration(0); now < end; now += tick {
			var n int64
			for r, p := range plans {
				for idx[r]+1 < len(p) && p[idx[r]+1].at <= now {
					idx[r]++
					if fresh {
						states[r] = gcra.State{}
					}
				}
				s := p[idx[r]]
				l, err := gcra.FromPerSecond(s.rate, s.burst)
				if err != nil {
					t.Fatal(err)
				}
				for {
					ns, res, err := gcra.Decide(states[r], t0.Add(now), l, 1)
					if err != nil {
						t.Fatal(err)
					}
					states[r] = ns
					if !res.Allowed {
						break
					}
					n++
				}
			}
			admitted = append(admitted, n)
		}
		// worst over windows [a, b] of admitted − R·(t_b − t_a)
		var prefix int64
		best := 1e18
		worst = -1e18
		for j, c := range admitted {
			tj := float64(j) * tick.Seconds()
			best = min(best, float64(prefix)-R*tj)
			prefix += c
			worst = max(worst, float64(prefix)-R*tj-best)
		}
		return worst
	}
	t.Logf("worst excess over R·Δ: converted %.0f, fresh %.0f (B = %d)", run(false), run(true), B)
	if got := run(false); got > B+1 {
		t.Fatalf("with gcra's conversion: a window admitted %.0f above R·Δ, want at most B = %d", got, B)
	}
	if got := run(true); got <= B+1 {
		t.Fatalf("keys restarted on each change admitted at most %.0f above R·Δ; the check cannot tell minting from not", got)
	}
}
