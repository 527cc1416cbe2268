package shares

import (
	"net/url"
	"strings"
)

// ShardOf returns the coordinator shard of a tenant, or of one of its
// budgets (a BudgetID: the tenant's shard), among n shards: FNV-1a (64 bit)
// of the tenant's name, modulo n. It is stable across processes, releases
// and platforms, since every pod and every coordinator of a cluster must
// place a tenant alike. n ≤ 1 gives 0.
func ShardOf(tenant string, n int) int {
	if n <= 1 {
		return 0
	}
	if i := strings.IndexByte(tenant, '/'); i >= 0 {
		tenant = tenant[:i]
	}
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(tenant); i++ {
		h ^= uint64(tenant[i])
		h *= prime64
	}
	return int(h % uint64(n))
}

// BudgetID is the ID under which the protocol shares tenant's budget name:
// the tenant itself for its budget (name ""), tenant/name for a named budget
// (tenant names hold no '/'). Reports, grants, the allocator and the status
// pages key budgets by it; each is shared on its own.
func BudgetID(tenant, name string) string {
	if name == "" {
		return tenant
	}
	return tenant + "/" + name
}

// SplitBudgetID is BudgetID's inverse: the tenant, and the budget's name
// ("" for the tenant's budget).
func SplitBudgetID(id string) (tenant, name string) {
	if i := strings.IndexByte(id, '/'); i >= 0 {
		return id[:i], id[i+1:]
	}
	return id, ""
}

// KeyBudgetID is the ID of one key's share of a global limit keyed by more
// than the tenant (a user, an API key): tenant/LIMIT=V1,V2 with the key's
// descriptor values query-escaped, so that the name holds no '/' of its
// own beyond the values' escapes. Every key of the limit is shared on its
// own, under the default budget of class "LIMIT=" (see BudgetClass).
func KeyBudgetID(tenant, limit string, values ...string) string {
	var b strings.Builder
	b.Grow(len(tenant) + len(limit) + 2 + 8*len(values))
	b.WriteString(tenant)
	b.WriteByte('/')
	b.WriteString(limit)
	b.WriteByte('=')
	for i, v := range values {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(url.QueryEscape(v))
	}
	return b.String()
}

// BudgetClass is the class of a budget's name (SplitBudgetID): the name of
// a named budget, "LIMIT=" for a key of a global limit (KeyBudgetID). The
// leader's defaults and the pods' cold floors are kept per class.
func BudgetClass(name string) string {
	if i := strings.IndexByte(name, '='); i >= 0 {
		return name[:i+1]
	}
	return name
}
