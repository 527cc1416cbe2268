package gcra

import (
	"errors"
	"testing"
	"time"
)

// The seed's traced sequence, verbatim: 5/s, burst 3, so T = 200,000 µs.
func TestSeedTrace(t *testing.T) {
	l, err := NewLimit(PerSecond(5), 3)
	if err != nil {
		t.Fatal(err)
	}
	if l.T != 200_000 {
		t.Fatalf("T = %d, want 200000", l.T)
	}
	const base = int64(1_700_000_000_000_000) // any epoch; the trace is relative
	steps := []struct {
		at        int64 // µs after base
		allowed   bool
		remaining int64
		retry     time.Duration
	}{
		{0, true, 2, 0},
		{0, true, 1, 0},
		{0, true, 0, 0},
		{0, false, 0, 200 * time.Millisecond},
		{0, false, 0, 200 * time.Millisecond},
		{250_000, true, 0, 0},
		{250_000, false, 0, 150 * time.Millisecond},
	}
	var s State
	for i, st := range steps {
		var r Result
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
