package regional

import (
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/keys"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/policy"
	"github.com/allot-dev/allot/shares"
)

// view is a pod's copy of what etcd says (the policy and the tenant budgets
// set through the admin API) and of what the leaders' answers said (its
// region's grants, the lease, the cold floor and the fail-open share, held
// in one shares.Pod per coordinator shard: a tenant's grants come from the
// leader of its shard alone). Reads take the read lock; the mirrors and the
// reporters take the write lock.
type view struct {
	region string
	drift  time.Duration

	mu            sync.RWMutex
	doc           *policy.Document
	policyVersion int64
	budgets       map[string]*state.BudgetRecord
	policyLoaded  bool
	// pods holds, per coordinator shard, the protocol state its leader's
	// answers set (nil until the shard count is known: see setShards);
	// grantsAt, when an answer of that shard last carried grants (pod
	// clock).
	pods     []*shares.Pod
	grantsAt []time.Time

	// shrunk, per shard, is signalled (without blocking; buffered 1) when
	// an answer lowers a tenant's rate or burst: the leader may be holding
	// back a grow elsewhere until this pod acknowledges it, so the
	// shard's reporter reports soon rather than at its next tick. Also
	// when a new leader's renewal applied (its learning may end once it
	// knows) and when the leader asks for a report (a push with
	// ReportNow). Set with pods.
	shrunk []chan struct{}

	// gen counts changes of the policy or budgets; tenant entries of an
	// older generation are recomputed.
	gen     atomic.Uint64
	charge  atomic.Pointer[policy.ChargeEntry] // the policy's, nil when none
	tenants sync.Map                           // tenant → *tenantEntry
	cached  atomic.Int64

	// cold holds the keys decided under cold floors, restated when their
	// grants arrive (see coldKeys).
	cold *coldKeys
}

// maxCachedTenants bounds the tenant cache; past it the cache is emptied
// and refilled by the tenants that are active.
const maxCachedTenants = 200_000

// tenantEntry is one tenant's resolved policy, valid for one generation.
type tenantEntry struct {
	gen      uint64
	resolved policy.Resolved
	budget   shares.Budget
	own      shares.Ceiling // the budget's floor here by the pod's own reading
	shard    int            // the tenant's coordinator shard (-1: shard count not known yet)
	shadow   bool           // the tenant's budget record is in shadow mode
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
	// share is a budget limit's budget ID (shares.BudgetID) and own its
	// floor here by the pod's own reading.
	share string
	own   shares.Ceiling
	// counters are the limit's decision counters, set on first use.
	counters atomic.Pointer[limitCounters]
}

func newView(region string, drift time.Duration) *view {
	return &view{
		region:  region,
		drift:   drift,
		budgets: map[string]*state.BudgetRecord{},
		cold:    newColdKeys(),
	}
}

// setShards sets the coordinator shard count, once: a pod per shard, each
// enforcing nothing for budget limits until its leader answers. A later
// call changes nothing and reports false.
func (v *view) setShards(n int) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.pods != nil || n < 1 {
		return false
	}
	v.pods = make([]*shares.Pod, n)
	v.grantsAt = make([]time.Time, n)
	v.shrunk = make([]chan struct{}, n)
	for i := range v.pods {
		v.pods[i] = shares.NewPod(v.region, v.drift)
		v.shrunk[i] = make(chan struct{}, 1)
	}
	v.gen.Add(1)
	return true
}

// shards returns the shard count (0 before setShards).
func (v *view) shards() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.pods)
}

// podFor returns the protocol state of tenant's shard (nil before
// setShards). Callers hold v.mu or own the view (tests).
func (v *view) podFor(tenant string) *shares.Pod {
	if len(v.pods) == 0 {
		return nil
	}
	return v.pods[shares.ShardOf(tenant, len(v.pods))]
}

