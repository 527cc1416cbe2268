package policy

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/lease"
)

var (
	nameRE       = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	descriptorRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	// budgetNameRE: no '.', which would make budget.a.b ambiguous, nor '/',
	// which joins a tenant and a budget name in the coordinator's IDs.
	budgetNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
)

// Validate checks the whole document and returns every problem found, each
// naming its field (no lines: use Parse for those).
func (d *Document) Validate() error { return d.validate(nil) }

func (d *Document) validate(lines map[string]int) error {
	c := &collector{lines: lines}
	if d.Version != Version {
		if d.Version == 0 {
			c.addf("version", "missing: want version: %d", Version)
		} else {
			c.addf("version", "%d is not supported: want %d", d.Version, Version)
		}
	}
	n := len(c.errs)
	regions := d.validateRegions(c)
	if d.FloorFraction != nil {
		if f := *d.FloorFraction; !(f >= 0 && f < 1) {
			c.addf("floor_fraction", "%v is outside [0, 1)", f)
		}
	}
	u := usable{regions: len(c.errs) == n, tiers: map[string]bool{}}
	switch d.UnknownTenants {
	case "", UnknownAllow, UnknownDeny:
	default:
		c.addf("unknown_tenants", "%q: want %s (the default: tenants with no entry and no budget get the default tier) or %s (their requests are denied)",
			d.UnknownTenants, UnknownAllow, UnknownDeny)
	}
	limits := d.validateLimits(c)
	takenBy := map[string]string{} // budget name → the first limit that takes it
	for i, l := range d.Limits {
		if bn, ok := BudgetOf(l.Rate); ok && bn != "" && budgetNameRE.MatchString(bn) {
			if _, seen := takenBy[bn]; !seen {
				takenBy[bn] = fmt.Sprintf("limits[%d] (%s)", i, l.Name)
			}
		}
	}
	taken := sortedKeys(takenBy)
	if ch := d.Charges; ch != nil {
		switch {
		case ch.Key == "" || ch.Value == "":
			c.addf("charges", "want both key and value: the descriptor entry that marks a charge, e.g. {key: allot_charge, value: done}")
		case !descriptorRE.MatchString(ch.Key):
			c.addf("charges.key", "%q: want lowercase letters, digits, '_' or '-', starting with a letter", ch.Key)
		case ch.Key == "tenant":
			c.addf("charges.key", "tenant names the tenant: choose another key, e.g. allot_charge")
		default:
			for i, l := range d.Limits {
				if slices.Contains(l.Descriptors, ch.Key) {
					c.addf("charges.key", "%q is a descriptor of limits[%d] (%s): the marker is taken off a charge before its limits match, so no limit may key on it", ch.Key, i, l.Name)
					break
				}
			}
		}
	}
	if len(d.Tiers) == 0 {
		c.addf("tiers", "missing: want at least one tier with a budget")
	}
	for _, name := range sortedKeys(d.Tiers) {
		t := d.Tiers[name]
		p := "tiers." + name
		n := len(c.errs)
		if !nameRE.MatchString(name) {
			c.addf(p, "tier name %q: want lowercase letters, digits, '.', '_' or '-'", name)
		}
		validateBudget(c, p+".budget", t.Budget, regions, true)
		for _, bn := range taken {
			if _, ok := t.Budgets[bn]; !ok {
				c.addf(p+".budgets."+bn, "missing: %s takes budget.%s: every tier defines it, e.g. {rate: 200000/m, burst: 50000}", takenBy[bn], bn)
			}
		}
		validateNamedBudgets(c, p+".budgets", t.Budgets, takenBy, regions, true)
		validateOverrides(c, p+".limits", t.Limits, limits)
		u.tiers[name] = len(c.errs) == n
		if u.tiers[name] {
			d.checkTierUsable(c, p, t, limits, u)
		}
	}
	switch {
	case d.DefaultTier == "":
		c.addf("default_tier", "missing: name the tier of tenants with no entry")
	case d.Tiers != nil && !hasKey(d.Tiers, d.DefaultTier):
		c.addf("default_tier", "%q is not a tier (tiers: %s)", d.DefaultTier, strings.Join(sortedKeys(d.Tiers), ", "))
	}
	for _, id := range sortedKeys(d.Tenants) {
		t := d.Tenants[id]
		p := "tenants." + id
		n := len(c.errs)
		if err := ValidateTenant(id); err != nil {
			c.addf(p, "%v", err)
		}
		if t.Tier != "" && !hasKey(d.Tiers, t.Tier) {
			c.addf(p+".tier", "%q is not a tier (tiers: %s)", t.Tier, strings.Join(sortedKeys(d.Tiers), ", "))
		}
		validateBudget(c, p+".budget", t.Budget, regions, false)
		validateNamedBudgets(c, p+".budgets", t.Budgets, takenBy, regions, false)
		validateOverrides(c, p+".limits", t.Limits, limits)
		if len(c.errs) == n {
			d.checkTenantUsable(c, p, t, limits, u)
		}
	}
	return c.err()
}

