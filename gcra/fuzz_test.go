package gcra

import (
	"errors"
	"testing"
)

// FuzzTwinBound: over any sequence of decisions on one key (time moving
// forward by fuzzed steps, fuzzed costs), the admitted units in every window
// between two admitted decisions i ≤ j satisfy
// Σ cost(i..j) ≤ B + ⌊(t_j − t_i)/T⌋.
func FuzzTwinBound(f *testing.F) {
	f.Add(uint32(200_000), uint16(3), []byte{0, 0, 0, 0, 0, 0, 250, 0, 0, 0})
	f.Add(uint32(1), uint16(1), []byte{1, 1, 1, 1, 0, 0, 0, 0})
	f.Add(uint32(1000), uint16(200), []byte{7, 9, 0, 200, 0, 199, 3, 1, 255, 255})
	f.Fuzz(func(t *testing.T, tRaw uint32, bRaw uint16, steps []byte) {
		l := Limit{T: 1 + int64(tRaw)%10_000_000, Burst: 1 + int64(bRaw)%1000}
		if len(steps) > 400 {
			steps = steps[:400]
		}
		var hits []hit
		var s State
		now := int64(1_700_000_000_000_000)
		for i := 0; i+1 < len(steps); i += 2 {
			// dt in multiples of T/16, so windows cross T boundaries often.
			now += int64(steps[i]) * l.T / 16
			cost := 1 + int64(steps[i+1])%l.Burst
			ns, r, _ := DecideMicros(s, now, l, cost)
			if r.Allowed {
				s = ns
				hits = append(hits, hit{at: now, cost: cost})
			} else if r.RetryAfter <= 0 {
				t.Fatalf("denied at %d with retry-after %v", now, r.RetryAfter)
			}
		}
		checkWindows(t, l, hits)
	})
}

// FuzzConvertNoMint: restating a key under a new limit never makes more
// units available at that instant than the old limit had, nor more than the
// new burst. (Domain: x·T' < 2^52, where Convert's float steps round like
// exact ceiling division; see Convert.)
func FuzzConvertNoMint(f *testing.F) {
	f.Add(uint32(200_000), uint16(3), uint32(100_000), uint16(6), int64(300_000))
	f.Add(uint32(1000), uint16(200), uint32(7), uint16(1), int64(-5))
	f.Fuzz(func(t *testing.T, t0 uint32, b0 uint16, t1 uint32, b1 uint16, off int64) {
		old := Limit{T: 1 + int64(t0)%10_000_000, Burst: 1 + int64(b0)%1000}
		nl := Limit{T: 1 + int64(t1)%10_000_000, Burst: 1 + int64(b1)%1000}
		const now = int64(1_700_000_000_000_000)
		if off < 0 {
			off = -(-off % (2 * old.T))
		} else {
			off %= old.Burst*old.T + 1
		}
		s := State{TAT: now + off, T: old.T, Burst: old.Burst}
		greedy := func(s State, l Limit) int64 {
			var n int64
			for {
				ns, r, _ := DecideMicros(s, now, l, 1)
				if !r.Allowed {
					return n
				}
				s, n = ns, n+1
			}
		}
		before, after := greedy(s, old), greedy(s, nl)
		if after > before || after > nl.Burst {
			t.Fatalf("state %+v, %+v → %+v: %d units before the change, %d after", s, old, nl, before, after)
		}
	})
}

