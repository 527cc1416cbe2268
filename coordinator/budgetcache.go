package coordinator

import (
	"sort"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/allot-dev/allot/internal/state"
)

// budgetCache mirrors the operator-set budget records from etcd
// (state.Mirror), so that a rebalance reads them from memory instead of a
// prefix read of every record each interval. Until the mirror has synced
// once, the leader reads etcd.
type budgetCache struct {
	store *state.Store

	mu     sync.Mutex
	recs   map[string]state.BudgetRecord
	synced bool
	sorted []state.BudgetRecord // by tenant; nil when recs changed since
	gen    uint64               // bumped by every change
	// changed is signalled (buffered 1, never blocking) with every change:
	// the leader hands the budgets over without waiting for a rebalance.
	changed chan struct{}
}

func newBudgetCache(store *state.Store) *budgetCache {
	return &budgetCache{store: store, recs: map[string]state.BudgetRecord{}, changed: make(chan struct{}, 1)}
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

// Reset implements state.MirrorHandler.
func (b *budgetCache) Reset(kvs []*mvccpb.KeyValue, _ int64) {
	next := make(map[string]state.BudgetRecord, len(kvs))
	for _, kv := range kvs {
		if rec, err := state.DecodeBudget(kv.Value); err == nil {
			next[rec.Tenant] = rec
		}
	}
	b.mu.Lock()
	b.recs, b.sorted, b.synced = next, nil, true
	b.bump()
	b.mu.Unlock()
}

// Put implements state.MirrorHandler.
func (b *budgetCache) Put(kv *mvccpb.KeyValue) {
	rec, err := state.DecodeBudget(kv.Value)
	if err != nil {
		return
	}
	b.mu.Lock()
	b.recs[rec.Tenant], b.sorted = rec, nil
	b.bump()
	b.mu.Unlock()
}

// Delete implements state.MirrorHandler.
func (b *budgetCache) Delete(kv *mvccpb.KeyValue) {
	t, err := b.store.BudgetTenant(kv.Key)
	if err != nil {
		return
	}
	b.mu.Lock()
	delete(b.recs, t)
	b.sorted = nil
	b.bump()
	b.mu.Unlock()
}