func (d *Document) validateRegions(c *collector) map[string]bool {
	regions := map[string]bool{}
	if len(d.Regions) == 0 {
		c.addf("regions", "missing: list every region, e.g. [us-east, eu-west]")
	}
	for i, r := range d.Regions {
		p := fmt.Sprintf("regions[%d]", i)
		switch {
		case !nameRE.MatchString(r):
			c.addf(p, "region name %q: want lowercase letters, digits, '.', '_' or '-'", r)
		case regions[r]:
			c.addf(p, "region %q is listed twice", r)
		}
		regions[r] = true
	}
	return regions
}

// limitInfo is what overrides need to know of a limit.
type limitInfo struct {
	budget     bool
	budgetName string // the budget a budget limit takes ("": the tenant's)
	keyed      bool   // global with a rate of its own: one share per key
	// valid: the limit has no error of its own; rate and burst are its
	// parsed rate and burst (fixed-rate limits).
	valid bool
	rate  gcra.Rate
	burst int64
}

func (d *Document) validateLimits(c *collector) map[string]limitInfo {
	limits := map[string]limitInfo{}
	if len(d.Limits) == 0 {
		c.addf("limits", "missing: want at least one limit, e.g. {name: tenant, descriptors: [tenant], rate: budget}")
	}
	for i, l := range d.Limits {
		p := fmt.Sprintf("limits[%d]", i)
		n := len(c.errs)
		switch {
		case l.Name == "":
			c.addf(p+".name", "missing")
		case !nameRE.MatchString(l.Name):
			c.addf(p+".name", "%q: want lowercase letters, digits, '.', '_' or '-'", l.Name)
		case l.Name == UnknownTenantLimit:
			c.addf(p+".name", "%q is reserved: it names the denial of unknown tenants (unknown_tenants: deny)", l.Name)
		default:
			if _, dup := limits[l.Name]; dup {
				c.addf(p+".name", "limit %q is defined twice", l.Name)
			}
		}
		validateDescriptors(c, p, l)
		bname, budget := BudgetOf(l.Rate)
		switch {
		case l.Rate == "":
			c.addf(p+".rate", "missing: want %q, %q or a rate such as 50/s", RateBudget, RateBudget+".NAME")
		case budget && bname != "" && !budgetNameRE.MatchString(bname):
			c.addf(p+".rate", "%q: budget name %q: want lowercase letters, digits, '_' or '-' (no '.')", l.Rate, bname)
		case !budget && strings.HasPrefix(l.Rate, RateBudget):
			c.addf(p+".rate", "%q: want %q or %q, naming one of the tiers' budgets", l.Rate, RateBudget, RateBudget+".NAME")
		case !budget:
			validateRate(c, p+".rate", l.Rate)
		}
		switch {
		case budget && l.Burst != 0:
			c.addf(p+".burst", "must not be set with rate: budget (the tenant budget's burst applies)")
		case !budget && l.Rate != "" && l.Burst < 1:
			c.addf(p+".burst", "%d: want at least 1 (units admissible at once)", l.Burst)
		}
		switch l.Scope {
		case "", ScopeGlobal, ScopeRegional:
		default:
			c.addf(p+".scope", "%q: want %s or %s", l.Scope, ScopeGlobal, ScopeRegional)
		}
		if l.Scope == ScopeGlobal && !budget && l.Lease > 0 {
			c.addf(p+".lease", "not with scope: global and a rate of its own: each key's share is granted by the coordinator, not leased")
		}
		if l.Scope == ScopeRegional && budget {
			c.addf(p+".scope", "rate: budget is always global: drop scope or give the limit its own rate")
		}
		if budget && len(l.Descriptors) > 0 && !perTenant(l) {
			c.addf(p+".descriptors", "a limit with rate: budget is per tenant: want descriptors: [tenant], and other descriptors only with a fixed value in match (e.g. descriptors: [tenant, kind], match: {kind: tokens})")
		}
		switch l.OnFailure {
		case "", FailOpen:
			if l.FallbackRate != "" {
				validateRate(c, p+".fallback_rate", l.FallbackRate)
			}
		case FailClosed:
			if l.FallbackRate != "" {
				c.addf(p+".fallback_rate", "only for on_failure: open (a closed limit denies while Redis is unavailable)")
			}
		default:
			c.addf(p+".on_failure", "%q: want %s or %s", l.OnFailure, FailOpen, FailClosed)
		}
		switch {
		case l.Lease < 0:
			c.addf(p+".lease", "%d: want 0 (no lease) or a positive number of units", l.Lease)
		case l.Lease > lease.MaxSize:
			c.addf(p+".lease", "%d: at most %d units per lease", l.Lease, int64(lease.MaxSize))
		case l.Lease > 0 && !budget && l.Burst >= 1 && l.Lease > l.Burst:
			c.addf(p+".lease", "%d exceeds the burst %d: a lease larger than the burst can never be granted", l.Lease, l.Burst)
		}
		info := limitInfo{budget: budget, budgetName: bname, keyed: l.Scope == ScopeGlobal && !budget, valid: len(c.errs) == n}
		if info.valid && !budget {
			info.rate, info.burst = mustRate(l.Rate), l.Burst
			checkWindow(c, p, info.rate, info.burst, true)
			info.valid = len(c.errs) == n
		}
		if _, dup := limits[l.Name]; !dup {
			limits[l.Name] = info
		}
	}
	return limits
}

