package policy

import (
	"slices"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/shares"
)

// ResolvedBudget is a tenant's effective global budget.
type ResolvedBudget struct {
	Rate          gcra.Rate
	Burst         int64
	Mode          string
	Home          string
	Weights       map[string]float64
	FloorFraction float64
}

// ResolvedLimit is one limit as it applies to one tenant.
type ResolvedLimit struct {
	Name        string
	Descriptors []string
	Match       map[string]string
	// FromBudget: the limit enforces one of the tenant's budgets, split
	// across regions (the region's grant); Rate and Burst are the global
	// budget's.
	FromBudget bool
	// Budget names the budget a FromBudget limit takes: "" for the
	// tenant's budget (rate: budget), NAME for rate: budget.NAME.
	Budget string
	// Global is true for limits split across regions.
	Global bool
	Rate   gcra.Rate
	Burst  int64
	// FailClosed denies while Redis is unavailable; otherwise the limit fails
	// open through a local limiter at FallbackRate (zero: grant / live pods).
	FailClosed   bool
	FallbackRate gcra.Rate
	Lease        int64
	Shadow       bool
}

// Matches reports whether a request with these descriptors is subject to l:
// it carries every descriptor of the limit, with the Match values.
func (l *ResolvedLimit) Matches(descriptors map[string]string) bool {
	for _, k := range l.Descriptors {
		if _, ok := descriptors[k]; !ok {
			return false
		}
	}
	for k, v := range l.Match {
		if descriptors[k] != v {
			return false
		}
	}
	return true
}

// Resolved is everything allot enforces for one tenant.
type Resolved struct {
	Tenant string
	Tier   string
	// Known is false for tenants resolved through the default tier.
	Known bool
	// UnknownDenied: the tenant is not Known and the policy says
	// unknown_tenants: deny, so the tenant is denied unless it has a budget
	// set through the admin API (which Resolve does not see).
	UnknownDenied bool
	Budget        ResolvedBudget
	// Budgets are the tenant's named budgets, by name (nil when the policy
	// has none).
	Budgets map[string]ResolvedBudget
	Limits  []ResolvedLimit
}

// Resolve returns the effective budget and limits of tenant: the limit's
// defaults, overridden by the tenant's tier, overridden by the tenant's own
// entry. A tenant with no entry gets the default tier. d must be valid.
func (d *Document) Resolve(tenant string) Resolved {
	t, known := d.Tenants[tenant]
	tierName := t.Tier
	if tierName == "" {
		tierName = d.DefaultTier
	}
	tier := d.Tiers[tierName]
	res := Resolved{Tenant: tenant, Tier: tierName, Known: known, Budget: d.resolveBudget(tier.Budget, t.Budget)}
	res.UnknownDenied = !known && d.UnknownTenants == UnknownDeny
	for name, tb := range tier.Budgets {
		if res.Budgets == nil {
			res.Budgets = make(map[string]ResolvedBudget, len(tier.Budgets))
		}
		res.Budgets[name] = d.resolveBudget(tb, t.Budgets[name])
	}
	res.Limits = make([]ResolvedLimit, 0, len(d.Limits))
	for _, l := range d.Limits {
		bname, fromBudget := BudgetOf(l.Rate)
		rl := ResolvedLimit{
			Name:        l.Name,
			Descriptors: l.Descriptors,
			Match:       l.Match,
			FromBudget:  fromBudget,
			Budget:      bname,
			FailClosed:  l.OnFailure == FailClosed,
			Lease:       l.Lease,
			Shadow:      l.Shadow,
		}
		rl.Global = rl.FromBudget || l.Scope == ScopeGlobal
		if l.FallbackRate != "" {
			rl.FallbackRate = mustRate(l.FallbackRate)
		}
		switch {
		case rl.FromBudget && bname == "":
			rl.Rate, rl.Burst = res.Budget.Rate, res.Budget.Burst
		case rl.FromBudget:
			b := res.Budgets[bname]
			rl.Rate, rl.Burst = b.Rate, b.Burst
		default:
			rl.Rate, rl.Burst = mustRate(l.Rate), l.Burst
		}
		for _, ov := range []map[string]Override{tier.Limits, t.Limits} {
			o, ok := ov[l.Name]
			if !ok {
				continue
			}
			if o.Rate != "" {
				rl.Rate = mustRate(o.Rate)
			}
			if o.Burst != 0 {
				rl.Burst = o.Burst
			}
			if o.Shadow != nil {
				rl.Shadow = *o.Shadow
			}
		}
		if t.Shadow {
			rl.Shadow = true
		}
		res.Limits = append(res.Limits, rl)
	}
	return res
}

