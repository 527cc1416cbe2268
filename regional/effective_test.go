package regional

import (
	"time"

	"github.com/allot-dev/allot/shares"
)

// tenantEffective is effective for te's tenant budget (not a named one).
func (v *view) tenantEffective(now time.Time, te *tenantEntry) (float64, int64, bool) {
	r, b, leased, _ := v.effective(now, te, &limitCache{share: te.resolved.Tenant, own: te.own})
	return r, b, leased
}

// budgetEffective is effective for te's budget of that name.
func (v *view) budgetEffective(now time.Time, te *tenantEntry, name string) (float64, int64, bool) {
	for i, l := range te.resolved.Limits {
		if l.FromBudget && l.Budget == name {
			r, b, leased, _ := v.effective(now, te, &te.limits[i])
			return r, b, leased
		}
	}
	r, b, leased, _ := v.effective(now, te, &limitCache{share: shares.BudgetID(te.resolved.Tenant, name)})
	return r, b, leased
}