func TestValidateRequests(t *testing.T) {
	l := Limit{T: 1000, Burst: 5}
	many := make([]Request, 20)
	for i := range many {
		many[i] = Request{Key: string(rune('a' + i)), Limit: l, Cost: 1}
	}
	dup := append([]Request(nil), many...)
	dup[19].Key = "c"
	cases := []struct {
		name  string
		reqs  []Request
		want  error
		index int
	}{
		{"ok", []Request{{Key: "k", Limit: l, Cost: 5}}, nil, 0},
		{"many ok", many, nil, 0},
		{"none", nil, ErrNoRequests, -1},
		{"empty key", []Request{{Key: "k", Limit: l, Cost: 1}, {Limit: l, Cost: 1}}, ErrKey, 1},
		{"cost", []Request{{Key: "k", Limit: l, Cost: 6}}, ErrCostExceedsBurst, 0},
		{"limit", []Request{{Key: "k", Limit: Limit{T: 1, Burst: 0}, Cost: 1}}, ErrBurst, 0},
		{"duplicate, short", []Request{{Key: "k", Limit: l, Cost: 1}, {Key: "j", Limit: l, Cost: 1}, {Key: "k", Limit: l, Cost: 1}}, ErrDuplicateKey, 2},
		{"duplicate, long", dup, ErrDuplicateKey, 19},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateRequests(c.reqs)
			if c.want == nil {
				if err != nil {
					t.Fatalf("ValidateRequests = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("ValidateRequests = %v, want %v", err, c.want)
			}
			var ie *ItemError
			if c.index >= 0 && (!errors.As(err, &ie) || ie.Index != c.index) {
				t.Fatalf("ValidateRequests = %v, want an *ItemError for index %d", err, c.index)
			}
		})
	}
}

// FuzzTwinBoundClockSteps: as FuzzTwinBound, but the clock may also jump
// backwards (Redis TIME after a failover to a replica whose clock is
// behind). A jump back takes no time, and from there the clock runs forward
// again at the real rate: measured in real time r (the sum of the forward
// steps), every window between two admitted decisions still satisfies
// Σ cost(i..j) ≤ B + ⌊(r_j − r_i)/T⌋: a jump back never admits more.
func FuzzTwinBoundClockSteps(f *testing.F) {
	f.Add(uint32(200_000), uint16(3), []byte{0, 0, 0, 0, 200, 0, 0, 0, 250, 0, 10, 0})
	f.Add(uint32(200_000), uint16(3), []byte{0, 48, 0, 48, 250, 48, 250, 50, 48})
	f.Add(uint32(1000), uint16(10), []byte{255, 1, 0, 1, 129, 1, 0, 1, 127, 1, 0, 1})
	f.Fuzz(func(t *testing.T, tRaw uint32, bRaw uint16, steps []byte) {
		l := Limit{T: 1 + int64(tRaw)%10_000_000, Burst: 1 + int64(bRaw)%1000}
		if len(steps) > 400 {
			steps = steps[:400]
		}
		var hits []hit
		var s State
		now := int64(1_700_000_000_000_000)
		var real int64
		for i := 0; i+1 < len(steps); i += 2 {
			// A signed step in multiples of T/16: from 8 T back to 8 T on.
			step := (int64(steps[i]) - 128) * l.T / 16
			now += step
			real += max(0, step)
			cost := 1 + int64(steps[i+1])%l.Burst
			ns, r, _ := DecideMicros(s, now, l, cost)
			if r.Allowed {
				s = ns
				hits = append(hits, hit{at: real, cost: cost})
			} else if r.RetryAfter <= 0 {
				t.Fatalf("denied at %d with retry-after %v", now, r.RetryAfter)
			}
		}
		checkWindows(t, l, hits)
	})
}

// hit is an admitted decision: when (on the time the bound counts) and its cost.
type hit struct{ at, cost int64 }

// checkWindows fails t unless every window between two admitted decisions
// i ≤ j satisfies Σ cost(i..j) ≤ B + ⌊(at_j − at_i)/T⌋.
func checkWindows(t *testing.T, l Limit, hits []hit) {
	t.Helper()
	for i := range hits {
		var sum int64
		for j := i; j < len(hits); j++ {
			sum += hits[j].cost
			if bound := l.Burst + (hits[j].at-hits[i].at)/l.T; sum > bound {
				t.Fatalf("limit %+v: %d units admitted in [%d, %d], bound %d", l, sum, hits[i].at, hits[j].at, bound)
			}
		}
	}
}
