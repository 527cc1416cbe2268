package sim_test

import (
	"fmt"

	"github.com/allot-dev/allot/shares"
	"github.com/allot-dev/allot/shares/sim"
)

// Run a scenario in two modes and compare them with one central limiter.
func ExampleRun() {
	spec, err := sim.Lookup("partition")
	if err != nil {
		panic(err)
	}
	for _, mode := range []shares.Mode{shares.ModeRebalanced, shares.ModeFull} {
		r, err := sim.Run(spec, mode, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: over-admission %v, never above R: %v\n",
			mode, r.OverAdmission.Units > 0, r.PeakRateSum <= r.Rate)
	}
	// Output:
	// rebalanced: over-admission false, never above R: true
	// full: over-admission true, never above R: false
}
