package shares

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// Usage is what a region observed for one tenant during a report interval,
// in units.
type Usage struct {
	// Offered is every unit asked for: admitted plus denied.
	Offered float64
	// Admitted is the units admitted.
	Admitted float64
	// Step marks, in a pod's report, a tenant whose rate the pod saw move
	// (see Tracker): the leader takes this report's rate as the pod's at
	// once, instead of merging it with the rates before, and rebalances
	// the tenant as the report arrives.
	Step bool
	// Decisions is how many decisions asked for Offered, where a pod
	// counts them for its Tracker (see Tracker.AddDecisions); 0: not
	// counted. Reports do not carry it.
	Decisions float64
}

// Report is one region's report to the leader.
type Report struct {
	// Region names the reporting region; it must be one of Config.Regions.
	Region string
	// Interval is the span the counts cover (> 0).
	Interval time.Duration
	// Applied is the highest grant epoch the region has applied. Epochs are
	// per region and strictly increasing across all of the region's
	// tenants; a region applies grants in epoch order, as the leader's
	// answers deliver them, so Applied ≥ e means it enforces no grant older than
	// its newest with epoch ≤ e, for every tenant.
	Applied uint64
	// Usage is per tenant. Tenants absent from the map offered nothing.
	Usage map[string]Usage
}

// Renewal is the leader's answer to a report: a lease.
type Renewal struct {
	// Lease is how long the region may enforce its grants. The region
	// counts it from when it sent the report, minus its drift margin.
	Lease time.Duration
	// MinEpoch: the region enforces only grants with Epoch ≥ MinEpoch;
	// for older ones it enforces the floor.
	MinEpoch uint64
}

// Grant is what one region may enforce for one tenant.
type Grant struct {
	// Rate is in units per second; 0 admits nothing.
	Rate float64
	// Burst is whole units, ≥ 1 whenever Rate > 0.
	Burst int64
	// FloorRate and FloorBurst are what the region falls back to when its
	// lease lapses: the leader's word, never above Rate and Burst. A pod
	// enforces the smaller of them and the floor it computes from its own
	// copy of the budget (lowering on its own reading is always safe).
	FloorRate  float64
	FloorBurst int64
	// Epoch orders the region's grants (see Report.Applied).
	Epoch uint64
	// Dropped: the leader forgot the tenant (idle, or without a budget):
	// the region holds no grant of it from Epoch on, and its pods delete
	// theirs (they then enforce the cold floor while leased). The other
	// fields are zero.
	Dropped bool
	// BudgetRate and BudgetBurst are the tenant's budget when the leader
	// made the grant (n times it in full mode: what the n regions may
	// enforce together), or a larger one a change replaced shortly before
	// (see Allocator.stampOf; 0: unknown). A later leader, while it learns, renews
	// the lease of a pod's older grants only if no budget of theirs has
	// since been lowered (see Leader.Report).
	BudgetRate  float64
	BudgetBurst int64
}

// Ceiling is the largest rate and burst a region may be enforcing for a
// tenant: its newest grant or any older one it may not yet have replaced,
// or its floor.
type Ceiling struct {
	Rate  float64
	Burst int64
}

// Change is one grant the leader made, to deliver to its region (in the
// answers to the region's pods' reports).
type Change struct {
	Tenant string
	Region string
	Grant  Grant
	// Ceiling is the most the region may be enforcing for the tenant until
	// it acknowledges Grant.Epoch: the larger of Grant and every older grant
	// still possibly in force.
	Ceiling Ceiling
	// MinEpoch is the region's minimum epoch when the change was made
	// (grants older than it were revoked when the region's lease surely
	// ended).
	MinEpoch uint64
}

// slot is the leader's state of one tenant in one region.
type slot struct {
	rate   float64 // current grant's rate (epoch 0: no grant, the floor applies)
	burst  int64
	epoch  uint64  // current grant's epoch; 0 means no grant
	demand float64 // offered units per second, smoothed fast up and slowly down
	fast   float64 // offered units per second, smoothed fast both ways
	stamp  float64 // the region's report clock when the estimates were last brought up to date
	tgt    float64 // a grow the last pass could not complete: its target rate (else the rate)
	tgtB   int64   // and its burst target (else the burst)
	nheld  int
	held   [maxHeld]held // older grants the region may still enforce, oldest first
	first  uint64        // epoch of the slot's first grant: until acknowledged, the cold floor may be in force
	legR   float64       // the largest floor pods of an older term reported holding (see Legacy)
	legB   int64
	// dropped is the epoch of the tombstone that dropped the slot's grant
	// (epoch is 0 since), while the tenant is being forgotten.
	dropped uint64
	// pfR, pfB: the region's floor under budgets a change replaced, while
	// pods that read etcd later than the leader may still enforce it (see
	// note).
	pfR float64
	pfB int64
}

// held is an older grant a region may still be enforcing: until it
// acknowledges the epoch of the grant that replaced it.
type held struct {
	rate  float64
	burst int64
	until uint64
}

// maxHeld bounds the older grants remembered per slot; beyond it the two
// oldest merge into one that is as large as either and lasts as long as the
// later (which only overstates what the region may enforce).
const maxHeld = 2

// prune forgets the older grants the region has acknowledged replacing.
func (sl *slot) prune(acked uint64) {
	k := 0
	for k < sl.nheld && sl.held[k].until <= acked {
		k++
	}
	if k > 0 {
		copy(sl.held[:], sl.held[k:sl.nheld])
		sl.nheld -= k
	}
}

// heldMax returns the largest rate and burst of the older grants.
func (sl *slot) heldMax() (float64, int64) {
	var r float64
	var b int64
	for _, h := range sl.held[:sl.nheld] {
		r, b = max(r, h.rate), max(b, h.burst)
	}
	return r, b
}

// push remembers an older grant.
func (sl *slot) push(h held) {
	if sl.nheld == maxHeld {
		m := held{rate: max(sl.held[0].rate, sl.held[1].rate), burst: max(sl.held[0].burst, sl.held[1].burst), until: sl.held[1].until}
		sl.held[0] = m
		copy(sl.held[1:], sl.held[2:sl.nheld])
		sl.nheld--
	}
	sl.held[sl.nheld] = h
	sl.nheld++
}

// tenantState is per tenant, beside its slots.
type tenantState struct {
	name   string    // "" while the index is free
	born   uint64    // Allocator.frees when the index was given this tenant
	usedAt time.Time // when a pod last reported the tenant's traffic (see Leader)
	rate   float64   // R at the last rebalance, for DemandCap; 0 until known
	budget Budget    // its budget in that rebalance (its own, or the default)
	own    bool      // budget is the tenant's own (see setBudgets)
	class  int32     // budget class: its cold floors (see classOf)
	// noted is the budget the allocator last saw the tenant under; pfUntil
	// ends the slots' pfR, pfB (see note).
	noted   Budget
	isNoted bool
	pfUntil time.Time
	// peakR, peakB: the largest budget (as stampOf counts it) the tenant
	// had within peakWindow before peakUntil, while a change may still be
	// under way.
	peakR     float64
	peakB     int64
	peakUntil time.Time
}

// regionState is the leader's state of one region.
type regionState struct {
	epoch       uint64    // last epoch issued to the region
	acked       uint64    // highest epoch the region reported applied
	minEpoch    uint64    // grants older than this were revoked
	leaseExpiry time.Time // leader clock: the region's lease surely ended by then
	revoked     bool      // the lapse since the last report was handled
	clock       float64   // Σ report intervals, in Intervals: absent tenants decay lazily
	// unblock is the smallest epoch whose acknowledgement retires an older
	// grant of a tenant with a pending grow (0: none): an acknowledgement
	// of it makes Grow worth running.
	unblock uint64
	// cold holds, per budget class (see Allocator.classOf; class 0 is the
	// tenants' budgets), the cold floor the region's pods may hold.
	cold []coldFloor
	// forgotten: a pod that applied less than this epoch may hold a grant
	// of a tenant the leader has forgotten, which no delta drops: it gets
	// a full answer.
	forgotten uint64
	// legacy: some pod that reported floors of an older term has not
	// applied this term's grants yet (see Legacy).
	legacy bool
}

