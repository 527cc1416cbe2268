package regional

import "github.com/allot-dev/allot/policy"

// unknownTenant is the limit that denies a tenant under unknown_tenants:
// deny: a tenant with no entry in the policy and no budget set through the
// admin API. Its denial charges nothing, is not reported to the coordinator
// (so such tenants never reach its allocator) and is counted in
// allot_decisions_total under limit="unknown_tenant"; it carries no quota.
var unknownTenant = policy.ResolvedLimit{Name: policy.UnknownTenantLimit}

// hasBudget reports whether tenant has a budget set through the admin API.
// Only tenants the policy does not know ask, and only under
// unknown_tenants: deny.
func (v *view) hasBudget(tenant string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.budgets[tenant] != nil
}
