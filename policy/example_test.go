package policy_test

import (
	"fmt"

	"github.com/allot-dev/allot/policy"
)

// A policy with one budget limit (each tenant's global budget, split across
// regions) and one regional limit per user; tenant t42 has a budget of its
// own, every other tenant the free tier's.
func Example() {
	doc, err := policy.Parse([]byte(`
version: 1
regions: [us-east, eu-west]
default_tier: free
limits:
  - name: tenant
    descriptors: [tenant]
    rate: budget
  - name: user
    descriptors: [tenant, user]
    rate: 2/s
    burst: 2
tiers:
  free:
    budget: {rate: 10/s, burst: 5}
tenants:
  t42:
    budget: {rate: 1000/s, burst: 200, mode: pinned, home: eu-west}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, tenant := range []string{"t42", "someone"} {
		r := doc.Resolve(tenant)
		fmt.Printf("%s: tier %q, budget %.0f/s burst %d (%s)\n", tenant, r.Tier, r.Budget.Rate.PerSecond(), r.Budget.Burst, r.Budget.Mode)
		for _, l := range r.Limits {
			fmt.Printf("  %s on %v: %.0f/s burst %d, global %v\n", l.Name, l.Descriptors, l.Rate.PerSecond(), l.Burst, l.Global)
		}
	}
	// Output:
	// t42: tier "free", budget 1000/s burst 200 (pinned)
	//   tenant on [tenant]: 1000/s burst 200, global true
	//   user on [tenant user]: 2/s burst 2, global false
	// someone: tier "free", budget 10/s burst 5 (rebalanced)
	//   tenant on [tenant]: 10/s burst 5, global true
	//   user on [tenant user]: 2/s burst 2, global false
}

// Bad input gets an error that names the field and its line.
func ExampleParse_invalid() {
	_, err := policy.Parse([]byte(`
version: 1
regions: [us-east]
default_tier: free
limits:
  - name: user
    descriptors: [tenant, user]
    rate: 10 per second
    burst: 5
tiers:
  free:
    budget: {rate: 10/s, burst: 5}
`))
	fmt.Println(err)
	// Output:
	// line 8: limits[0].rate: rate "10 per second": want N/s, N/m, N/h, N/d or N/w, e.g. 1000/s
}