// ready reports whether the policy is loaded and every shard's leader sent
// the region's grants once.
func (v *view) ready() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if !v.policyLoaded || len(v.pods) == 0 || v.doc == nil || !slices.Contains(v.doc.Regions, v.region) {
		return false
	}
	for _, p := range v.pods {
		if !p.Synced() {
			return false
		}
	}
	return true
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
	var named map[string]*state.BudgetRecord // the named budgets' records
	if doc != nil {
		for _, name := range doc.BudgetNames() {
			if r := v.budgets[shares.BudgetID(id, name)]; r != nil {
				if named == nil {
					named = map[string]*state.BudgetRecord{}
				}
				named[name] = r
			}
		}
	}
	n := len(v.pods)
	g = v.gen.Load()
	v.mu.RUnlock()
	if doc == nil {
		return nil
	}
	var over *policy.Budget
	te := &tenantEntry{gen: g, shard: -1}
	if n > 0 {
		te.shard = shares.ShardOf(id, n)
	}
	if rec != nil {
		over = &rec.Budget
		te.shadow = rec.Shadow
	}
	te.resolved = doc.Resolve(id)
	rb := doc.TenantBudget(id, over)
	te.budget = rb.Shares()
	fr, fb := shares.Floor(te.budget, doc.Regions, v.region)
	te.own = shares.Ceiling{Rate: fr, Burst: fb}
	te.limits = make([]limitCache, len(te.resolved.Limits))
	for i := range te.resolved.Limits {
		l := &te.resolved.Limits[i]
		lc := &te.limits[i]
		switch {
		case l.FromBudget && l.Budget == "":
			l.Rate, l.Burst = rb.Rate, rb.Burst
			lc.share, lc.own = id, te.own
			if te.shadow {
				l.Shadow = true
			}
		case l.FromBudget:
			// A named budget: shared on its own, under its own ID, floor
			// and record.
			var nover *policy.Budget
			nrec := named[l.Budget]
			if nrec != nil {
				nover = &nrec.Budget
			}
			nb, _ := doc.NamedBudget(id, l.Budget, nover)
			l.Rate, l.Burst = nb.Rate, nb.Burst
			r, b := shares.Floor(nb.Shares(), doc.Regions, v.region)
			lc.share, lc.own = shares.BudgetID(id, l.Budget), shares.Ceiling{Rate: r, Burst: b}
			if nrec != nil && nrec.Shadow {
				l.Shadow = true
			}
		case l.Global:
			// A global limit with a rate of its own: each key is shared
			// on its own (shares.KeyBudgetID), under this budget.
			lc.lim, lc.limErr = gcra.NewLimit(l.Rate, l.Burst)
			r, b := shares.Floor(doc.KeyBudget(l).Shares(), doc.Regions, v.region)
			lc.own = shares.Ceiling{Rate: r, Burst: b}
		default:
			lc.lim, lc.limErr = gcra.NewLimit(l.Rate, l.Burst)
		}
		if len(l.Descriptors) == 1 && l.Descriptors[0] == "tenant" {
			if k, err := keys.Key(id, l.Name); err == nil {
				lc.key = k
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

// chargeEntry returns the policy's descriptor entry that marks a charge
// (policy.Document.Charges), ok false when it has none.
func (v *view) chargeEntry() (key, value string, ok bool) {
	c := v.charge.Load() // (no lock: every RLS call asks)
	if c == nil {
		return "", "", false
	}
	return c.Key, c.Value, true
}

// effective returns the rate and burst the pod enforces now for the budget
// of te's limit lc on the Redis path, whether it comes from a leased grant,
// and whether it is the cold floor (the pod holds no grant of the budget).
func (v *view) effective(now time.Time, te *tenantEntry, lc *limitCache) (rate float64, burst int64, leased, cold bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if te.shard < 0 || te.shard >= len(v.pods) {
		return 0, 0, false, false // (the entry predates the shard count: it is recomputed)
	}
	return effectiveOf(v.pods[te.shard], now, lc.share, lc.own)
}

// effectiveKey is effective for one key's share (shares.KeyBudgetID id) of
// te's global limit lc.
func (v *view) effectiveKey(now time.Time, te *tenantEntry, id string, lc *limitCache) (rate float64, burst int64, leased, cold bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if te.shard < 0 || te.shard >= len(v.pods) {
		return 0, 0, false, false
	}
	return effectiveOf(v.pods[te.shard], now, id, lc.own)
}

// effectiveOf is p.Effective, and whether it is the cold floor: not from
// a leased grant while the lease is valid, so from no grant at all.
func effectiveOf(p *shares.Pod, now time.Time, id string, own shares.Ceiling) (rate float64, burst int64, leased, cold bool) {
	rate, burst, leased = p.Effective(now, id, own)
	return rate, burst, leased, !leased && p.Leased(now)
}

// ownLocked is a budget's floor in this region by the pod's own reading of
// the policy. v.mu held.
func (v *view) ownLocked(b shares.Budget) shares.Ceiling {
	if v.doc == nil {
		return shares.Ceiling{}
	}
	r, bu := shares.Floor(b, v.doc.Regions, v.region)
	return shares.Ceiling{Rate: r, Burst: bu}
}

// ownTenantLocked is the floor of a tenant's budget (a shares.BudgetID) by
// the pod's own reading: none for a name the policy has no budget of.
// v.mu held.
func (v *view) ownTenantLocked(id string) shares.Ceiling {
	if v.doc == nil {
		return shares.Ceiling{}
	}
	var over *policy.Budget
	if rec := v.budgets[id]; rec != nil {
		over = &rec.Budget
	}
	tenant, name := shares.SplitBudgetID(id)
	if lim, _, keyed := strings.Cut(name, "="); keyed {
		// A key's share of a global limit.
		for _, l := range v.doc.KeyLimits() {
			if l.Name == lim {
				return v.ownLocked(v.doc.KeyBudget(&l).Shares())
			}
		}
		return shares.Ceiling{}
	}
	b, ok := v.doc.NamedBudget(tenant, name, over)
	if !ok {
		return shares.Ceiling{}
	}
	return v.ownLocked(b.Shares())
}

// failOpenShare returns the denominator of the pod's fail-open share of
// shard's tenants' budgets now (0: it may not fail open).
func (v *view) failOpenShare(shard int, now time.Time) int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if shard < 0 || shard >= len(v.pods) {
		return 0
	}
	return v.pods[shard].FailOpenShare(now)
}

// leaderPods is the region's pod count as the leaders last counted it (the
// largest count any shard's leader gave).
func (v *view) leaderPods() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	n := 0
	for _, p := range v.pods {
		n = max(n, p.Pods())
	}
	return n
}

// reportState returns what shard's next report carries: the term and epoch
// of the grants the pod holds, and those grants when they are of an older
// term than the last answering leader's.
func (v *view) reportState(shard int, now time.Time) (term, applied uint64, held []shares.Entry, st standing) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	p := v.pods[shard]
	term, applied = p.State()
	st.heard, st.renewedBy, st.leased = p.Standing(now)
	return term, applied, p.Held(), st
}

