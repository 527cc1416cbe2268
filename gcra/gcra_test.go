package gcra

import (
	"errors"
	"testing"
	"time"
)

// step is one decision of a step table: at µs after a base instant, cost 1.
type step struct {
	at        int64
	allowed   bool
	remaining int64
	retry     time.Duration
}

// runSteps decides each step in turn on one key and checks its result.
func runSteps(t *testing.T, l Limit, base int64, steps []step) {
	t.Helper()
	var s State
	for i, st := range steps {
		var r Result
		var err error
		s, r, err = Decide(s, time.UnixMicro(base+st.at), l, 1)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if r.Allowed != st.allowed || r.Remaining != st.remaining || r.RetryAfter != st.retry {
			t.Errorf("step %d at %dµs: Decide = {allowed %v, remaining %d, retry %v}, want {%v, %d, %v}",
				i, st.at, r.Allowed, r.Remaining, r.RetryAfter, st.allowed, st.remaining, st.retry)
		}
	}
}

// The seed's traced sequence, verbatim, then a step back in time: 5/s,
// burst 3, so T = 200,000 µs.
func TestSeedTrace(t *testing.T) {
	l, err := NewLimit(PerSecond(5), 3)
	if err != nil {
		t.Fatal(err)
	}
	if l.T != 200_000 {
		t.Fatalf("T = %d, want 200000", l.T)
	}
	const base = int64(1_700_000_000_000_000) // any epoch; the trace is relative
	steps := []step{
		{0, true, 2, 0},
		{0, true, 1, 0},
		{0, true, 0, 0},
		{0, false, 0, 200 * time.Millisecond},
		{0, false, 0, 200 * time.Millisecond},
		{250_000, true, 0, 0},
		{250_000, false, 0, 150 * time.Millisecond},
		// Past the seed's trace, the clock goes back to 100 ms, before the
		// last two steps. TAT is 800 ms, so tat = max(TAT, now) = 800 ms,
		// allow_at = 800 + 200 − 600 = 400 ms > now: denied, conforming
		// 300 ms later, as a request at 250 ms conformed at 400 ms too.
		{100_000, false, 0, 300 * time.Millisecond},
		// The denial changed nothing: at 400 ms exactly one unit conforms.
		{400_000, true, 0, 0},
		{400_000, false, 0, 200 * time.Millisecond},
	}
	runSteps(t, l, base, steps)
}

func TestValidation(t *testing.T) {
	cases := []struct {
		name  string
		rate  Rate
		burst int64
		cost  int64
		want  error
	}{
		{"zero rate", Rate{0, time.Second}, 1, 1, ErrRate},
		{"negative rate", Rate{-1, time.Second}, 1, 1, ErrRate},
		{"zero period", Rate{1, 0}, 1, 1, ErrRate},
		{"too fast", Rate{2_000_000, time.Second}, 1, 1, ErrRateTooHigh},
		{"zero burst", PerSecond(1), 0, 1, ErrBurst},
		{"window overflow", PerHour(1), 1 << 40, 1, ErrWindowTooLong},
		{"zero cost", PerSecond(1), 1, 0, ErrCost},
		{"cost above burst", PerSecond(5), 3, 4, ErrCostExceedsBurst},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := NewLimit(c.rate, c.burst)
			if err == nil {
				_, _, err = Decide(State{}, time.Unix(1, 0), l, c.cost)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("error = %v, want %v", err, c.want)
			}
		})
	}
}

// A clock that steps backwards (an NTP correction, another host's clock)
// never lets the twin admit more: the key's TAT only moves forward, so a
// request is judged against the earlier now, which is stricter. Steps at
// 5/s, burst 3 (T = 200 ms).
func TestClockGoesBackwards(t *testing.T) {
	l, err := NewLimit(PerSecond(5), 3)
	if err != nil {
		t.Fatal(err)
	}
	const base = int64(1_700_000_000_000_000)
	steps := []step{
		{1_000_000, true, 2, 0},
		{1_000_000, true, 1, 0},
		{1_000_000, true, 0, 0},
		// Back by 600 ms: the bucket is as full as it was, and the
		// earlier now is further from the TAT.
		{400_000, false, 0, 800 * time.Millisecond},
		// Forward again, to 1.2 s: one unit has been earned since the
		// burst, by the clock that went furthest.
		{1_200_000, true, 0, 0},
		{1_200_000, false, 0, 200 * time.Millisecond},
		// Back by a second: denied, waiting longer.
		{200_000, false, 0, 1200 * time.Millisecond},
	}
	runSteps(t, l, base, steps)
}

// Whatever the clock does, what the twin admits never exceeds B plus R
// times the span from the first decision to the furthest instant the clock
// has shown.
func FuzzClockBackwardsEnvelope(f *testing.F) {
	f.Add([]byte{10, 200, 3, 250, 0, 90})
	f.Add([]byte{0, 0, 0, 0, 255, 127, 127, 0, 0, 200, 100})
	f.Fuzz(func(t *testing.T, moves []byte) {
		l, err := NewLimit(PerSecond(5), 3)
		if err != nil {
			t.Fatal(err)
		}
		now, furthest, first := int64(1_700_000_000_000_000), int64(0), int64(0)
		var s State
		admitted := int64(0)
		for i, m := range moves {
			// Bytes below 128 move the clock forward by m ms, the rest
			// back by (m-128) ms.
			if m < 128 {
				now += int64(m) * 1000
			} else {
				now -= int64(m-128) * 1000
			}
			if i == 0 {
				first, furthest = now, now
			}
			furthest = max(furthest, now)
			ns, r, _ := DecideMicros(s, now, l, 1)
			s = ns
			if r.Allowed {
				admitted++
			}
			if span := furthest - first; admitted > l.Burst+span/l.T {
				t.Fatalf("after %d steps admitted %d, over B + R·span = %d + %d", i+1, admitted, l.Burst, span/l.T)
			}
		}
	})
}
