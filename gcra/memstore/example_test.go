package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/memstore"
)

// The seed's trace on the in-memory store with a hand-driven clock.
func Example() {
	now := time.Unix(1_700_000_000, 0)
	cfg := memstore.DefaultConfig()
	cfg.Clock = func() time.Time { return now }
	st, _ := memstore.New(cfg)
	l, _ := gcra.NewLimit(gcra.PerSecond(5), 3)
	req := []gcra.Request{{Key: "t42", Limit: l, Cost: 1}}
	for i := 0; i < 4; i++ {
		d, _ := st.Decide(context.Background(), req)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	now = now.Add(250 * time.Millisecond)
	d, _ := st.Decide(context.Background(), req)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	now = now.Add(time.Second)
	fmt.Println("swept", st.Sweep(), "idle keys")
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 200ms
	// true 0 0s
	// swept 1 idle keys
}
