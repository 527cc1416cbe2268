package regional

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

// At most one prompt report per interval, counted from the last one allowed.
func TestPromptGate(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	g := promptGate{every: 2 * time.Second}
	for _, st := range []struct {
		at   time.Duration
		want bool
	}{
		{0, true},
		{time.Millisecond, false},
		{1999 * time.Millisecond, false},
		{2 * time.Second, true},
		{3 * time.Second, false},
		{4500 * time.Millisecond, true},
		{4 * time.Second, false}, // the clock went back: still within the interval
		{10 * time.Second, true},
	} {
		if got := g.allow(t0.Add(st.at)); got != st.want {
			t.Errorf("allow(t0+%v) = %v, want %v", st.at, got, st.want)
		}
	}
}

// An answer signals a shrink (a lower rate or burst than the tenant's grant
// the pod held), and nothing else: a first grant, a grow, or a replay of an
// older epoch. The reporter then reports soon, not at its next tick, so that
// the leader can make the grow that waits for the acknowledgement.
func TestAnswerSignalsShrinks(t *testing.T) {
	v := newView("us-east", nil, 0)
	for i, step := range []struct {
		tenant string
		epoch  uint64
		rate   float64
		burst  int64
		want   bool
	}{
		{"a", 1, 50, 10, false}, // first grant
		{"a", 2, 60, 12, false}, // grow
		{"a", 3, 60, 12, false}, // unchanged
		{"a", 4, 40, 12, true},  // rate shrinks
		{"a", 5, 40, 8, true},   // burst shrinks
		{"b", 6, 10, 2, false},  // another tenant's first grant
		{"a", 7, 90, 20, false}, // grow
		{"a", 3, 10, 1, false},  // an older epoch: ignored
	} {
		v.answered(time.Now(), shares.Answer{Term: 1, Lease: time.Minute, Full: i == 0, Epoch: step.epoch,
			Entries: []shares.Entry{{Tenant: step.tenant, Grant: shares.Grant{Rate: step.rate, Burst: step.burst, Epoch: step.epoch}}}}, time.Now())
		got := false
		select {
		case <-v.shrunk:
			got = true
		default:
		}
		if got != step.want {
			t.Errorf("step %d: grant %s epoch %d %v/%d: signalled %v, want %v", i, step.tenant, step.epoch, step.rate, step.burst, got, step.want)
		}
	}
}