// coldFloor is one class's cold floor in one region: r, b the largest the
// region's pods may hold (see SetCold), curR, curB the one set last, and
// held the ones set before it that pods may still hold.
type coldFloor struct {
	r, curR float64
	b, curB int64
	held    []heldCold
}

// heldCold is a cold floor that was lowered: pods may hold it until the
// last lease an answer carried while it was current has surely ended.
type heldCold struct {
	r     float64
	b     int64
	until time.Time // leader clock
}

// set makes c the current cold floor. One lowered is held until the
// region's lease surely ended (leaseExpiry, leader clock): every answer
// that carried it renewed a lease ending before then, and a pod applies a
// lower cold floor from every answer that renews its lease (Pod.Answered),
// so once its lease comes from a later answer it holds the lower one.
func (f *coldFloor) set(c Ceiling, leaseExpiry time.Time) {
	if c.Rate < f.curR || c.Burst < f.curB {
		f.held = append(f.held, heldCold{r: f.curR, b: f.curB, until: leaseExpiry})
	}
	f.curR, f.curB = c.Rate, c.Burst
	f.settle()
}

// retire forgets the held cold floors whose leases surely ended by now.
func (f *coldFloor) retire(now time.Time) {
	if len(f.held) == 0 {
		return
	}
	f.held = slices.DeleteFunc(f.held, func(h heldCold) bool { return !now.Before(h.until) })
	f.settle()
}

// settle sets r, b to the largest of the current and held cold floors.
func (f *coldFloor) settle() {
	f.r, f.b = f.curR, f.curB
	for _, h := range f.held {
		f.r, f.b = max(f.r, h.r), max(f.b, h.b)
	}
}

// coldOf returns region i's cold floor for tenant k's class.
func (a *Allocator) coldOf(i, k int) *coldFloor {
	c := &a.regs[i].cold
	if cl := int(a.tenants[k].class); cl < len(*c) {
		return &(*c)[cl]
	}
	return &noCold
}

// noCold is the cold floor of a class no SetCold named: none.
var noCold coldFloor

// classOf returns the budget class of a budget ID: 0 for a tenant's budget,
// else the index of its budget name (see BudgetID), assigned on first sight.
func (a *Allocator) classOf(id string) int32 {
	_, name := SplitBudgetID(id)
	if name == "" {
		return 0
	}
	name = BudgetClass(name)
	if cl, ok := a.classes[name]; ok {
		return cl
	}
	cl := int32(len(a.classes) + 1)
	a.classes[name] = cl
	return cl
}

// Legacy records that a pod of region, still holding grants of an older
// term, enforces up to c for tenant once its lease lapsed: the leader counts
// it in the region's ceiling until the region's pods have all applied this
// term's first grant of the tenant and SetLegacyOpen(region, false).
func (a *Allocator) Legacy(tenant, region string, c Ceiling) {
	i, ok := a.regIdx[region]
	if !ok || (c.Rate <= 0 && c.Burst <= 0) {
		return
	}
	sl := &a.slots[a.tenant(tenant)*a.n+i]
	sl.legR, sl.legB = max(sl.legR, c.Rate), max(sl.legB, c.Burst)
}

// SetLegacyOpen says whether some pod of region that reported an older
// term's floors may not have applied this term's grants yet.
func (a *Allocator) SetLegacyOpen(region string, open bool) {
	if i, ok := a.regIdx[region]; ok {
		a.regs[i].legacy = open
	}
}

// SetCold records that pods of region may enforce up to c for a tenant they
// hold no grant of, while their lease is valid: the leader counts it in the
// region's ceiling of every tenant until the tenant's first grant there is
// acknowledged. A lowered cold floor is counted at its older value until
// every lease granted while that value was current has surely ended.
func (a *Allocator) SetCold(region string, c Ceiling) []Change { return a.SetColdOf(region, "", c) }

// SetColdOf is SetCold for the named budgets of that name (BudgetID): what
// pods of region may enforce for a named budget they hold no grant of.
// name "" is SetCold. A cold floor that rises first gives every tenant of
// the class without a grant in the region a zero first grant there (see
// zeroFirstGrants): it returns those changes, which must reach the
// region's pods before the raised cold floor does (Leader records them).
func (a *Allocator) SetColdOf(region, name string, c Ceiling) []Change {
	i, ok := a.regIdx[region]
	if !ok {
		return nil
	}
	cl := 0
	if name != "" {
		cl = int(a.classOf(BudgetID("x", name)))
	}
	reg := &a.regs[i]
	for len(reg.cold) <= cl {
		reg.cold = append(reg.cold, coldFloor{})
	}
	f := &reg.cold[cl]
	var out []Change
	if c.Rate > f.curR || c.Burst > f.curB {
		out = a.zeroFirstGrants(i, int32(cl))
	}
	f.set(c, reg.leaseExpiry)
	return out
}

// zeroFirstGrants gives every tenant of class cl that holds no grant in
// region i a zero first grant there, and returns the changes. A region's
// cold floor about to rise needs them first: the tenants' grants elsewhere
// were made counting the lower cold floor here, and a pod that holds a
// tenant's grant, even a zero one, does not enforce the cold floor for it.
// Every answer that carries the raised cold floor to a pod carries these
// grants too (they are older), and the allocator counts the region at its
// cold floor until it acknowledges them, as any first grant.
func (a *Allocator) zeroFirstGrants(i int, cl int32) []Change {
	var out []Change
	reg := &a.regs[i]
	cf := &noCold
	if int(cl) < len(reg.cold) {
		cf = &reg.cold[cl]
	}
	for k := range a.tenants {
		t := &a.tenants[k]
		if t.name == "" || t.class != cl {
			continue
		}
		sl := &a.slots[k*a.n+i]
		if sl.epoch != 0 || !a.grantedElsewhere(k, i) {
			continue // (a tenant no other region holds grants of sees only cold floors)
		}
		reg.epoch++
		sl.first, sl.dropped = reg.epoch, 0
		sl.rate, sl.burst, sl.epoch, sl.tgt, sl.tgtB = 0, 0, reg.epoch, 0, 0
		out = append(out, Change{
			Tenant: t.name, Region: a.cfg.Regions[i],
			Grant:    Grant{Epoch: reg.epoch},
			Ceiling:  Ceiling{Rate: cf.r, Burst: cf.b},
			MinEpoch: reg.minEpoch,
		})
	}
	return out
}

// grantedElsewhere reports whether a region other than i may enforce a
// grant of tenant k (current, older and not yet retired, or an older
// term's).
func (a *Allocator) grantedElsewhere(k, i int) bool {
	for j, sl := range a.slots[k*a.n : (k+1)*a.n] {
		if j != i && (sl.epoch != 0 || sl.nheld > 0 || sl.legR > 0 || sl.legB > 0) {
			return true
		}
	}
	return false
}

