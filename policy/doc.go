// Package policy is allot's policy model: limits, tiers, tenant budgets and
// regions, parsed strictly from YAML or JSON and validated with errors that
// name the line and the field.
//
// A policy document says which limits exist (a name, the descriptor keys
// that form a limit's key, a rate and burst or "budget" — the tenant's
// global budget — and a scope: global limits are split across regions by
// the coordinator, regional ones are enforced whole in each region), what
// happens when Redis fails (on_failure open with a fallback rate, or
// closed), lease sizes and shadow mode; tiers with default budgets and
// per-limit overrides; a default tier for unknown tenants (or
// unknown_tenants: deny, which denies them); and per-tenant overrides.
// ValidateTenant is the one rule for tenant names, wherever they enter.
//
// Invariants: Parse never returns a document that Validate would reject;
// every error is a *FieldError (or an Errors list of them) naming the field
// path (e.g. tenants.t42.budget.rate) and, when parsed from text, its line.
// Resolve is total: every tenant, known or not, resolves to a budget and a
// limit set. A valid document is enforceable: every limit and budget each
// tenant resolves to is one package gcra can build (B·T within
// gcra.MaxWindow) and every budget one package shares can split; shares of a
// budget are built with gcra.Fit.
//
// The package is pure: no I/O, no clock, no goroutines. Storage (etcd,
// versions, history) lives in the coordinator.
package policy
