package regional

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/keys"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/policy"
	"github.com/allot-dev/allot/shares"
)

// view is a pod's copy of what etcd says: the policy, the tenant budgets set
// through the admin API, and its region's grants (held in a shares.Region,
// with the lease). Reads take the read lock; the mirrors and the reporter
// take the write lock.
type view struct {
	region string
	store  *state.Store
	drift  time.Duration

	mu            sync.RWMutex
	doc           *policy.Document
	policyVersion int64
	budgets       map[string]*state.BudgetRecord
	grants        map[string]shares.Change // last grant per tenant, to rebuild the Region
	reg           *shares.Region
	policyLoaded  bool
	grantsSynced  bool
	grantsAt      time.Time // when a grant last arrived (pod clock)
	minEpoch      uint64    // largest MinEpoch a renewal carried

	// shrunk is signalled (without blocking; buffered 1) when a grant
	// arrives that lowers a tenant's rate or burst: the leader may be
	// holding back a grow elsewhere until this pod acknowledges it, so the
	// reporter reports soon rather than at its next tick.
	shrunk chan struct{}

	// gen counts changes of the policy or budgets; tenant entries of an
	// older generation are recomputed.
	gen     atomic.Uint64
	tenants sync.Map // tenant → *tenantEntry
	cached  atomic.Int64
}

// maxCachedTenants bounds the tenant cache; past it the cache is emptied
// and refilled by the tenants that are active.
const maxCachedTenants = 200_000

// tenantEntry is one tenant's resolved policy, valid for one generation.
type tenantEntry struct {
	gen      uint64
	resolved policy.Resolved
	budget   shares.Budget
	shadow   bool // the tenant's budget record is in shadow mode
	// limits holds, per resolved limit (same index), what the decide path
	// would otherwise work out again on every request.
	limits []limitCache
}

// limitCache is what one limit of one tenant needs on every decision.
type limitCache struct {
	// key is the limit's key when tenant is its only descriptor (the key
	// depends on nothing else), "" otherwise.
	key string
	// lim is a fixed-rate limit's (T, B), or limErr why it has none; budget
	// limits take the region's grant instead, which changes.
	lim    gcra.Limit
	limErr error
	// counters are the limit's decision counters, set on first use.
	counters atomic.Pointer[limitCounters]
}

func newView(region string, store *state.Store, drift time.Duration) *view {
	return &view{
		region:  region,
		store:   store,
		drift:   drift,
		budgets: map[string]*state.BudgetRecord{},
		grants:  map[string]shares.Change{},
		shrunk:  make(chan struct{}, 1),
	}
}

// ready reports whether the policy is loaded and the grants synced once.
func (v *view) ready() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.policyLoaded && v.grantsSynced && v.doc != nil && slices.Contains(v.doc.Regions, v.region)
}

// tenant returns tenant's resolved policy, or nil before a policy is loaded.
func (v *view) tenant(id string) *tenantEntry {
	g := v.gen.Load()
	if e, ok := v.tenants.Load(id); ok {
		if te := e.(*tenantEntry); te.gen == g {
			return te
		}
	}
	v.mu.RLock()
	doc := v.doc
	rec := v.budgets[id]
	g = v.gen.Load()
	v.mu.RUnlock()
	if doc == nil {
		return nil
	}
	var over *policy.Budget
	te := &tenantEntry{gen: g}
	if rec != nil {
		over = &rec.Budget
		te.shadow = rec.Shadow
	}
	te.resolved = doc.Resolve(id)
	rb := doc.TenantBudget(id, over)
	te.budget = rb.Shares()
	te.limits = make([]limitCache, len(te.resolved.Limits))
	for i := range te.resolved.Limits {
		l := &te.resolved.Limits[i]
		if l.FromBudget {
			l.Rate, l.Burst = rb.Rate, rb.Burst
			if te.shadow {
				l.Shadow = true
			}
		} else {
			te.limits[i].lim, te.limits[i].limErr = gcra.NewLimit(l.Rate, l.Burst)
		}
		if len(l.Descriptors) == 1 && l.Descriptors[0] == "tenant" {
			if k, err := keys.Key(id, l.Name); err == nil {
				te.limits[i].key = k
			}
		}
	}
	if _, loaded := v.tenants.Swap(id, te); !loaded {
		if v.cached.Add(1) > maxCachedTenants {
			v.tenants.Clear()
			v.cached.Store(0)
		}
	}
	return te
}

// effective returns the rate and burst the region enforces now for a
// tenant's budget, and whether it comes from a leased grant.
func (v *view) effective(now time.Time, tenant string, b shares.Budget) (float64, int64, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.reg == nil {
		return 0, 0, false
	}
	return v.reg.Effective(now, tenant, b)
}

// applied returns the highest grant epoch applied.
func (v *view) applied() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.reg == nil {
		return 0
	}
	return v.reg.Applied()
}

