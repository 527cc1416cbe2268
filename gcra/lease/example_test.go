package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/lease"
	"github.com/allot-dev/allot/gcra/memstore"
)

// A pod leases 10 units at a time; the store is asked once per lease.
func Example() {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	mcfg := memstore.DefaultConfig()
	mcfg.Clock = clock
	store, _ := memstore.New(mcfg)
	cfg := lease.DefaultConfig()
	cfg.Clock = clock
	pod, _ := lease.New(store, cfg)
	l, _ := gcra.NewLimit(gcra.PerSecond(1000), 200)
	for i := 0; i < 25; i++ {
		_, _ = pod.Decide(context.Background(), []gcra.Request{{Key: "machine-key", Limit: l, Cost: 1}})
	}
	s := pod.Stats()
	fmt.Printf("served %d, leases %d, held %d\n", s.Served, s.Leases, s.Held)
	now = now.Add(2 * time.Second) // the pod goes quiet
	pod.Sweep()
	fmt.Printf("stranded %d\n", pod.Stats().Stranded)
	// Output:
	// served 25, leases 3, held 5
	// stranded 5
}
