package gcra_test

import (
	"fmt"
	"time"

	"github.com/allot-dev/allot/gcra"
)

// The seed's trace: 5 per second with a burst of 3. Four requests at once,
// then two at 250 ms.
func ExampleDecide() {
	l, _ := gcra.NewLimit(gcra.PerSecond(5), 3)
	t0 := time.Unix(1_700_000_000, 0)
	var s gcra.State
	for _, at := range []time.Duration{0, 0, 0, 0, 250 * time.Millisecond, 250 * time.Millisecond} {
		var r gcra.Result
		s, r, _ = gcra.Decide(s, t0.Add(at), l, 1)
		fmt.Printf("t=%v allowed=%v remaining=%d retry_after=%v\n", at, r.Allowed, r.Remaining, r.RetryAfter)
	}
	// Output:
	// t=0s allowed=true remaining=2 retry_after=0s
	// t=0s allowed=true remaining=1 retry_after=0s
	// t=0s allowed=true remaining=0 retry_after=0s
	// t=0s allowed=false remaining=0 retry_after=200ms
	// t=250ms allowed=true remaining=0 retry_after=0s
	// t=250ms allowed=false remaining=0 retry_after=150ms
}

// A composite check: the tenant limit has room, the user limit does not, so
// nothing is charged and the user limit's retry-after is returned.
func ExampleDecideAll() {
	now := time.Unix(1_700_000_000, 0)
	tenant, _ := gcra.NewLimit(gcra.PerSecond(1000), 200)
	user, _ := gcra.NewLimit(gcra.PerSecond(50), 20)
	spentUser := gcra.State{TAT: now.UnixMicro() + 20*user.T, T: user.T, Burst: user.Burst}
	out, _ := gcra.DecideAll([]gcra.Item{
		{Limit: tenant, Cost: 1},
		{State: spentUser, Limit: user, Cost: 1},
	}, now)
	fmt.Println(out.Allowed, out.Limiting, out.RetryAfter, out.Write)
	// Output: false 1 20ms [false false]
}

// Halving a live key's grant restates its state without minting units.
func ExampleConvert() {
	now := int64(1_700_000_000_000_000)
	old := gcra.Limit{T: 1000, Burst: 10}                           // 1000/s, burst 10
	s := gcra.State{TAT: now + 8*old.T, T: old.T, Burst: old.Burst} // 2 units available
	half := gcra.Limit{T: 2000, Burst: 5}
	c := gcra.Convert(s, now, half)
	fmt.Printf("owes %dµs under the new limit: %d of 5 units available\n", c.TAT-now, half.Burst-(c.TAT-now)/half.T)
	// Output: owes 6000µs under the new limit: 2 of 5 units available
}
