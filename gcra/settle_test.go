package gcra

import (
	"testing"
)

func TestSettleMicros(t *testing.T) {
	l := Limit{T: 1000, Burst: 10}
	const now = int64(1_000_000_000)
	const far = now + 1_000_000 // r0 far ahead: the refund is not capped by time
	for _, c := range []struct {
		name                 string
		s                    State
		reserved, actual, r0 int64
		want                 State
		write                bool
	}{
		{"exact", State{TAT: now + 5000, T: 1000, Burst: 10}, 5, 5, far, State{TAT: now + 5000, T: 1000, Burst: 10}, false},
		{"refund", State{TAT: now + 8000, T: 1000, Burst: 10}, 5, 2, far, State{TAT: now + 5000, T: 1000, Burst: 10}, true},
		{"refund to full, not past it", State{TAT: now + 2000, T: 1000, Burst: 10}, 5, 0, far, State{TAT: now, T: 1000, Burst: 10}, true},
		{"refund to a full key", State{TAT: now - 1, T: 1000, Burst: 10}, 5, 0, far, State{TAT: now - 1, T: 1000, Burst: 10}, false},
		{"refund to a missing key", State{}, 5, 0, far, State{}, false},
		// What time gave back since the decision is not given again: the
		// reservation left the key at now+1500, so at most 1.5 units.
		{"refund capped by the reservation's time", State{TAT: now + 9000, T: 1000, Burst: 10}, 5, 0, now + 1500, State{TAT: now + 7500, T: 1000, Burst: 10}, true},
		{"refund of a reservation time has returned", State{TAT: now + 9000, T: 1000, Burst: 10}, 5, 0, now - 1, State{TAT: now + 9000, T: 1000, Burst: 10}, false},
		{"refund after the grant changed: none", State{TAT: now + 8000, T: 2000, Burst: 5}, 2, 0, far, State{TAT: now + 8000, T: 2000, Burst: 5}, false},
		{"debt", State{TAT: now + 3000, T: 1000, Burst: 10}, 2, 14, 0, State{TAT: now + 15000, T: 1000, Burst: 10}, true},
		{"debt on a rested key", State{TAT: now - 50, T: 1000, Burst: 10}, 1, 4, 0, State{TAT: now + 3000, T: 1000, Burst: 10}, true},
		{"debt on a missing key", State{}, 1, 21, 0, State{TAT: now + 20000, T: 1000, Burst: 10}, true},
		{"debt past the window is forgotten", State{TAT: now + maxWindowMicros - 10, T: 1000, Burst: 10}, 1, 5, 0, State{TAT: now + maxWindowMicros, T: 1000, Burst: 10}, true},
		// Stored under another limit: restated under the reservation's
		// first, without minting, then charged.
		{"debt after a grant changed", State{TAT: now + 8000, T: 2000, Burst: 5}, 1, 3, 0, State{TAT: now + 11000, T: 1000, Burst: 10}, true},
	} {
		got, write := SettleMicros(c.s, now, l, c.reserved, c.actual, c.r0)
		if got != c.want || write != c.write {
			t.Errorf("%s: SettleMicros(%+v, reserved %d, actual %d, r0 %d) = %+v, %v; want %+v, %v", c.name, c.s, c.reserved, c.actual, c.r0, got, write, c.want, c.write)
		}
	}
}

// A refund never gives back what time already did: reserve a whole burst,
// let the key refill, spend it again, then refund everything: the key must
// not admit another burst at once.
func TestRefundAfterRefillMintsNothing(t *testing.T) {
	l := Limit{T: 1_000_000, Burst: 10}
	now := int64(1_700_000_000_000_000)
	s, r, _ := DecideMicros(State{}, now, l, 10)
	if !r.Allowed {
		t.Fatal("reserve")
	}
	r0 := s.TAT
	now += 10 * l.T // refilled
	s, r, _ = DecideMicros(s, now, l, 10)
	if !r.Allowed {
		t.Fatal("spend after refill")
	}
	s, _ = SettleMicros(s, now, l, 10, 0, r0)
	if _, r, _ := DecideMicros(s, now, l, 1); r.Allowed {
		t.Fatalf("after refunding a reservation time had returned, the key admits again at once: %+v", s)
	}
}

func TestCheckActual(t *testing.T) {
	l := Limit{T: 1000, Burst: 10}
	for _, c := range []struct {
		reserved, actual int64
		ok               bool
	}{
		{5, 0, true}, {5, 5, true}, {5, 100, true}, {5, -1, false},
		{5, 5 + maxWindowMicros/1000, true}, {5, 6 + maxWindowMicros/1000, false},
		{0, maxWindowMicros + 1, false},
	} {
		if err := l.CheckActual(c.reserved, c.actual); (err == nil) != c.ok {
			t.Errorf("CheckActual(%d, %d) = %v, want ok %v", c.reserved, c.actual, err, c.ok)
		}
	}
}

// Settling at the instant of the decision leaves the key exactly as a
// decision of the actual cost would have: a refund gives back what was
// unused, a debt charges what was over, and neither mints a unit.
func FuzzSettleIsTheActualCost(f *testing.F) {
	f.Add(int64(1000), int64(10), int64(3000), int64(5), int64(2))
	f.Add(int64(7), int64(200), int64(0), int64(200), int64(0))
	f.Add(int64(20_000), int64(3), int64(-5000), int64(1), int64(9))
	f.Fuzz(func(t *testing.T, T, B, used, reserved, actual int64) {
		T, B = 1+abs(T)%1_000_000, 1+abs(B)%1000
		reserved = 1 + abs(reserved)%B
		actual = abs(actual) % (3 * B)
		l := Limit{T: T, Burst: B}
		const now = int64(1_700_000_000_000_000)
		s0 := State{TAT: now + used%(B*T+1), T: T, Burst: B}
		s1, r1, _ := DecideMicros(s0, now, l, reserved)
		if !r1.Allowed {
			return
		}
		s2, _ := SettleMicros(s1, now, l, reserved, actual, s1.TAT)
		if actual == 0 {
			// As if nothing was charged: back to s0, or to now if s0
			// was rested (a full key stays full).
			if want := max(s0.TAT, now); s2.TAT != want {
				t.Fatalf("refund of everything: TAT %d, want %d (s0 %+v)", s2.TAT, want, s0)
			}
			return
		}
		tat := max(s0.TAT, now)
		if want := tat + actual*T; s2.TAT != want {
			t.Fatalf("s0 %+v reserved %d actual %d: settled TAT %d, want %d (a decision of cost %d)", s0, reserved, actual, s2.TAT, want, actual)
		}
		if actual <= B {
			if s3, r3, _ := DecideMicros(s0, now, l, actual); r3.Allowed && s3 != s2 {
				t.Fatalf("settled %+v, a decision of the actual cost %+v", s2, s3)
			}
		}
	})
}

func abs(v int64) int64 {
	if v < 0 {
		if v == -v {
			return 0
		}
		return -v
	}
	return v
}