// perTenant reports whether l's key depends on the tenant alone: every
// descriptor but tenant has a fixed value in match.
func perTenant(l Limit) bool {
	if !slices.Contains(l.Descriptors, "tenant") {
		return false
	}
	for _, k := range l.Descriptors {
		if _, fixed := l.Match[k]; k != "tenant" && !fixed {
			return false
		}
	}
	return true
}

func validateDescriptors(c *collector, p string, l Limit) {
	if len(l.Descriptors) == 0 {
		c.addf(p+".descriptors", "missing: want the descriptor keys of the limit's key, including tenant")
		return
	}
	seen := map[string]bool{}
	for j, k := range l.Descriptors {
		dp := fmt.Sprintf("%s.descriptors[%d]", p, j)
		switch {
		case !descriptorRE.MatchString(k):
			c.addf(dp, "%q: want lowercase letters, digits, '_' or '-', starting with a letter", k)
		case seen[k]:
			c.addf(dp, "%q is listed twice", k)
		}
		seen[k] = true
	}
	if !seen["tenant"] {
		c.addf(p+".descriptors", "must include tenant: every key belongs to one tenant")
	}
	for _, k := range sortedKeys(l.Match) {
		if !seen[k] {
			c.addf(p+".match."+k, "%q is not one of the limit's descriptors", k)
		}
	}
}

func validateRate(c *collector, p, s string) {
	if _, err := gcra.ParseRate(s); err != nil {
		c.addf(p, "%v", err)
	}
}