// renewed records a lease renewal for the report sent at sentAt.
func (v *view) renewed(sentAt time.Time, rn shares.Renewal) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.minEpoch = max(v.minEpoch, rn.MinEpoch)
	if v.reg != nil {
		v.reg.Renewed(sentAt, rn)
	}
}

// leaseUntil returns when the pod's lease ends (zero: never renewed).
func (v *view) leaseUntil() time.Time {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.reg == nil {
		return time.Time{}
	}
	return v.reg.LeaseUntil()
}

// rebuild makes a new shares.Region for the policy's regions, keeping the
// lease and re-applying every known grant in epoch order. v.mu held.
func (v *view) rebuild() {
	if v.doc == nil {
		return
	}
	cfg := shares.DefaultConfig(v.doc.Regions...)
	var lease time.Time
	if v.reg != nil {
		lease = v.reg.LeaseUntil()
	}
	r := shares.NewRegion(v.region, cfg, v.drift)
	// Keep the lease (the same renewal still bounds it) and the minimum
	// epoch renewals carried.
	if !lease.IsZero() {
		r.Renewed(lease.Add(v.drift), shares.Renewal{MinEpoch: v.minEpoch})
	}
	cs := make([]shares.Change, 0, len(v.grants))
	for _, c := range v.grants {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Grant.Epoch < cs[j].Grant.Epoch })
	for _, c := range cs {
		r.Apply(c)
	}
	v.reg = r
}

// policyMirror feeds the current-policy key.
type policyMirror struct{ v *view }

func (m policyMirror) Reset(kvs []*mvccpb.KeyValue, _ int64) {
	for _, kv := range kvs {
		if string(kv.Key) == m.v.store.PolicyKey() {
			m.Put(kv)
		}
	}
}

func (m policyMirror) Put(kv *mvccpb.KeyValue) {
	if string(kv.Key) != m.v.store.PolicyKey() {
		return
	}
	pv, doc, err := state.DecodePolicy(kv.Value)
	if err != nil {
		return // keep enforcing the last good policy
	}
	v := m.v
	v.mu.Lock()
	defer v.mu.Unlock()
	regionsChanged := v.doc == nil || !slices.Equal(v.doc.Regions, doc.Regions)
	v.doc, v.policyVersion, v.policyLoaded = doc, pv.Version, true
	if regionsChanged {
		v.rebuild()
	}
	v.gen.Add(1)
}

func (m policyMirror) Delete([]byte) {}

// budgetMirror feeds the budget records.
type budgetMirror struct{ v *view }

func (m budgetMirror) Reset(kvs []*mvccpb.KeyValue, _ int64) {
	v := m.v
	next := make(map[string]*state.BudgetRecord, len(kvs))
	for _, kv := range kvs {
		if rec, err := state.DecodeBudget(kv.Value); err == nil {
			next[rec.Tenant] = &rec
		}
	}
	v.mu.Lock()
	v.budgets = next
	v.mu.Unlock()
	v.gen.Add(1)
}

func (m budgetMirror) Put(kv *mvccpb.KeyValue) {
	rec, err := state.DecodeBudget(kv.Value)
	if err != nil {
		return
	}
	m.v.mu.Lock()
	m.v.budgets[rec.Tenant] = &rec
	m.v.mu.Unlock()
	m.v.gen.Add(1)
}

func (m budgetMirror) Delete(key []byte) {
	t, err := m.v.store.BudgetTenant(key)
	if err != nil {
		return
	}
	m.v.mu.Lock()
	delete(m.v.budgets, t)
	m.v.mu.Unlock()
	m.v.gen.Add(1)
}

// grantMirror feeds the region's grants, in the order etcd delivers them
// (the leader writes them in epoch order).
type grantMirror struct {
	v   *view
	now func() time.Time
}

func (m grantMirror) Reset(kvs []*mvccpb.KeyValue, _ int64) {
	v := m.v
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, kv := range kvs {
		c, err := v.store.DecodeGrant(kv.Key, kv.Value)
		if err != nil || c.Region != v.region {
			continue
		}
		if old, ok := v.grants[c.Tenant]; !ok || old.Grant.Epoch < c.Grant.Epoch {
			v.grants[c.Tenant] = c
		}
	}
	v.rebuild()
	v.grantsSynced = true
	v.grantsAt = m.now()
}

func (m grantMirror) Put(kv *mvccpb.KeyValue) {
	v := m.v
	c, err := v.store.DecodeGrant(kv.Key, kv.Value)
	if err != nil || c.Region != v.region {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	old, had := v.grants[c.Tenant]
	if had && old.Grant.Epoch >= c.Grant.Epoch {
		return
	}
	v.grants[c.Tenant] = c
	if v.reg != nil {
		v.reg.Apply(c)
	}
	v.grantsAt = m.now()
	if had && (c.Grant.Rate < old.Grant.Rate || c.Grant.Burst < old.Grant.Burst) {
		select {
		case v.shrunk <- struct{}{}:
		default:
		}
	}
}

func (m grantMirror) Delete([]byte) {}
