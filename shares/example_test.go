package shares_test

import (
	"fmt"
	"time"

	"github.com/allot-dev/allot/shares"
)

// A tenant with R = 1000/s and B = 200 across three regions, overloaded and
// skewed 70/20/10: the grants follow demand, floors kept.
func ExampleAllocator() {
	cfg := shares.DefaultConfig("us-east", "eu-west", "ap-south")
	a, err := shares.NewAllocator(cfg)
	if err != nil {
		panic(err)
	}
	budgets := map[string]shares.Budget{"t42": {Rate: 1000, Burst: 200}}
	t0 := time.Unix(1_700_000_000, 0)
	offered := map[string]float64{"us-east": 1050, "eu-west": 300, "ap-south": 150} // per second
	for step := range 5 {
		now := t0.Add(time.Duration(step) * cfg.Interval)
		for _, r := range cfg.Regions {
			u := offered[r] * cfg.Interval.Seconds()
			_, err := a.Report(now, shares.Report{
				Region: r, Interval: cfg.Interval,
				Usage: map[string]shares.Usage{"t42": {Offered: u, Admitted: u / 2}},
			})
			if err != nil {
				panic(err)
			}
		}
		a.Rebalance(now, budgets)
	}
	g := a.Grants("t42")
	for _, r := range cfg.Regions {
		fmt.Printf("%-8s rate %6.1f/s burst %3d\n", r, g[r].Rate, g[r].Burst)
	}
	// Output:
	// us-east  rate  691.8/s burst 139
	// eu-west  rate  203.0/s burst  40
	// ap-south rate  105.2/s burst  20
}