// Allocator is the leader's state: demand estimates, grants with epochs,
// acknowledged epochs and leases. It is not safe for concurrent use.
type Allocator struct {
	cfg     Config
	n       int
	regIdx  map[string]int
	regs    []regionState
	tenants []tenantState
	tIdx    map[string]int
	classes map[string]int32 // budget name → class (see classOf)
	slots   []slot           // len(tenants)·n, tenant k's at [k·n, (k+1)·n)
	lnUp    float64          // ln(1 − AlphaUp)
	lnDown  float64          // ln(1 − AlphaDown)

	// per-rebalance scratch, len n each
	live                 []bool
	act                  []action
	fr, want, tr, ut, cr []float64
	band                 []float64
	curR                 []float64
	fb, tb, cb, curB     []int64
	rem                  []float64
	newNames             []string
	lastOut              int       // changes the last rebalance returned
	now                  time.Time // of the pass running

	// free lists the indices of forgotten tenants, for reuse; frees counts
	// the tenants forgotten so far; freed and freedIdx name those the last
	// rebalance forgot.
	free     []int32
	frees    uint64
	freed    []string
	freedIdx []int32

	// pending lists the tenants whose grows the last pass could not
	// complete for want of free capacity; growable is set when an
	// acknowledgement retired a grant one of them waits for.
	pending  []int
	growable bool
	// stepping: the pass running is rebalanceOne's; noSlew: it slews
	// no grow (a term's first rebalance).
	stepping, noSlew bool
}

// NewAllocator validates and copies cfg.
func NewAllocator(cfg Config) (*Allocator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.clone()
	n := len(cfg.Regions)
	a := &Allocator{
		cfg:     cfg,
		n:       n,
		regIdx:  make(map[string]int, n),
		regs:    make([]regionState, n),
		tIdx:    make(map[string]int),
		classes: make(map[string]int32),
		live:    make([]bool, n),
		act:     make([]action, n),
		fr:      make([]float64, n),
		want:    make([]float64, n),
		tr:      make([]float64, n),
		ut:      make([]float64, n),
		cr:      make([]float64, n),
		band:    make([]float64, n),
		curR:    make([]float64, n),
		fb:      make([]int64, n),
		tb:      make([]int64, n),
		cb:      make([]int64, n),
		curB:    make([]int64, n),
		rem:     make([]float64, n),
	}
	for i, r := range cfg.Regions {
		a.regIdx[r] = i
	}
	a.lnUp, a.lnDown = math.Log1p(-cfg.AlphaUp), math.Log1p(-cfg.AlphaDown)
	return a, nil
}

// Config returns a copy of the allocator's configuration.
func (a *Allocator) Config() Config { return a.cfg.clone() }

// catchUp decays sl's estimates to the region's report clock: a tenant absent
// from reports offered nothing.
func (a *Allocator) catchUp(sl *slot, clock float64) {
	if d := clock - sl.stamp; d != 0 {
		sl.demand *= math.Exp(d * a.lnDown)
		sl.fast *= math.Exp(d * a.lnUp)
		sl.stamp = clock
	}
}

// tenant returns the index of name, adding it if needed (in the index of a
// forgotten tenant if there is one).
func (a *Allocator) tenant(name string) int {
	if k, ok := a.tIdx[name]; ok {
		return k
	}
	if m := len(a.free); m > 0 {
		k := int(a.free[m-1])
		a.free = a.free[:m-1]
		a.tenants[k] = tenantState{name: name, born: a.frees, class: a.classOf(name)}
		clear(a.slots[k*a.n : (k+1)*a.n])
		a.tIdx[name] = k
		return k
	}
	k := len(a.tenants)
	a.tenants = append(a.tenants, tenantState{name: name, born: a.frees, class: a.classOf(name)})
	a.tIdx[name] = k
	for range a.n {
		a.slots = append(a.slots, slot{})
	}
	return k
}

// forget frees tenant k's index.
func (a *Allocator) forget(k int) {
	a.freed, a.freedIdx = append(a.freed, a.tenants[k].name), append(a.freedIdx, int32(k))
	delete(a.tIdx, a.tenants[k].name)
	a.tenants[k] = tenantState{}
	clear(a.slots[k*a.n : (k+1)*a.n])
	a.free = append(a.free, int32(k))
	a.frees++
}

// Tenants returns how many tenants the allocator tracks.
func (a *Allocator) Tenants() int { return len(a.tenants) - len(a.free) }

// Report takes in a region's report at now (leader clock): it updates the
// demand estimates, records the acknowledged epoch and renews the region's
// lease until now + Lease. A report from an unknown region or with bad
// values is an error and changes nothing.
func (a *Allocator) Report(now time.Time, r Report) (Renewal, error) {
	i, ok := a.regIdx[r.Region]
	if !ok {
		return Renewal{}, fmt.Errorf("report from %q: %w", r.Region, ErrUnknownRegion)
	}
	if r.Interval <= 0 {
		return Renewal{}, fmt.Errorf("%w: Interval: %v: must be positive", ErrInvalidReport, r.Interval)
	}
	a.newNames = a.newNames[:0]
	for t, u := range r.Usage {
		if !(u.Offered >= 0) || math.IsInf(u.Offered, 0) || !(u.Admitted >= 0) || math.IsInf(u.Admitted, 0) {
			return Renewal{}, fmt.Errorf("%w: Usage[%q]: offered %v, admitted %v: must be finite and ≥ 0",
				ErrInvalidReport, t, u.Offered, u.Admitted)
		}
		if _, ok := a.tIdx[t]; !ok {
			a.newNames = append(a.newNames, t)
		}
	}
	sort.Strings(a.newNames)
	for _, name := range a.newNames {
		a.tenant(name)
	}
	ids := make([]int32, 0, len(r.Usage))
	use := make([]Usage, 0, len(r.Usage))
	for t, u := range r.Usage {
		ids = append(ids, int32(a.tIdx[t]))
		use = append(use, u)
	}
	a.ack(&a.regs[i], r.Applied)
	return a.report(now, i, r.Interval, ids, use), nil
}

// report is Report of region i with usage by tenant index (use[j] is the
// usage of tenant ids[j]), validated.
func (a *Allocator) report(now time.Time, i int, interval time.Duration, ids []int32, use []Usage) Renewal {
	reg := &a.regs[i]
	if exp := now.Add(a.cfg.Lease); exp.After(reg.leaseExpiry) {
		reg.leaseExpiry = exp
	}
	reg.revoked = false

	k := float64(interval) / float64(a.cfg.Interval)
	up := -math.Expm1(k * a.lnUp)
	down := -math.Expm1(k * a.lnDown)
	before := reg.clock
	reg.clock += k
	secs := interval.Seconds()
	// catchUp inline: most slots were last brought up to date at the same
	// clock, so the decay factors are computed once per distinct lag.
	lastD, eDown, eUp := 0.0, 1.0, 1.0
	for j, ti := range ids {
		u := use[j]
		sl := &a.slots[int(ti)*a.n+i]
		if d := before - sl.stamp; d != 0 {
			if d != lastD {
				lastD, eDown, eUp = d, math.Exp(d*a.lnDown), math.Exp(d*a.lnUp)
			}
			sl.demand *= eDown
			sl.fast *= eUp
			sl.stamp = before
		}
		x := max(u.Offered, u.Admitted) / secs
		if c := a.cfg.DemandCap; c > 0 {
			if rt := a.tenants[ti].rate; rt > 0 && x > c*rt {
				x = c * rt
			}
		}
		alpha := down
		if x > sl.demand {
			alpha = up
		}
		sl.demand += alpha * (x - sl.demand)
		if x < sl.fast && u.Admitted >= 0.99*u.Offered {
			sl.fast = x
		} else {
			sl.fast += up * (x - sl.fast)
		}
		sl.stamp = reg.clock
	}
	return Renewal{Lease: a.cfg.Lease, MinEpoch: reg.minEpoch}
}

