package coordinator

import (
	"sort"
	"sync"

	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/policy"
)

// budgetCache holds the operator-set budget records, mirrored from etcd
// (state.BudgetMirror), so that a rebalance reads them from memory instead
// of a prefix read of every record each interval. Until the mirror has
// synced once, the leader reads etcd.
type budgetCache struct {
	mu     sync.Mutex
	recs   map[string]state.BudgetRecord
	synced bool
	sorted []state.BudgetRecord // by tenant; nil when recs changed since
	gen    uint64               // bumped by every change
	// changed is signalled (buffered 1, never blocking) with every change:
	// the leader hands the budgets over without waiting for a rebalance.
	changed chan struct{}
}

func newBudgetCache() *budgetCache {
	return &budgetCache{recs: map[string]state.BudgetRecord{}, changed: make(chan struct{}, 1)}
}

// bump counts a change. b.mu held.
func (b *budgetCache) bump() {
	b.gen++
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// snapshot returns every record, sorted by tenant, a generation that
// changes whenever a record does, and whether the mirror has synced. The
// slice is shared: callers must not change it.
func (b *budgetCache) snapshot() ([]state.BudgetRecord, uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.synced {
		return nil, 0, false
	}
	if b.sorted == nil {
		b.sorted = make([]state.BudgetRecord, 0, len(b.recs))
		for _, r := range b.recs {
			b.sorted = append(b.sorted, r)
		}
		sort.Slice(b.sorted, func(i, j int) bool { return b.sorted[i].Tenant < b.sorted[j].Tenant })
	}
	return b.sorted, b.gen, true
}

// ResetBudgets implements state.BudgetHandler.
func (b *budgetCache) ResetBudgets(recs map[string]state.BudgetRecord, _ int64) {
	b.mu.Lock()
	b.recs, b.sorted, b.synced = recs, nil, true
	b.bump()
	b.mu.Unlock()
}

// PutBudget implements state.BudgetHandler.
func (b *budgetCache) PutBudget(rec state.BudgetRecord, _ int64) {
	b.mu.Lock()
	b.recs[rec.Tenant], b.sorted = rec, nil
	b.bump()
	b.mu.Unlock()
}

// DeleteBudget implements state.BudgetHandler.
func (b *budgetCache) DeleteBudget(tenant string, _ int64) {
	b.mu.Lock()
	delete(b.recs, tenant)
	b.sorted = nil
	b.bump()
	b.mu.Unlock()
}

// policyCache holds the current policy, mirrored from etcd
// (state.PolicyMirror): the leader takes it from here at each rebalance
// instead of reading etcd, and is told (changed) as soon as it changes. It
// only moves forward: the mirror hands over each revision once, in order.
type policyCache struct {
	mu  sync.Mutex
	pv  state.PolicyVersion
	doc *policy.Document
	rev int64 // of the record; 0 before the first
	// changed is signalled (buffered 1, never blocking) with every change.
	changed chan struct{}
}

func newPolicyCache() *policyCache { return &policyCache{changed: make(chan struct{}, 1)} }

// SetPolicy implements state.PolicyHandler.
func (p *policyCache) SetPolicy(pv state.PolicyVersion, doc *policy.Document, rev int64) {
	p.mu.Lock()
	p.pv, p.doc, p.rev = pv, doc, rev
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// current returns the policy and the revision of its record (0, and a nil
// document, before the mirror found one). The document is shared: callers
// must not change it.
func (p *policyCache) current() (state.PolicyVersion, *policy.Document, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pv, p.doc, p.rev
}
