package gcra

import (
	"testing"
	"time"
)

func TestCheckMicros(t *testing.T) {
	l := Limit{T: 1000, Burst: 10}
	const now = int64(1_000_000_000)
	for _, c := range []struct {
		name string
		s    State
		want Result
	}{
		{"missing", State{}, Result{Allowed: true, Remaining: 10}},
		{"rested", State{TAT: now - 5000, T: 1000, Burst: 10}, Result{Allowed: true, Remaining: 10}},
		{"in use", State{TAT: now + 4000, T: 1000, Burst: 10}, Result{Allowed: true, Remaining: 6, ResetAfter: 4 * time.Millisecond}},
		{"spent exactly: at its limit, not past it", State{TAT: now + 10_000, T: 1000, Burst: 10}, Result{Allowed: true, Remaining: 0, ResetAfter: 10 * time.Millisecond}},
		{"past its burst by 3 units", State{TAT: now + 13_000, T: 1000, Burst: 10}, Result{RetryAfter: 3 * time.Millisecond, ResetAfter: 13 * time.Millisecond}},
		// Under another limit it is read restated: 2 of 4 units left
		// under (2000, 4) are 2 of 10 under (1000, 10), owing 8 ms.
		{"under another limit", State{TAT: now + 4000, T: 2000, Burst: 4}, Result{Allowed: true, Remaining: 2, ResetAfter: 8 * time.Millisecond}},
	} {
		if got := CheckMicros(c.s, now, l); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