// renew records that a pod of region i was given a lease at now: the
// region may enforce its grants until now + Lease.
func (a *Allocator) renew(i int, now time.Time) {
	reg := &a.regs[i]
	if exp := now.Add(a.cfg.Lease); exp.After(reg.leaseExpiry) {
		reg.leaseExpiry = exp
	}
	reg.revoked = false
}

// ack records that a region applied every grant up to epoch applied.
func (a *Allocator) ack(reg *regionState, applied uint64) {
	if reg.unblock != 0 && applied >= reg.unblock {
		a.growable = true
	}
	reg.acked = max(reg.acked, applied)
	reg.epoch = max(reg.epoch, applied)
}

// Ack records that region has applied every grant up to epoch applied, as a
// Report does, without demand or a lease renewal: a leader that aggregates
// the reports of a region's pods (and folds their usage into one Report per
// rebalance) calls it as soon as the smallest epoch its pods applied rises,
// so that the grows waiting for that acknowledgement need not wait for the
// next rebalance. It returns [Allocator.Growable].
func (a *Allocator) Ack(region string, applied uint64) (bool, error) {
	i, ok := a.regIdx[region]
	if !ok {
		return false, fmt.Errorf("ack from %q: %w", region, ErrUnknownRegion)
	}
	a.ack(&a.regs[i], applied)
	return a.growable, nil
}

// Growable reports whether an acknowledgement received since the last
// Rebalance or Grow retired an older grant that a pending grow waits for:
// whether Grow may now write something.
func (a *Allocator) Growable() bool { return a.growable }

// Grow completes, at now (leader clock), the grows the last Rebalance (or
// Grow) had to defer for want of free capacity, as far as acknowledgements
// received since then made room: the event-driven half of shrink before
// grow. It touches only those tenants, with their budgets and targets from
// the last Rebalance; it never shrinks, moves no demand estimate and revokes
// nothing (Rebalance does all that). Grows go only into capacity outside
// every ceiling, as in Rebalance, so I4 holds whichever is called when.
// Persist and deliver the Changes as Rebalance's. It returns nil at once
// unless [Allocator.Growable].
func (a *Allocator) Grow(now time.Time) []Change {
	if !a.growable {
		return nil
	}
	a.growable = false
	a.now = now
	a.markLive(now, false)
	for i := range a.regs {
		a.regs[i].unblock = 0
	}
	pend := a.pending
	a.pending = nil
	var out []Change
	for _, k := range pend {
		t := &a.tenants[k]
		out = a.rebalanceTenant(k, &t.budget, out, true)
	}
	return out
}

// setDemand sets tenant k's demand estimates in region i to x units per
// second at once (capped as a report's are): its pods saw its rate step.
func (a *Allocator) setDemand(k, i int, x float64) {
	sl := &a.slots[k*a.n+i]
	a.catchUp(sl, a.regs[i].clock)
	if c := a.cfg.DemandCap; c > 0 {
		if rt := a.tenants[k].rate; rt > 0 && x > c*rt {
			x = c * rt
		}
	}
	sl.demand, sl.fast = x, x
}

// rebalanceOne rebalances tenant k alone under b at now (leader clock), as
// Rebalance would: a report said its demand stepped. Grows still go only
// into capacity outside every ceiling, so I4 holds whenever it runs.
func (a *Allocator) rebalanceOne(now time.Time, k int, b *Budget) []Change {
	a.now = now
	a.markLive(now, true)
	a.pending = slices.DeleteFunc(a.pending, func(x int) bool { return x == k })
	t := &a.tenants[k]
	if !t.own {
		t.budget = *b
	}
	a.note(k, &t.budget)
	a.stepping = true
	defer func() { a.stepping = false }()
	return a.rebalanceBudget(k, &t.budget, nil)
}

// markLive fills a.live at now; with revoke, a region whose lease surely
// ended has its grants revoked.
func (a *Allocator) markLive(now time.Time, revoke bool) {
	for i := range a.regs {
		reg := &a.regs[i]
		for j := range reg.cold {
			reg.cold[j].retire(now)
		}
		a.live[i] = now.Before(reg.leaseExpiry)
		if revoke && !a.live[i] && !reg.revoked {
			// The region's lease surely ended: every grant it holds is
			// revoked. It learns the new minimum epoch with its next
			// renewal, and enforces floors until then.
			reg.revoked = true
			reg.minEpoch = reg.epoch + 1
		}
	}
}

// EachGrant calls fn with every current grant, tenant by tenant.
func (a *Allocator) EachGrant(fn func(tenant, region string, g Grant)) {
	for k := range a.tenants {
		if a.tenants[k].name == "" {
			continue
		}
		for i, r := range a.cfg.Regions {
			if sl := a.slots[k*a.n+i]; sl.epoch != 0 {
				fn(a.tenants[k].name, r, Grant{Rate: sl.rate, Burst: sl.burst, Epoch: sl.epoch})
			}
		}
	}
}

// Grants returns the current grants of tenant by region. A region absent
// from the map holds no grant and enforces its floor (see Floor).
func (a *Allocator) Grants(tenant string) map[string]Grant {
	k, ok := a.tIdx[tenant]
	if !ok {
		return map[string]Grant{}
	}
	out := make(map[string]Grant, a.n)
	for i, r := range a.cfg.Regions {
		sl := a.slots[k*a.n+i]
		if sl.epoch != 0 {
			out[r] = Grant{Rate: sl.rate, Burst: sl.burst, Epoch: sl.epoch}
		}
	}
	return out
}

// Demand returns the smoothed offered demand of tenant by region, in units
// per second, as of the last report of each region.
func (a *Allocator) Demand(tenant string) map[string]float64 {
	k, ok := a.tIdx[tenant]
	out := make(map[string]float64, a.n)
	if !ok {
		return out
	}
	for i, r := range a.cfg.Regions {
		sl := a.slots[k*a.n+i]
		a.catchUp(&sl, a.regs[i].clock)
		out[r] = sl.demand
	}
	return out
}

// Rebalance computes every tenant's grants at now (leader clock) from the
// demand estimates and returns the grants that changed. Persist and deliver
// them in the order returned. Tenants absent from budgets, or whose budget
// is invalid, are left as they are.
func (a *Allocator) Rebalance(now time.Time, budgets map[string]Budget) []Change {
	a.setBudgets(budgets)
	return a.rebalance(now, nil, nil, false)
}

// setBudgets records each tenant's own budget by index (tenants of budgets
// the allocator does not know join it, in name order); every other tenant
// has none. It walks budgets once: a leader calls it only when they change.
func (a *Allocator) setBudgets(budgets map[string]Budget) {
	for k := range a.tenants {
		a.tenants[k].own = false
	}
	a.newNames = a.newNames[:0]
	for name, b := range budgets {
		k, ok := a.tIdx[name]
		if !ok {
			a.newNames = append(a.newNames, name)
			continue
		}
		a.tenants[k].budget, a.tenants[k].own = b, true
	}
	// New tenants join in name order, so that the order of tenants (and
	// so of Changes and epochs) is deterministic.
	sort.Strings(a.newNames)
	for _, name := range a.newNames {
		k := a.tenant(name)
		a.tenants[k].budget, a.tenants[k].own = budgets[name], true
	}
}