// standing is what a report says of the pod's standing (see
// shares.Pod.Standing), read with the rest of its state.
type standing struct {
	heard, renewedBy uint64
	leased           bool
}

// answered applies shard's leader's answer to the report sent at sentAt.
func (v *view) answered(shard int, sentAt time.Time, a shares.Answer, now time.Time) {
	v.apply(shard, a, now, func(p *shares.Pod) { p.Answered(now, sentAt, a, v.ownTenantLocked) })
}

// pushed applies a push of shard's leader (an answer to no report, which
// renews no lease).
func (v *view) pushed(shard int, a shares.Answer, now time.Time) {
	if a.ReportNow {
		// The leader asks for a report: it grants, and this pod holds an
		// older term's grants it renewed.
		v.signal(shard)
		return
	}
	v.apply(shard, a, now, func(p *shares.Pod) { p.Pushed(now, a, v.ownTenantLocked) })
}

// signal asks shard's reporter for an early report (without blocking).
func (v *view) signal(shard int) {
	v.mu.RLock()
	ch := v.shrunk[shard]
	v.mu.RUnlock()
	select {
	case ch <- struct{}{}:
	default:
	}
}

// apply applies answer a to shard's state with fn, under the lock, and
// signals shrunk when it shrank a grant.
func (v *view) apply(shard int, a shares.Answer, now time.Time, fn func(*shares.Pod)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.pods[shard]
	shrunk := false
	for _, e := range a.Entries {
		if g, ok := p.Grant(e.Tenant); ok && e.Grant.Epoch > g.Epoch && (e.Grant.Rate < g.Rate || e.Grant.Burst < g.Burst) {
			shrunk = true
		}
	}
	_, renewedBefore, _ := p.Standing(now)
	fn(p)
	if !a.Learning && v.cold.pending.Load() > 0 {
		// Keys decided under a budget's cold floor are restated under its
		// grant as it arrives.
		granted := false
		for _, e := range a.Entries {
			if _, ok := p.Grant(e.Tenant); ok && v.cold.granted(shard, e.Tenant) {
				granted = true
			}
		}
		if granted {
			v.cold.signal()
		}
	}
	if _, renewed, _ := p.Standing(now); renewed > renewedBefore {
		// A new leader renewed what the pod holds: tell it at once that
		// the renewal applied, so that its learning can end.
		shrunk = true
	}
	if (len(a.Entries) > 0 && !a.Learning) || a.Full {
		// (A learning answer's entries only lower held floors.)
		v.grantsAt[shard] = now
	}
	if a.Full && !a.Learning && a.Epoch > 0 {
		// The leader pushes a pod only the changes since the epoch it last
		// *reported*, and none to a pod that reported none of this term
		// (its first report, or one of an older term): say at once which
		// epoch it holds now, or the region's steps reach it only with its
		// next periodic report. (Epoch 0 would be answered in full again:
		// nothing to say.)
		shrunk = true
	}
	if shrunk {
		select {
		case v.shrunk[shard] <- struct{}{}:
		default:
		}
	}
}

