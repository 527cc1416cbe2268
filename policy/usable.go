package policy

import (
	"fmt"
	"strings"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/shares"
)

// This file checks that what a tenant resolves to can be enforced: every
// fixed-rate limit and every budget, after the tier's and the tenant's
// overrides, is a limit package gcra can build (gcra.NewLimit: B·T within
// gcra.MaxWindow) and every budget one package shares can split across the
// regions. The rules themselves live in those packages; this file only
// names the field that made a tenant's limit unusable. Shares of a budget
// (regional grants and floors) are slower than the budget and may rest
// longer: the decide path builds them with gcra.Fit, which lowers their
// burst instead of failing.

// usable is what the checks of resolved limits need to know of the rest of
// the document.
type usable struct {
	regions bool            // regions and floor_fraction have no error
	tiers   map[string]bool // tier name → it has no error
}

// window describes gcra.MaxWindow for messages.
func window() string {
	return fmt.Sprintf("about %.0f years", gcra.MaxWindow.Hours()/(365.25*24))
}

// checkWindow reports a rate and burst gcra cannot turn into a limit, at
// p.burst when the burst was set at p (burstHere), else at p.rate. rate must
// be valid and burst at least 1.
func checkWindow(c *collector, p string, rate gcra.Rate, burst int64, burstHere bool) {
	_, err := gcra.NewLimit(rate, burst)
	switch {
	case err == nil:
	case burstHere:
		c.addf(p+".burst", "%d: rate %s × burst exceeds the longest window allot can keep (%s); lower the burst to at most %d",
			burst, rate, window(), rate.MaxBurst())
	default:
		c.addf(p+".rate", "%s: with burst %d, rate × burst exceeds the longest window allot can keep (%s); raise the rate or lower the burst to at most %d",
			rate, burst, window(), rate.MaxBurst())
	}
}

// checkShares reports a budget package shares cannot split across the
// regions (it would never grant it), at the field shares names under p.
func (d *Document) checkShares(c *collector, p string, b ResolvedBudget, u usable) {
	if !u.regions {
		return
	}
	err := b.Shares().Validate(d.Regions)
	if err == nil {
		return
	}
	msg := strings.TrimPrefix(err.Error(), shares.ErrInvalidBudget.Error()+": ")
	field, rest, ok := strings.Cut(msg, ": ")
	if !ok {
		c.addf(p, "%s", msg)
		return
	}
	switch field {
	case "Floor":
		c.addf("floor_fraction", "%s", rest)
	case "regions":
		c.addf("regions", "%s", rest)
	default:
		c.addf(p+"."+strings.ToLower(field), "%s", rest)
	}
}

// checkTierUsable checks tier t (at p, free of errors of its own): its
// budget, and each limit it overrides.
func (d *Document) checkTierUsable(c *collector, p string, t Tier, limits map[string]limitInfo, u usable) {
	b := d.resolveBudget(t.Budget, Budget{})
	n := len(c.errs)
	checkWindow(c, p+".budget", b.Rate, b.Burst, true)
	if len(c.errs) == n {
		d.checkShares(c, p+".budget", b, u)
	}
	for _, name := range sortedKeys(t.Budgets) {
		b := d.resolveBudget(t.Budgets[name], Budget{})
		bp := p + ".budgets." + name
		n := len(c.errs)
		checkWindow(c, bp, b.Rate, b.Burst, true)
		if len(c.errs) == n {
			d.checkShares(c, bp, b, u)
		}
	}
	for _, name := range sortedKeys(t.Limits) {
		li := limits[name]
		o := t.Limits[name]
		if !li.valid || li.budget || (o.Rate == "" && o.Burst == 0) {
			continue
		}
		rate, burst := override(li.rate, li.burst, o)
		checkWindow(c, p+".limits."+name, rate, burst, o.Burst != 0)
	}
}

// checkTenantUsable checks tenant t (at p, free of errors of its own) as it
// resolves: its budget over its tier's, and each limit it overrides over its
// tier's overrides. What it does not change was checked with its tier.
func (d *Document) checkTenantUsable(c *collector, p string, t Tenant, limits map[string]limitInfo, u usable) {
	tierName := t.Tier
	if tierName == "" {
		tierName = d.DefaultTier
	}
	tier, ok := d.Tiers[tierName]
	if !ok || !u.tiers[tierName] {
		return
	}
	if t.Budget.Rate != "" || t.Budget.Burst != 0 || t.Budget.Mode != "" {
		b := d.resolveBudget(tier.Budget, t.Budget)
		n := len(c.errs)
		if t.Budget.Rate != "" || t.Budget.Burst != 0 {
			checkWindow(c, p+".budget", b.Rate, b.Burst, t.Budget.Burst != 0)
		}
		if len(c.errs) == n {
			d.checkShares(c, p+".budget", b, u)
		}
	}
	for _, name := range sortedKeys(t.Budgets) {
		tb, ok := tier.Budgets[name]
		o := t.Budgets[name]
		if !ok || (o.Rate == "" && o.Burst == 0 && o.Mode == "") {
			continue
		}
		b := d.resolveBudget(tb, o)
		bp := p + ".budgets." + name
		n := len(c.errs)
		if o.Rate != "" || o.Burst != 0 {
			checkWindow(c, bp, b.Rate, b.Burst, o.Burst != 0)
		}
		if len(c.errs) == n {
			d.checkShares(c, bp, b, u)
		}
	}
	for _, name := range sortedKeys(t.Limits) {
		li := limits[name]
		o := t.Limits[name]
		if !li.valid || li.budget || (o.Rate == "" && o.Burst == 0) {
			continue
		}
		rate, burst := override(li.rate, li.burst, tier.Limits[name])
		rate, burst = override(rate, burst, o)
		checkWindow(c, p+".limits."+name, rate, burst, o.Burst != 0)
	}
}

// override applies o to a limit's rate and burst, as Resolve does. o must be
// valid.
func override(rate gcra.Rate, burst int64, o Override) (gcra.Rate, int64) {
	if o.Rate != "" {
		rate = mustRate(o.Rate)
	}
	if o.Burst != 0 {
		burst = o.Burst
	}
	return rate, burst
}