// rebalance rebalances, in tenant order (so that Changes and epochs are
// deterministic), every tenant with a budget of its own under it, and every
// other one under deflt unless deflt is nil or idle (when not nil) says the
// tenant is idle. With retire, those others are forgotten (see retire);
// without, they are left as they are.
func (a *Allocator) rebalance(now time.Time, deflts []*Budget, idle func(k int) bool, retire bool) []Change {
	a.now = now
	a.markLive(now, true)
	a.growable = false
	a.pending = a.pending[:0]
	for i := range a.regs {
		a.regs[i].unblock = 0
	}
	// Reserve what the last rebalance wrote: growing a large slice by
	// appending would copy it several times.
	var out []Change
	if a.lastOut > 0 {
		out = make([]Change, 0, a.lastOut+a.lastOut/4)
	}
	a.freed, a.freedIdx = a.freed[:0], a.freedIdx[:0]
	for k := range a.tenants {
		t := &a.tenants[k]
		deflt := classDefault(deflts, t.class)
		switch {
		case t.name == "":
			continue
		case t.own:
		case deflt != nil && (idle == nil || !idle(k)):
			t.budget = *deflt
		case retire && deflt != nil && a.legacyOverCold(k):
			// Idle, but a region's pods may still enforce an older term's
			// grant above the region's cold floor, which retiring cannot
			// shrink: while they do, the other regions' leased pods must
			// not enforce their cold floors (which sum to the whole
			// default budget). A rebalance under the default tier gives
			// those regions their first grants (zero ones, while the old
			// grant fills the budget); retiring resumes once it is gone.
			t.budget = *deflt
		case retire:
			var done bool
			if out, done = a.retire(k, out); done {
				a.forget(k)
			}
			continue
		default:
			continue
		}
		a.note(k, &t.budget)
		out = a.rebalanceBudget(k, &t.budget, out)
	}
	a.lastOut = len(out)
	return out
}

// retire moves tenant k, which has no budget the leader will rebalance it
// under, towards being forgotten. First every region's grant shrinks to the
// region's cold floor (or is already no larger). Once every region is there
// and every pod that may hold a lease acknowledged it, a tombstone drops the
// grant in every region: its pods then enforce the cold floor while leased
// and nothing once not. Once the tombstones are acknowledged, k may be
// forgotten: it reports that, appending its changes to out. A region whose
// lease surely ended acknowledges nothing: its pods enforce at most their
// grants' floors, lowered by their own reading, and apply every change
// (and, once k is forgotten, a full answer) before they hold a lease again.
//
// Each step is a shrink, except the tombstone's move from a grant below the
// cold floor to the floor, which runs only once every region is within its
// cold floor: and the cold floors of all regions sum to at most the default
// tier's budget, which is the budget of a tenant without its own (0, when
// unknown tenants are denied).
func (a *Allocator) retire(k int, out []Change) ([]Change, bool) {
	n := a.n
	s := a.slots[k*n : (k+1)*n]
	ready := true
	for i := range n {
		reg, sl := &a.regs[i], &s[i]
		sl.prune(reg.acked)
		legacy := (sl.legR > 0 || sl.legB > 0) && (reg.legacy || sl.epoch == 0 || sl.first > reg.acked)
		if !legacy {
			sl.legR, sl.legB = 0, 0
		}
		settled := !a.live[i] || sl.nheld == 0 && !legacy && (sl.epoch == 0 || sl.epoch <= reg.acked && sl.first <= reg.acked)
		switch {
		case sl.epoch == 0:
			ready = ready && settled
		case sl.rate > a.coldOf(i, k).curR*(1+eps) || sl.burst > a.coldOf(i, k).curB:
			cf := a.coldOf(i, k)
			reg.epoch++
			sl.push(held{rate: sl.rate, burst: sl.burst, until: reg.epoch})
			sl.rate, sl.burst = min(sl.rate, cf.curR), min(sl.burst, cf.curB)
			if sl.rate <= eps || sl.burst < 1 {
				sl.rate, sl.burst = 0, 0
			}
			sl.epoch, sl.tgt, sl.tgtB = reg.epoch, sl.rate, sl.burst
			hr, hb := sl.heldMax()
			out = append(out, Change{
				Tenant: a.tenants[k].name, Region: a.cfg.Regions[i],
				Grant: Grant{Rate: sl.rate, Burst: sl.burst, FloorRate: sl.rate, FloorBurst: sl.burst,
					Epoch: reg.epoch},
				Ceiling:  Ceiling{Rate: hr, Burst: hb},
				MinEpoch: reg.minEpoch,
			})
			ready = false
		default:
			ready = ready && settled
		}
	}
	if !ready {
		return out, false
	}
	done := true
	for i := range n {
		reg, sl := &a.regs[i], &s[i]
		if sl.epoch == 0 {
			continue // (settled above)
		}
		reg.epoch++
		sl.push(held{rate: sl.rate, burst: sl.burst, until: reg.epoch})
		hr, hb := sl.heldMax()
		sl.rate, sl.burst, sl.epoch, sl.first, sl.dropped = 0, 0, 0, 0, reg.epoch
		sl.tgt, sl.tgtB = 0, 0
		out = append(out, Change{
			Tenant: a.tenants[k].name, Region: a.cfg.Regions[i],
			Grant:    Grant{Epoch: reg.epoch, Dropped: true},
			Ceiling:  Ceiling{Rate: max(hr, a.coldOf(i, k).r), Burst: max(hb, a.coldOf(i, k).b)},
			MinEpoch: reg.minEpoch,
		})
		if a.live[i] {
			done = false // wait for the acknowledgement
		} else {
			sl.nheld = 0
		}
	}
	if done {
		for i := range n {
			reg := &a.regs[i]
			if !a.live[i] {
				reg.forgotten = reg.epoch
			} else {
				reg.forgotten = max(reg.forgotten, s[i].dropped)
			}
		}
	}
	return out, done
}

// legacyOverCold reports whether some region's pods may enforce an older
// term's grant of tenant k above the region's cold floor.
func (a *Allocator) legacyOverCold(k int) bool {
	n := a.n
	s := a.slots[k*n : (k+1)*n]
	for i := range n {
		reg, sl := &a.regs[i], &s[i]
		inForce := (sl.legR > 0 || sl.legB > 0) && (reg.legacy || sl.epoch == 0 || sl.first > reg.acked)
		if cf := a.coldOf(i, k); inForce && (sl.legR > cf.curR*(1+eps) || sl.legB > cf.curB) {
			return true
		}
	}
	return false
}

// viewLag is how long, in Intervals, after the leader saw a budget change
// the floors it lowered keep counting in ceilings: a pod on its floors (no
// valid lease, or no grant yet) lowers them on its own reading of etcd,
// which may come later than the leader's.
const viewLag = 2

// note records that tenant k's budget is b as of a.now. When that moves a
// region's floor, the floor b replaced keeps counting in the region's
// ceiling for viewLag Intervals (the largest of them, when several changes
// fall within that time).
func (a *Allocator) note(k int, b *Budget) {
	t := &a.tenants[k]
	if !t.isNoted {
		t.noted, t.isNoted = *b, true
		return
	}
	if budgetEqual(&t.noted, b) {
		return
	}
	s := a.slots[k*a.n : (k+1)*a.n]
	live := a.now.Before(t.pfUntil)
	for i, r := range a.cfg.Regions {
		fr, fb := Floor(t.noted, a.cfg.Regions, r)
		if !live {
			s[i].pfR, s[i].pfB = 0, 0
		}
		s[i].pfR, s[i].pfB = max(s[i].pfR, fr), max(s[i].pfB, fb)
	}
	t.pfUntil = a.now.Add(viewLag * a.cfg.Interval)
	r, bu := stampBudget(&t.noted, a.n)
	if a.now.Before(t.peakUntil) {
		r, bu = max(r, t.peakR), max(bu, t.peakB)
	}
	t.peakR, t.peakB, t.peakUntil = r, bu, a.now.Add(a.peakWindow())
	t.noted = *b
}

// peakWindow is how long a budget a change replaced still counts in the
// stamps of new grants (stampOf): while the change runs, grants made under
// the new budget may sit beside older ones that fit only the old one.
func (a *Allocator) peakWindow() time.Duration { return 2*a.cfg.Lease + 4*a.cfg.Interval }