func (d *Document) resolveBudget(tier, tenant Budget) ResolvedBudget {
	b := tier
	if tenant.Rate != "" {
		b.Rate = tenant.Rate
	}
	if tenant.Burst != 0 {
		b.Burst = tenant.Burst
	}
	if tenant.Mode != "" {
		b.Mode, b.Home, b.Weights = tenant.Mode, tenant.Home, tenant.Weights
	}
	if b.Mode == "" {
		b.Mode = ModeRebalanced
	}
	floor := DefaultFloorFraction
	if d.FloorFraction != nil {
		floor = *d.FloorFraction
	}
	if b.Mode == ModePinned {
		floor = 0
	}
	return ResolvedBudget{
		Rate: mustRate(b.Rate), Burst: b.Burst, Mode: b.Mode, Home: b.Home,
		Weights: b.Weights, FloorFraction: floor,
	}
}

// mustRate parses a rate that validation has already accepted.
func mustRate(s string) gcra.Rate {
	r, err := gcra.ParseRate(s)
	if err != nil {
		return gcra.Rate{}
	}
	return r
}

// TenantBudget returns tenant's effective budget alone (cheaper than
// Resolve). A non-nil override — a budget set through the admin API, which
// always carries a rate and a burst — replaces the tenant's budget whole:
// its mode is its own (rebalanced when empty), not the tier's.
func (d *Document) TenantBudget(tenant string, override *Budget) ResolvedBudget {
	if override != nil {
		return d.resolveBudget(*override, Budget{})
	}
	t := d.Tenants[tenant]
	tierName := t.Tier
	if tierName == "" {
		tierName = d.DefaultTier
	}
	return d.resolveBudget(d.Tiers[tierName].Budget, t.Budget)
}

// NamedBudget is TenantBudget for the tenant's budget name ("" is the
// tenant's budget): its tier's budgets[name] under its entry's, or override
// whole when not nil. ok is false when the tenant's tier has no budget of
// that name (no limit of the policy takes it).
func (d *Document) NamedBudget(tenant, name string, override *Budget) (ResolvedBudget, bool) {
	if name == "" {
		return d.TenantBudget(tenant, override), true
	}
	t := d.Tenants[tenant]
	tierName := t.Tier
	if tierName == "" {
		tierName = d.DefaultTier
	}
	tb, ok := d.Tiers[tierName].Budgets[name]
	if !ok {
		return ResolvedBudget{}, false
	}
	if override != nil {
		return d.resolveBudget(*override, Budget{}), true
	}
	return d.resolveBudget(tb, t.Budgets[name]), true
}

// KeyBudget is the budget each key of a global limit with a rate of its own
// (scope: global, not rate: budget) is shared under: the limit's rate and
// burst, rebalanced, with the document's floor fraction.
func (d *Document) KeyBudget(l *ResolvedLimit) ResolvedBudget {
	floor := DefaultFloorFraction
	if d.FloorFraction != nil {
		floor = *d.FloorFraction
	}
	return ResolvedBudget{Rate: l.Rate, Burst: l.Burst, Mode: ModeRebalanced, FloorFraction: floor}
}

// KeyLimits returns the global limits with a rate of their own (each key
// shared on its own, see KeyBudget), resolved as for a tenant with no
// entry.
func (d *Document) KeyLimits() []ResolvedLimit {
	var out []ResolvedLimit
	for _, l := range d.Resolve("").Limits {
		if l.Global && !l.FromBudget {
			out = append(out, l)
		}
	}
	return out
}

// KeyLimit returns the first of r's global limits with a rate of their own
// (scope: global, shared key by key, see Document.KeyBudget) keyed on
// exactly tenant and keys (distinct, in any order), with no match values: the limit
// a request carrying tenant and those keys is shared by, per value. ok is
// false when r has none.
func (r *Resolved) KeyLimit(keys []string) (l *ResolvedLimit, ok bool) {
	for i := range r.Limits {
		l := &r.Limits[i]
		if !l.Global || l.FromBudget || len(l.Match) > 0 || len(l.Descriptors) != len(keys)+1 || !slices.Contains(l.Descriptors, "tenant") {
			continue
		}
		all := true
		for _, k := range keys {
			if k == "tenant" || !slices.Contains(l.Descriptors, k) {
				all = false
				break
			}
		}
		if all {
			return l, true
		}
	}
	return nil, false
}

// BudgetNames returns the names of the named budgets the policy's limits
// take (rate: budget.NAME), sorted; not "" (the tenant's budget).
func (d *Document) BudgetNames() []string {
	var out []string
	for _, l := range d.Limits {
		if n, ok := BudgetOf(l.Rate); ok && n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Shares returns the budget as package shares takes it.
func (b ResolvedBudget) Shares() shares.Budget {
	floor := b.FloorFraction
	return shares.Budget{
		Rate:    b.Rate.PerSecond(),
		Burst:   b.Burst,
		Mode:    shares.Mode(b.Mode),
		Home:    b.Home,
		Weights: b.Weights,
		Floor:   &floor,
	}
}
