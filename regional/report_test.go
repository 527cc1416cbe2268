package regional

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

// A first sight is reported within ackGap while the budget lasts (five at
// once, ten a second), then after stepGap as any step: a caller inventing
// new keys cannot make a pod report every 20 ms. A step that is no first
// sight always waits stepGap.
func TestFirstSightsBudget(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	tr, err := shares.NewTracker(t0, shares.TrackerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var f firstSights
	now := t0
	fast := 0
	for i := range 20 { // a new key every 5 ms, each sent at once
		now = now.Add(5 * time.Millisecond)
		tr.Add(now, fmt.Sprintf("user-%d", i), 1, 1)
		if f.gap(tr, now) == ackGap {
			fast++
		}
		f.sent(now)
		tr.TakeSteps(now)
	}
	// 100 ms: the burst of five; every report after it spends what
	// refilled since the one before.
	if fast != 5 {
		t.Errorf("%d of 20 first sights in 100 ms went within ackGap, want 5 (the burst)", fast)
	}
	now = now.Add(time.Second)
	tr.Add(now, "another", 1, 1)
	if g := f.gap(tr, now); g != ackGap {
		t.Errorf("a first sight a second later: gap %v, want ackGap (the budget refilled)", g)
	}
	tr.TakeSteps(now)
	if g := f.gap(tr, now); g != stepGap {
		t.Errorf("no first sight pending: gap %v, want stepGap", g)
	}
}