// stampBudget is what the regions may enforce together under b: its rate
// and burst, n times them in full mode.
func stampBudget(b *Budget, n int) (float64, int64) {
	if b.mode() == ModeFull {
		return b.Rate * float64(n), b.Burst * int64(n)
	}
	return b.Rate, b.Burst
}

// stampOf returns the budget tenant k's grants made now are stamped with
// (Grant.BudgetRate, BudgetBurst): the largest of its budget, the one last
// noted, and any a change replaced within peakWindow. A later leader
// renews a grant only under a budget at least that large.
func (a *Allocator) stampOf(k int) (float64, int64) {
	t := &a.tenants[k]
	r, b := stampBudget(&t.budget, a.n)
	if t.isNoted {
		nr, nb := stampBudget(&t.noted, a.n)
		r, b = max(r, nr), max(b, nb)
	}
	if a.now.Before(t.peakUntil) {
		r, b = max(r, t.peakR), max(b, t.peakB)
	}
	return r, b
}

// budgetEqual reports whether a and b are the same budget.
func budgetEqual(a, b *Budget) bool {
	if a.Rate != b.Rate || a.Burst != b.Burst || a.mode() != b.mode() || a.Home != b.Home ||
		a.floorFraction() != b.floorFraction() || len(a.Weights) != len(b.Weights) {
		return false
	}
	for r, w := range a.Weights {
		if v, ok := b.Weights[r]; !ok || v != w {
			return false
		}
	}
	return true
}

// noteAll notes every tenant's budget at now without rebalancing (a leader
// that is learning): its own, or its class's default unless nil or idle.
func (a *Allocator) noteAll(now time.Time, deflts []*Budget, idle func(k int) bool) {
	a.now = now
	for k := range a.tenants {
		t := &a.tenants[k]
		deflt := classDefault(deflts, t.class)
		switch {
		case t.name == "":
		case t.own:
			a.note(k, &t.budget)
		case deflt != nil && (idle == nil || !idle(k)):
			a.note(k, deflt)
		}
	}
}

// classDefault is the default budget of class cl in deflts (by class), nil
// when it has none.
func classDefault(deflts []*Budget, cl int32) *Budget {
	if int(cl) < len(deflts) {
		return deflts[cl]
	}
	return nil
}

// action is what a rebalance does to one slot.
type action uint8

const (
	actNone   action = iota
	actGrow          // raise the rate (within free capacity)
	actShrink        // lower the rate
	actBurst         // lower the burst only
)

// rebalanceBudget rebalances tenant k under b, unless b is invalid.
func (a *Allocator) rebalanceBudget(k int, b *Budget, out []Change) []Change {
	if b.validate(a.cfg.Regions) != nil {
		return out
	}
	a.tenants[k].rate = b.Rate
	return a.rebalanceTenant(k, b, out, false)
}

// noiseZ is how many standard deviations of its demand's Poisson noise a
// region's target must move by to be written (see rebalanceTenant).
const noiseZ = 3

// eps is the relative tolerance under which two rates are equal.
const eps = 1e-9

// satisfied reports whether every live region's current grant covers its
// demand with headroom and a margin for its Poisson noise (one standard
// deviation of a rate measured over one Interval), and its fast estimate
// (a step), so that the tenant
// needs no write, whatever its targets: a tenant under its budget, whose
// targets only move the spare from region to region as each interval's
// counts wander. Keys of a per-key limit live here: sparse, each interval's
// count of one is mostly noise. Needs a.want (targetsRebalanced) and
// a.curR.
func (a *Allocator) satisfied(s []slot) bool {
	ps := a.cfg.Interval.Seconds()
	for i := range a.n {
		if !a.live[i] {
			continue
		}
		d := s[i].demand
		need := max(a.fr[i], (1+a.cfg.Headroom)*d+math.Sqrt(d/ps), s[i].fast)
		if a.curR[i] < need || (need > 0 && a.curB[i] < 1) {
			return false
		}
	}
	return true
}

