package state_test

import (
	"fmt"

	"github.com/allot-dev/allot/internal/state"
)

// Where a Store keeps its records in etcd: every key is under the prefix;
// policy and budgets are shared by every coordinator shard, and each shard
// but 0 has an election of its own. A budget's key carries the tenant's
// name path-escaped.
func ExampleStore_BudgetTenant() {
	s := state.New(nil, state.DefaultPrefix) // key names need no client
	fmt.Println(s.PolicyKey())
	fmt.Println(s.BudgetsPrefix())
	fmt.Println(s.Shard(0).ElectionPrefix())
	fmt.Println(s.Shard(1).ElectionPrefix())

	tenant, err := s.BudgetTenant([]byte(s.BudgetsPrefix() + "team%2Fa"))
	fmt.Println(tenant, err)
	_, err = s.BudgetTenant([]byte("/elsewhere/t42"))
	fmt.Println(err)
	// Output:
	// /allot/v1/policy/current
	// /allot/v1/budgets/
	// /allot/v1/election
	// /allot/v1/shards/1/election
	// team/a <nil>
	// budget key "/elsewhere/t42": not under /allot/v1/budgets/
}

// A budget record as the admin API writes it to etcd, decoded; a value
// that is not a record fails to decode, and a mirror then counts it in
// allot_state_decode_errors_total{kind="budget"}.
func ExampleDecodeBudget() {
	rec, err := state.DecodeBudget([]byte(`{"tenant":"t42","rate":"1000/s","burst":200,"version":3,"updated_at":"2026-01-02T03:04:05Z"}`))
	fmt.Println(rec.Tenant, rec.Rate, rec.Burst, rec.Version, rec.UpdatedAt.Format("2006-01-02"), err)

	_, err = state.DecodeBudget([]byte(`{"tenant":`))
	fmt.Println(err)
	// Output:
	// t42 1000/s 200 3 2026-01-02 <nil>
	// decode budget: unexpected end of JSON input
}
