package regional

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

// Early reports keep their gaps: one wanted within the gap after the last
// goes when the gap ends, and one already scheduled by then serves.
func TestEarlyGate(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var g earlyGate
	if at, sched := g.next(t0, stepGap); !at.Equal(t0) || sched {
		t.Fatalf("first early report at %v (scheduled %v), want at once", at.Sub(t0), sched)
	}
	g.last = t0
	if at, _ := g.next(t0.Add(30*time.Millisecond), stepGap); !at.Equal(t0.Add(stepGap)) {
		t.Errorf("a step 30ms after a report goes at +%v, want +%v", at.Sub(t0), stepGap)
	}
	if at, _ := g.next(t0.Add(30*time.Millisecond), ackGap); !at.Equal(t0.Add(30 * time.Millisecond)) {
		t.Errorf("an acknowledgement 30ms after a report goes at +%v, want at once (+30ms)", at.Sub(t0))
	}
	g.due = t0.Add(stepGap)
	if at, sched := g.next(t0.Add(50*time.Millisecond), stepGap); !sched || !at.Equal(g.due) {
		t.Errorf("with one due at +%v, another wanted goes at +%v (scheduled %v), want the one due", stepGap, at.Sub(t0), sched)
	}
	if _, sched := g.next(t0.Add(10*time.Millisecond), ackGap); sched {
		t.Errorf("an acknowledgement wanted before the one due is scheduled sooner, want not served by it")
	}
}

// A push applies like an answer that renews no lease: its grants take
// effect, a shrink in it is signalled, and the lease stays where the last
// answer put it.
func TestPushAppliesWithoutLease(t *testing.T) {
	v := newView("us-east", 0)
	v.setShards(1)
	now := time.Now()
	v.answered(0, now, shares.Answer{Term: 1, Lease: 10 * time.Second, Full: true, Epoch: 1,
		Entries: []shares.Entry{{Tenant: "a", Grant: shares.Grant{Rate: 50, Burst: 10, Epoch: 1}}}}, now)
	until := v.leaseUntil()
	v.pushed(0, shares.Answer{Term: 1, Epoch: 2,
		Entries: []shares.Entry{{Tenant: "a", Grant: shares.Grant{Rate: 20, Burst: 4, Epoch: 2}}}}, now.Add(time.Second))
	select {
	case <-v.shrunk[0]:
	default:
		t.Error("a push that shrank a grant was not signalled")
	}
	if g, _ := v.pods[0].Grant("a"); g.Rate != 20 || g.Epoch != 2 {
		t.Errorf("after the push the pod holds %+v, want the pushed 20/s at epoch 2", g)
	}
	if got := v.leaseUntil(); !got.Equal(until) {
		t.Errorf("the push moved the lease from %v to %v, want it unchanged", until, got)
	}
}

// An answer signals a shrink (a lower rate or burst than the tenant's grant
// the pod held), or a full answer (the pod's first of a term: the leader
// pushes it nothing until it reported an epoch of the term), and nothing
// else: a first grant, a grow, or a replay of an older epoch. The reporter
// then reports soon, not at its next tick, so that the leader can make the
// grow that waits for the acknowledgement, or push the pod what changes.
func TestAnswerSignalsShrinks(t *testing.T) {
	v := newView("us-east", 0)
	v.setShards(1)
	for i, step := range []struct {
		tenant string
		epoch  uint64
		rate   float64
		burst  int64
		want   bool
	}{
		{"a", 1, 50, 10, true},  // first grant, in a full answer
		{"a", 2, 60, 12, false}, // grow
		{"a", 3, 60, 12, false}, // unchanged
		{"a", 4, 40, 12, true},  // rate shrinks
		{"a", 5, 40, 8, true},   // burst shrinks
		{"b", 6, 10, 2, false},  // another tenant's first grant
		{"a", 7, 90, 20, false}, // grow
		{"a", 3, 10, 1, false},  // an older epoch: ignored
	} {
		v.answered(0, time.Now(), shares.Answer{Term: 1, Lease: time.Minute, Full: i == 0, Epoch: step.epoch,
			Entries: []shares.Entry{{Tenant: step.tenant, Grant: shares.Grant{Rate: step.rate, Burst: step.burst, Epoch: step.epoch}}}}, time.Now())
		got := false
		select {
		case <-v.shrunk[0]:
			got = true
		default:
		}
		if got != step.want {
			t.Errorf("step %d: grant %s epoch %d %v/%d: signalled %v, want %v", i, step.tenant, step.epoch, step.rate, step.burst, got, step.want)
		}
	}
}