func validateBudget(c *collector, p string, b Budget, regions map[string]bool, required bool) {
	switch {
	case b.Rate == "" && required:
		c.addf(p+".rate", "missing: want the tenant's global rate, e.g. 1000/s")
	case b.Rate != "":
		validateRate(c, p+".rate", b.Rate)
	}
	switch {
	case b.Burst == 0 && required:
		c.addf(p+".burst", "missing: want the units admissible at once, e.g. 200")
	case b.Burst < 0:
		c.addf(p+".burst", "%d: want at least 1", b.Burst)
	}
	switch b.Mode {
	case "", ModeRebalanced, ModeStatic, ModeFull, ModePinned:
	default:
		c.addf(p+".mode", "%q: want %s, %s, %s or %s", b.Mode, ModeRebalanced, ModeStatic, ModeFull, ModePinned)
	}
	if b.Mode == ModePinned && b.Home == "" {
		c.addf(p+".home", "missing: a pinned budget needs its home region")
	}
	if b.Home != "" {
		if b.Mode != ModePinned {
			c.addf(p+".home", "only for mode: pinned")
		} else if len(regions) > 0 && !regions[b.Home] {
			c.addf(p+".home", "%q is not a region (regions: %s)", b.Home, strings.Join(sortedKeys(regions), ", "))
		}
	}
	if len(b.Weights) > 0 {
		if b.Mode != ModeStatic {
			c.addf(p+".weights", "only for mode: static")
		}
		sum := 0.0
		for _, r := range sortedKeys(b.Weights) {
			w := b.Weights[r]
			switch {
			case len(regions) > 0 && !regions[r]:
				c.addf(p+".weights."+r, "%q is not a region", r)
			case w < 0 || math.IsNaN(w) || math.IsInf(w, 0):
				c.addf(p+".weights."+r, "%v: want a weight ≥ 0", w)
			default:
				sum += w
			}
		}
		if sum == 0 {
			c.addf(p+".weights", "weights sum to 0: give at least one region a positive weight")
		}
	}
}

// validateNamedBudgets checks a tier's or a tenant's budgets (at p): each a
// name some limit takes (takenBy), each a valid budget (rate and burst
// required in tiers).
func validateNamedBudgets(c *collector, p string, bs map[string]Budget, takenBy map[string]string, regions map[string]bool, required bool) {
	for _, name := range sortedKeys(bs) {
		bp := p + "." + name
		switch {
		case !budgetNameRE.MatchString(name):
			c.addf(bp, "budget name %q: want lowercase letters, digits, '_' or '-' (no '.')", name)
			continue
		case takenBy[name] == "":
			c.addf(bp, "no limit takes budget.%s: add a limit with rate: budget.%s, or remove it", name, name)
			continue
		}
		validateBudget(c, bp, bs[name], regions, required)
	}
}

func validateOverrides(c *collector, p string, ov map[string]Override, limits map[string]limitInfo) {
	for _, name := range sortedKeys(ov) {
		o := ov[name]
		op := p + "." + name
		li, ok := limits[name]
		if !ok {
			c.addf(op, "%q is not a limit (limits: %s)", name, strings.Join(sortedKeys(limits), ", "))
			continue
		}
		if li.budget && (o.Rate != "" || o.Burst != 0) {
			field := "budget"
			if li.budgetName != "" {
				field = "budgets." + li.budgetName
			}
			c.addf(op, "limit %q takes the tenant's budget: set %s.rate and %s.burst instead", name, field, field)
			continue
		}
		if li.keyed && (o.Rate != "" || o.Burst != 0) {
			c.addf(op, "limit %q is global with a rate of its own, one for every tenant's keys: overrides of its rate and burst are not supported (give the tier a limit of its own instead)", name)
			continue
		}
		if o.Rate != "" {
			validateRate(c, op+".rate", o.Rate)
		}
		if o.Burst < 0 {
			c.addf(op+".burst", "%d: want at least 1", o.Burst)
		}
	}
}

func hasKey[V any](m map[string]V, k string) bool { _, ok := m[k]; return ok }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