// rebalanceTenant appends tenant k's changed grants to out. With growOnly it
// only completes the grows a previous pass deferred (see Grow).
func (a *Allocator) rebalanceTenant(k int, b *Budget, out []Change, growOnly bool) []Change {
	n := a.n
	s := a.slots[k*n : (k+1)*n]
	R, B := b.Rate, b.Burst
	mode := b.mode()

	// Floors.
	fr1, fb1 := floorOne(b, n)
	home := -1
	if mode == ModePinned {
		home = indexOf(a.cfg.Regions, b.Home)
	}
	for i := range n {
		a.fr[i], a.fb[i] = fr1, fb1
	}
	if home >= 0 {
		a.fr[home] = R - float64(n-1)*fr1
		a.fb[home] = B - int64(n-1)*fb1
	}

	// Bring demand, revocations and acknowledgements up to date; compute
	// what each region may be enforcing (its ceiling).
	var sumCR, sumCur float64
	var sumCB, sumCurB int64
	for i := range n {
		reg := &a.regs[i]
		sl := &s[i]
		a.catchUp(sl, reg.clock)
		if sl.demand < eps*R {
			sl.demand = 0
		}
		if sl.fast < eps*R {
			sl.fast = 0
		}
		if sl.epoch != 0 && sl.epoch < reg.minEpoch && !growOnly {
			// Revoked: the region enforces its floor until it receives a
			// newer grant. Persist the floor where the old grant (or one
			// it may still hold) exceeds it, so that a new leader does not
			// believe the region holds more — and learns the minimum epoch.
			sl.prune(reg.acked)
			hr, hb := sl.heldMax()
			hr, hb = max(hr, sl.rate), max(hb, sl.burst)
			if hr > a.fr[i]*(1+eps) || hb > a.fb[i] {
				reg.epoch++
				*sl = slot{rate: a.fr[i], burst: a.fb[i], epoch: reg.epoch, demand: sl.demand, fast: sl.fast, stamp: sl.stamp, legR: sl.legR, legB: sl.legB, pfR: sl.pfR, pfB: sl.pfB}
				out = append(out, Change{
					Tenant: a.tenants[k].name, Region: a.cfg.Regions[i],
					Grant:    Grant{Rate: sl.rate, Burst: sl.burst, FloorRate: sl.rate, FloorBurst: sl.burst, Epoch: sl.epoch},
					Ceiling:  Ceiling{Rate: sl.rate, Burst: sl.burst},
					MinEpoch: reg.minEpoch,
				})
			} else {
				*sl = slot{demand: sl.demand, fast: sl.fast, stamp: sl.stamp, legR: sl.legR, legB: sl.legB, pfR: sl.pfR, pfB: sl.pfB}
			}
		}
		cr, cb := a.fr[i], a.fb[i]
		curR, curB := a.fr[i], a.fb[i]
		// (A slot without a grant may hold one older grant: the one a
		// tombstone dropped, until acknowledged.)
		sl.prune(reg.acked)
		hr, hb := sl.heldMax()
		cr, cb = max(cr, hr), max(cb, hb)
		if sl.epoch != 0 {
			curR, curB = sl.rate, sl.burst
			cr, cb = max(cr, sl.rate), max(cb, sl.burst)
		}
		unacked := sl.epoch == 0 || sl.first > reg.acked
		if unacked {
			// A leased pod lacking the tenant's first grant enforces the
			// cold floor.
			cf := a.coldOf(i, k)
			cr, cb = max(cr, cf.r), max(cb, cf.b)
		}
		if sl.legR > 0 || sl.legB > 0 {
			if unacked || reg.legacy {
				cr, cb = max(cr, sl.legR), max(cb, sl.legB)
			} else {
				sl.legR, sl.legB = 0, 0
			}
		}
		if sl.pfR > 0 || sl.pfB > 0 {
			// A floor a budget change lowered, which a pod on its floors
			// may still enforce until its view of etcd catches up.
			if a.now.Before(a.tenants[k].pfUntil) {
				cr, cb = max(cr, sl.pfR), max(cb, sl.pfB)
			} else {
				sl.pfR, sl.pfB = 0, 0
			}
		}
		a.cr[i], a.cb[i], a.curR[i], a.curB[i] = cr, cb, curR, curB
		sumCR += cr
		sumCB += cb
		sumCur += curR
		sumCurB += curB
	}

	if growOnly {
		// Complete the deferred grows towards the targets of the pass
		// that deferred them; leave every other slot alone.
		for i := range n {
			sl := &s[i]
			a.tr[i], a.tb[i], a.act[i] = a.curR[i], a.curB[i], actNone
			if a.live[i] && sl.epoch >= a.regs[i].minEpoch && sl.tgt > a.curR[i]+eps*R {
				a.tr[i], a.tb[i], a.act[i] = sl.tgt, max(sl.tgtB, a.curB[i]), actGrow
			}
		}
		return a.apply(k, s, mode, R, B, sumCR, sumCB, out)
	}

	// Targets.
	switch mode {
	case ModePinned:
		// Floors are the whole split: nothing to grant.
		copy(a.tr, a.fr)
		copy(a.tb, a.fb)
	case ModeFull:
		for i := range n {
			if a.live[i] {
				a.tr[i], a.tb[i] = R, B
			} else {
				a.tr[i], a.tb[i] = a.fr[i], a.fb[i]
			}
		}
	case ModeStatic:
		sumW := 0.0
		for i, r := range a.cfg.Regions {
			w := 1.0
			if b.Weights != nil {
				w = b.Weights[r]
			}
			a.want[i] = w
			sumW += w
		}
		spare := R - float64(n)*fr1
		for i := range n {
			a.tr[i] = a.fr[i]
			if a.live[i] {
				a.tr[i] += spare * a.want[i] / sumW
			}
		}
	default:
		if !a.targetsRebalanced(s, R) {
			// No demand and no grants: each region gets its floor as a
			// grant, so that its pods enforce the leader's floor rather
			// than one of their own.
			copy(a.tr, a.fr)
			copy(a.tb, a.fb)
		}
	}
	// A region that holds no grant yet gets one (a zero one included)
	// whatever the deadband says: until it has acknowledged it, its leased
	// pods enforce the cold floor (see SetCold).
	fresh := false
	for i := range n {
		if s[i].epoch == 0 {
			fresh = true
		}
	}

	// Slew: limit each rate's move per rebalance (not for full, nor
	// pinned, nor on a step: its pods saw the demand move). Bursts are split by the targets before slew.
	copy(a.ut, a.tr)
	if a.cfg.Slew > 0 && !a.stepping && !a.noSlew && (mode == ModeRebalanced || mode == ModeStatic) {
		lim := a.cfg.Slew * R
		over := sumCur > R*(1+eps) // the budget shrank: shrinks are not slewed
		for i := range n {
			lo := a.curR[i] - lim
			if over {
				lo = a.tr[i]
			}
			a.tr[i] = min(max(a.tr[i], lo), a.curR[i]+lim)
		}
	}

	// Which slots to write. Grows beyond the deadband; shrinks beyond it,
	// or any shrink when something grows beyond it or the current grants
	// exceed the budget (R shrank); and, while at least half a deadband of
	// capacity lies idle (after shrinks were acknowledged), any grow towards
	// the target, so that deferred grows complete and Σ grants reaches R.
	db := a.cfg.Deadband * R
	tiny := eps * R
	safety := sumCur > R*(1+eps) || sumCurB > B
	burstSafety := sumCurB > B
	freeR := R*(1-eps) - sumCR
	growAt := db
	if freeR >= db/2 {
		growAt = tiny
	}
	// A region's band: the deadband, or more when its demand is noisy.
	// A Poisson rate x measured over one Interval P varies by sqrt(x/P):
	// a target that moved by less than noiseZ times that moved by chance
	// (measured: a steady overload changed grants about six times a
	// minute with the deadband alone). At most twice the deadband, so
	// that a region stays within 4% of R of its target.
	ps := a.cfg.Interval.Seconds()
	for i := range n {
		x := max(s[i].demand, s[i].fast)
		a.band[i] = max(db, min(noiseZ*math.Sqrt(x/ps), 2*db))
	}
	grow, quiet := false, !safety && !fresh
	for i := range n {
		d := a.tr[i] - a.curR[i]
		grow = grow || d > a.band[i]
		quiet = quiet && d <= growAt && -d <= a.band[i]
	}
	if !quiet && mode == ModeRebalanced && !safety && !fresh {
		quiet = a.satisfied(s)
	}
	if quiet {
		return out
	}
	if mode == ModeStatic || mode == ModeRebalanced {
		a.splitBursts(a.ut, R, B)
	}
	for i := range n {
		d := a.tr[i] - a.curR[i]
		switch {
		case d > growAt || s[i].epoch == 0:
			a.act[i] = actGrow
		case d < -tiny && (-d > a.band[i] || grow || safety):
			a.act[i] = actShrink
		case a.tb[i] < a.curB[i] && (grow || burstSafety):
			a.act[i] = actBurst
		default:
			a.act[i] = actNone
		}
	}

	return a.apply(k, s, mode, R, B, sumCR, sumCB, out)
}

