package shares_test

import (
	"fmt"
	"time"

	"github.com/allot-dev/allot/shares"
)

// One tenant, R = 1000/s and B = 200, over three regions. Demand of 1.5R
// split 70/20/10 is shared as one central limiter would admit it; when it
// shifts to 10/20/70, the leader first shrinks the region that lost demand
// and grows the others only after the shrink is acknowledged (each rate
// moving at most Slew·R = 500/s per rebalance).
func ExampleAllocator() {
	cfg := shares.DefaultConfig("us-east", "eu-west", "ap-south")
	a, err := shares.NewAllocator(cfg)
	if err != nil {
		panic(err)
	}
	budgets := map[string]shares.Budget{"t42": {Rate: 1000, Burst: 200}}
	applied := map[string]uint64{} // what each region has applied
	now := time.Unix(1_700_000_000, 0)

	// round: every region reports (offered units per second) and the leader
	// rebalances. Regions that ack apply every grant written so far.
	round := func(offered map[string]float64, ack ...string) []shares.Change {
		now = now.Add(cfg.Interval)
		for _, r := range cfg.Regions {
			u := offered[r] * cfg.Interval.Seconds()
			if _, err := a.Report(now, shares.Report{
				Region: r, Interval: cfg.Interval, Applied: applied[r],
				Usage: map[string]shares.Usage{"t42": {Offered: u, Admitted: min(u, 400)}},
			}); err != nil {
				panic(err)
			}
		}
		changes := a.Rebalance(now, budgets)
		for _, c := range changes {
			for _, r := range ack {
				if c.Region == r {
					applied[r] = c.Grant.Epoch
				}
			}
		}
		return changes
	}
	show := func(changes []shares.Change) {
		for _, c := range changes {
			fmt.Printf("  %-8s → %5.1f/s burst %3d\n", c.Region, c.Grant.Rate, c.Grant.Burst)
		}
	}

	before := map[string]float64{"us-east": 1050, "eu-west": 300, "ap-south": 150}
	for range 6 {
		round(before, cfg.Regions...)
	}
	fmt.Println("settled:")
	g := a.Grants("t42")
	for _, r := range cfg.Regions {
		fmt.Printf("  %-8s   %5.1f/s burst %3d\n", r, g[r].Rate, g[r].Burst)
	}

	after := map[string]float64{"us-east": 150, "eu-west": 300, "ap-south": 1050}
	fmt.Println("demand shifts; no region has applied anything new:")
	show(round(after))
	fmt.Println("still no acknowledgement:")
	show(round(after))
	fmt.Println("us-east acknowledges its shrinks:")
	applied["us-east"] = a.Grants("t42")["us-east"].Epoch
	show(round(after, cfg.Regions...))
	// Output:
	// settled:
	//   us-east    691.8/s burst 103
	//   eu-west    203.0/s burst  53
	//   ap-south   105.2/s burst  43
	// demand shifts; no region has applied anything new:
	//   us-east  → 191.8/s burst  46
	// still no acknowledgement:
	//   us-east  → 117.0/s burst  45
	// us-east acknowledges its shrinks:
	//   us-east  → 111.6/s burst  44
	//   eu-west  → 212.1/s burst  54
	//   ap-south → 605.2/s burst 100
}