// unanswered records that shard's report got no answer from a leader.
func (v *view) unanswered(shard int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pods[shard].Unanswered()
}

// removed records that shard's leader said the pod's region is not in the
// policy.
func (v *view) removed(shard int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pods[shard].Removed()
}

// lowerFloors lowers every grant's floor to the pod's own reading, after the
// policy or a budget changed. v.mu held.
func (v *view) lowerFloorsLocked() {
	for _, p := range v.pods {
		p.LowerFloors(v.ownTenantLocked)
	}
}

// leaseUntil returns when the pod's lease ends: the soonest any shard's
// ends (zero: some shard's never renewed, or the shard count is not known).
func (v *view) leaseUntil() time.Time {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var u time.Time
	for i, p := range v.pods {
		if l := p.LeaseUntil(); i == 0 || l.Before(u) {
			u = l
		}
	}
	return u
}

// grantsOldest returns when the answer of the shard that went longest without
// one last carried grants (zero: some shard's never did).
func (v *view) grantsOldest() time.Time {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var at time.Time
	for i, g := range v.grantsAt {
		if i == 0 || g.Before(at) {
			at = g
		}
	}
	return at
}

// policyMirror takes the current policy from a state.PolicyMirror.
type policyMirror struct{ v *view }

// SetPolicy implements state.PolicyHandler.
func (m policyMirror) SetPolicy(pv state.PolicyVersion, doc *policy.Document, _ int64) {
	v := m.v
	v.mu.Lock()
	defer v.mu.Unlock()
	v.doc, v.policyVersion, v.policyLoaded = doc, pv.Version, true
	v.charge.Store(doc.Charges)
	v.lowerFloorsLocked()
	v.gen.Add(1)
}

// budgetMirror takes the budget records from a state.BudgetMirror.
type budgetMirror struct{ v *view }

// ResetBudgets implements state.BudgetHandler.
func (m budgetMirror) ResetBudgets(recs map[string]state.BudgetRecord, _ int64) {
	v := m.v
	next := make(map[string]*state.BudgetRecord, len(recs))
	for t, rec := range recs {
		next[t] = &rec
	}
	v.mu.Lock()
	v.budgets = next
	v.lowerFloorsLocked()
	v.mu.Unlock()
	v.gen.Add(1)
}

// PutBudget implements state.BudgetHandler.
func (m budgetMirror) PutBudget(rec state.BudgetRecord, _ int64) {
	m.v.mu.Lock()
	m.v.budgets[rec.Tenant] = &rec
	if p := m.v.podFor(rec.Tenant); p != nil {
		p.LowerFloors(func(t string) shares.Ceiling {
			if t != rec.Tenant {
				return shares.Ceiling{Rate: math.Inf(1), Burst: math.MaxInt64}
			}
			return m.v.ownTenantLocked(t)
		})
	}
	m.v.mu.Unlock()
	m.v.gen.Add(1)
}

// DeleteBudget implements state.BudgetHandler.
func (m budgetMirror) DeleteBudget(tenant string, _ int64) {
	m.v.mu.Lock()
	delete(m.v.budgets, tenant)
	m.v.lowerFloorsLocked()
	m.v.mu.Unlock()
	m.v.gen.Add(1)
}