// apply writes the actions a.act towards the targets a.tr and a.tb of tenant
// k (whose ceilings are a.cr, a.cb, summing to sumCR, sumCB), appending the
// changes to out, and notes whether a grow had to be deferred.
func (a *Allocator) apply(k int, s []slot, mode Mode, rate float64, burst int64, sumCR float64, sumCB int64, out []Change) []Change {
	n, R, B := a.n, rate, burst
	db := a.cfg.Deadband * R
	tiny := eps * R
	freeR := R*(1-eps) - sumCR
	freeB := B - sumCB
	// Capacity no region may be using, shared among the written slots in
	// proportion to what each needs beyond its ceiling.
	var needR float64
	var needB int64
	for i := range n {
		if a.act[i] == actNone {
			continue
		}
		if a.act[i] == actGrow {
			needR += max(0, a.tr[i]-a.cr[i])
		}
		needB += max(0, a.tb[i]-a.cb[i])
	}
	scaleR, scaleB := 1.0, 1.0
	if mode != ModeFull {
		if needR > 0 && needR > freeR {
			scaleR = max(0, freeR) / needR
		}
		if needB > 0 && needB > freeB {
			scaleB = float64(max(0, freeB)) / float64(needB)
		}
	}

	for i := range n {
		act := a.act[i]
		if act == actNone {
			continue
		}
		nr := a.curR[i]
		var nb int64
		switch act {
		case actGrow:
			if sumCR > R*(1+eps) && mode != ModeFull {
				// The ceilings overstate the budget (cold floors, an older
				// term's floors, or R shrank): a region may not really be
				// enforcing its ceiling, so even a grow within it could add
				// real load. Grow nothing until they fit; a region with no
				// grant yet gets a zero one, which retires its cold floor
				// once acknowledged.
				if s[i].epoch == 0 {
					nr = 0
				}
				break // (a burst above its target still shrinks below)
			}
			nr = min(a.tr[i], a.cr[i]+max(0, a.tr[i]-a.cr[i])*scaleR)
			nr = max(nr, a.curR[i])
		case actShrink:
			nr = a.tr[i]
		}
		switch {
		case nr == 0 && act == actGrow:
			nb = 0
		case freeB < 0 && mode != ModeFull && s[i].epoch == 0:
			// likewise for bursts: a region with no grant yet may not
			// really be enforcing its floor burst, so it gets a zero
			// grant (which retires its cold floor) until they fit
			nr, nb = 0, 0
		case freeB < 0 && mode != ModeFull:
			nb = min(a.tb[i], a.curB[i]) // likewise for bursts
		case a.tb[i] <= a.cb[i]:
			nb = a.tb[i]
		default:
			nb = a.cb[i] + int64(float64(a.tb[i]-a.cb[i])*scaleB)
		}
		if nr <= tiny {
			nr = 0
			if a.stepping && s[i].epoch == 0 {
				// A zero first grant only retires the region's cold
				// floor, which serves its pods meanwhile: on a step,
				// leave that to the periodic pass.
				continue
			}
		} else if nb < 1 {
			// A positive rate needs a unit of burst and none is free yet.
			continue
		}
		sl := &s[i]
		if sl.epoch != 0 {
			if act == actGrow && nr-a.curR[i] < min(db, freeR)/2 && nr < a.tr[i]-tiny && nb <= a.curB[i] {
				continue // too little room yet: wait for acknowledgements
			}
			if math.Abs(nr-a.curR[i]) <= tiny && nb == a.curB[i] {
				continue
			}
		}
		reg := &a.regs[i]
		reg.epoch++
		if sl.epoch != 0 {
			sl.push(held{rate: sl.rate, burst: sl.burst, until: reg.epoch})
		} else {
			sl.first, sl.dropped = reg.epoch, 0
		}
		hr, hb := sl.heldMax()
		hr, hb = max(hr, a.fr[i]), max(hb, a.fb[i])
		sl.rate, sl.burst, sl.epoch = nr, nb, reg.epoch
		out = append(out, Change{
			Tenant: a.tenants[k].name, Region: a.cfg.Regions[i],
			Grant: Grant{Rate: nr, Burst: nb, FloorRate: min(a.fr[i], nr), FloorBurst: min(a.fb[i], nb),
				Epoch: reg.epoch},
			Ceiling:  Ceiling{Rate: max(hr, nr), Burst: max(hb, nb)},
			MinEpoch: reg.minEpoch,
		})
	}

	// A grow that fell short waits for acknowledgements (or the next
	// Rebalance): remember its target, and the epochs whose
	// acknowledgement retires a grant in its way.
	deferred := false
	for i := range n {
		sl := &s[i]
		sl.tgt, sl.tgtB = sl.rate, sl.burst
		if a.act[i] == actGrow && mode != ModeFull && a.tr[i] > sl.rate+tiny {
			sl.tgt, sl.tgtB = a.tr[i], a.tb[i]
			deferred = true
		}
	}
	if deferred {
		a.pending = append(a.pending, k)
		for j := range n {
			if sl := &s[j]; sl.nheld > 0 {
				u := sl.held[0].until
				if reg := &a.regs[j]; reg.unblock == 0 || u < reg.unblock {
					reg.unblock = u
				}
			}
		}
	}
	return out
}

// targetsRebalanced fills a.tr with tenant rates from demand. It returns
// false when there is nothing to do: no demand anywhere and no grant.
func (a *Allocator) targetsRebalanced(s []slot, r float64) bool {
	n := a.n
	avail := r // for live regions, their floors included
	var sumD, sumFast, sumWant, sumFLive float64
	nLive := 0
	anyGrant := false
	for i := range n {
		if s[i].epoch != 0 {
			anyGrant = true
		}
		if !a.live[i] {
			avail -= a.fr[i]
			a.tr[i] = a.fr[i]
			continue
		}
		nLive++
		d := s[i].demand
		sumD += d
		sumFast += s[i].fast
		a.want[i] = max(a.fr[i], (1+a.cfg.Headroom)*d)
		sumWant += a.want[i]
		sumFLive += a.fr[i]
	}
	if sumD == 0 && sumFast == 0 && !anyGrant {
		return false
	}
	if nLive == 0 {
		return true
	}
	spread := avail - sumFLive // what is not floors
	switch {
	case sumFast >= avail:
		// Overloaded: what one central limiter would admit, floors kept.
		// Shares are zero-sum here, so demand is tracked as fast down as up.
		var sumX float64
		for i := range n {
			if a.live[i] {
				sumX += max(0, s[i].fast-a.fr[i])
			}
		}
		for i := range n {
			if a.live[i] {
				a.tr[i] = a.fr[i] + spread*max(0, s[i].fast-a.fr[i])/sumX
			}
		}
	case sumWant > avail:
		// Headroom does not fit: share in proportion to it.
		var sumX float64
		for i := range n {
			if a.live[i] {
				sumX += a.want[i] - a.fr[i]
			}
		}
		for i := range n {
			if a.live[i] {
				a.tr[i] = a.fr[i] + spread*(a.want[i]-a.fr[i])/sumX
			}
		}
	default:
		// Underloaded: demand plus headroom, then the spare spread half
		// equally (room for a region to wake up) and half in proportion to
		// demand (room for a busy region to grow).
		spare := avail - sumWant
		for i := range n {
			if !a.live[i] {
				continue
			}
			a.tr[i] = a.want[i]
			if sumD > 0 {
				a.tr[i] += spare/2/float64(nLive) + spare/2*s[i].demand/sumD
			} else {
				a.tr[i] += spare / float64(nLive)
			}
		}
	}
	return true
}

// splitBursts fills a.tb from the rates tr: each region gets its floor burst plus a
// share of the rest of B, half of it split equally among the regions whose
// rate is above their floor and half in proportion to that rate above the
// floor, rounded down and topped up by largest remainder, with at least one
// unit for every positive rate. Σ a.tb ≤ B. (A burst absorbs a region's
// clumps of arrivals, and a Poisson clump's size grows far slower than its
// rate: a burst in proportion to rate leaves a quiet region, or a quiet
// key's region, a unit or two that every clump overruns.)
func (a *Allocator) splitBursts(tr []float64, rate float64, burst int64) {
	n := a.n
	var sumFB int64
	var sumX float64
	for i := range n {
		sumFB += a.fb[i]
		sumX += max(0, tr[i]-a.fr[i])
	}
	extra := burst - sumFB
	left := extra
	nX := 0
	for i := range n {
		if tr[i]-a.fr[i] > 0 {
			nX++
		}
	}
	for i := range n {
		a.tb[i] = a.fb[i]
		a.rem[i] = -1
		if sumX > 0 && extra > 0 {
			x := float64(extra) * max(0, tr[i]-a.fr[i]) / sumX
			if tr[i]-a.fr[i] > 0 {
				x = x/2 + float64(extra)/2/float64(nX)
			}
			w := int64(x)
			a.tb[i] += w
			left -= w
			a.rem[i] = x - float64(w)
		}
	}
	// At least one unit for every positive rate.
	for i := range n {
		if tr[i] > eps*rate && a.tb[i] < 1 {
			a.tb[i] = 1
			left--
		}
	}
	// Largest remainders take what is left; if the minimums overdrew,
	// take back from the largest bursts above their floors.
	for left > 0 {
		j := -1
		for i := range n {
			if a.rem[i] >= 0 && (j < 0 || a.rem[i] > a.rem[j]) {
				j = i
			}
		}
		if j < 0 {
			break
		}
		a.tb[j]++
		a.rem[j] = -1
		left--
	}
	for left < 0 {
		j := -1
		for i := range n {
			if a.tb[i] > max(a.fb[i], 1) && (j < 0 || a.tb[i] > a.tb[j]) {
				j = i
			}
		}
		if j < 0 {
			break
		}
		a.tb[j]--
		left++
	}
}
