package policy

import "strings"

// Version is the only policy schema version this build reads.
const Version = 1

// Limit scopes.
const (
	ScopeGlobal   = "global"   // split across regions from the tenant's budget
	ScopeRegional = "regional" // enforced whole in each region
)

// Failure policies.
const (
	FailOpen   = "open"   // admit through a local fallback limiter
	FailClosed = "closed" // deny with a retry-after
)

// RateBudget is the rate of a limit that takes the tenant's global budget.
// A limit takes one of the tenant's named budgets with RateBudget + "." +
// the name (e.g. budget.tokens; see BudgetOf).
const RateBudget = "budget"

// Modes of sharing a tenant's budget across regions (package shares).
const (
	ModeRebalanced = "rebalanced"
	ModeStatic     = "static"
	ModeFull       = "full"
	ModePinned     = "pinned"
)

// What pods do with unknown tenants: tenants with no entry in the policy's
// tenants and no budget set through the admin API.
const (
	UnknownAllow = "allow" // the default tier applies (the default)
	UnknownDeny  = "deny"  // every request is denied (limit UnknownTenantLimit)
)

// UnknownTenantLimit names the denial of an unknown tenant under
// unknown_tenants: deny, in answers and metrics; no limit may take it.
const UnknownTenantLimit = "unknown_tenant"

// DefaultFloorFraction is the share of each tenant's budget reserved as
// regional floors when the document does not say.
const DefaultFloorFraction = 0.1

// Document is one policy: what every region enforces.
type Document struct {
	Version int `yaml:"version" json:"version"`
	// Regions lists every region allot runs in.
	Regions []string `yaml:"regions" json:"regions"`
	// FloorFraction is the share of each tenant's budget reserved as floors,
	// split equally between regions (default 0.1; pinned tenants 0).
	FloorFraction *float64 `yaml:"floor_fraction,omitempty" json:"floor_fraction,omitempty"`
	// DefaultTier is the tier of tenants that have no entry in Tenants.
	DefaultTier string `yaml:"default_tier" json:"default_tier"`
	// UnknownTenants is allow (default: tenants with no entry in Tenants and
	// no budget set through the admin API get the default tier) or deny
	// (their requests are denied): deny stops callers who can set the
	// tenant descriptor from minting tenants.
	UnknownTenants string `yaml:"unknown_tenants,omitempty" json:"unknown_tenants,omitempty"`
	// Charges marks requests that report a cost already spent rather than
	// ask for one (Envoy's apply_on_stream_done with the response's real
	// cost as hits_addend): a request whose descriptors hold this entry is
	// charged to every limit it matches (without the entry), past the
	// burst if need be, and never denied. Unset: no request is a charge.
	Charges *ChargeEntry `yaml:"charges,omitempty" json:"charges,omitempty"`
	// Limits are checked on every request whose descriptors they match.
	Limits []Limit `yaml:"limits" json:"limits"`
	// Tiers hold default budgets and per-limit overrides.
	Tiers map[string]Tier `yaml:"tiers" json:"tiers"`
	// Tenants hold per-tenant overrides.
	Tenants map[string]Tenant `yaml:"tenants,omitempty" json:"tenants,omitempty"`
}

// ChargeEntry is the descriptor entry that marks a charge (Document.Charges).
type ChargeEntry struct {
	Key   string `yaml:"key" json:"key"`
	Value string `yaml:"value" json:"value"`
}

// Limit is one rate limit.
type Limit struct {
	// Name identifies the limit in metrics, answers and overrides.
	Name string `yaml:"name" json:"name"`
	// Descriptors are the descriptor keys whose values form the limit's key;
	// "tenant" must be one of them.
	Descriptors []string `yaml:"descriptors" json:"descriptors"`
	// Match restricts the limit to requests whose descriptors have these
	// exact values (e.g. route: /login).
	Match map[string]string `yaml:"match,omitempty" json:"match,omitempty"`
	// Rate is "budget" (the tenant's global budget; scope global),
	// "budget.NAME" (the tenant's named global budget NAME, from budgets:
	// in its tier and entry; scope global), or N/s, N/m, N/h, N/d (24 h),
	// N/w (168 h).
	Rate string `yaml:"rate" json:"rate"`
	// Burst is the units admissible at once from idle; not given for
	// rate: budget or budget.NAME (the budget's burst applies).
	Burst int64 `yaml:"burst,omitempty" json:"burst,omitempty"`
	// Scope is global or regional (default: global for rate: budget,
	// regional otherwise).
	Scope string `yaml:"scope,omitempty" json:"scope,omitempty"`
	// OnFailure is open (default) or closed.
	OnFailure string `yaml:"on_failure,omitempty" json:"on_failure,omitempty"`
	// FallbackRate is the per-pod rate admitted while Redis is unavailable
	// (open only; default: the region's grant divided by its live pods).
	FallbackRate string `yaml:"fallback_rate,omitempty" json:"fallback_rate,omitempty"`
	// Lease is the number of units a pod leases at once (0: no lease).
	Lease int64 `yaml:"lease,omitempty" json:"lease,omitempty"`
	// Shadow computes and counts the limit but never enforces it.
	Shadow bool `yaml:"shadow,omitempty" json:"shadow,omitempty"`
}

// Budget is a tenant's global budget and how it is shared.
type Budget struct {
	Rate    string             `yaml:"rate,omitempty" json:"rate,omitempty"`
	Burst   int64              `yaml:"burst,omitempty" json:"burst,omitempty"`
	Mode    string             `yaml:"mode,omitempty" json:"mode,omitempty"`
	Home    string             `yaml:"home,omitempty" json:"home,omitempty"`
	Weights map[string]float64 `yaml:"weights,omitempty" json:"weights,omitempty"`
}

// Override replaces a limit's rate, burst or shadow flag for a tier or a
// tenant.
type Override struct {
	Rate   string `yaml:"rate,omitempty" json:"rate,omitempty"`
	Burst  int64  `yaml:"burst,omitempty" json:"burst,omitempty"`
	Shadow *bool  `yaml:"shadow,omitempty" json:"shadow,omitempty"`
}

// Tier is a class of tenants.
type Tier struct {
	Budget Budget `yaml:"budget" json:"budget"`
	// Budgets are the tier's named global budgets (e.g. tokens: {rate:
	// 200000/m, burst: 50000}), each shared across regions on its own and
	// taken by limits with rate: budget.NAME. Every tier defines every
	// name a limit takes.
	Budgets map[string]Budget   `yaml:"budgets,omitempty" json:"budgets,omitempty"`
	Limits  map[string]Override `yaml:"limits,omitempty" json:"limits,omitempty"`
}

// Tenant overrides its tier.
type Tenant struct {
	Tier   string `yaml:"tier,omitempty" json:"tier,omitempty"`
	Budget Budget `yaml:"budget,omitempty" json:"budget,omitempty"`
	// Budgets override the tier's named budgets, field by field as Budget
	// overrides the tier's budget.
	Budgets map[string]Budget   `yaml:"budgets,omitempty" json:"budgets,omitempty"`
	Shadow  bool                `yaml:"shadow,omitempty" json:"shadow,omitempty"`
	Limits  map[string]Override `yaml:"limits,omitempty" json:"limits,omitempty"`
}

// BudgetOf reports whether a limit's rate takes a budget, and which: "" for
// rate: budget (the tenant's budget), NAME for rate: budget.NAME.
func BudgetOf(rate string) (name string, ok bool) {
	if rate == RateBudget {
		return "", true
	}
	if n, found := strings.CutPrefix(rate, RateBudget+"."); found && n != "" {
		return n, true
	}
	return "", false
}
