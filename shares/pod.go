package shares

import (
	"slices"
	"strings"
	"time"
)

// Pod is one regional pod's side of the protocol, pure: the grants the
// leader's answers carried, the lease, the cold floor and the fail-open
// share, and what the pod enforces from them. The regional service wraps
// one; the protocol checker drives many. Not safe for concurrent use.
//
// A pod never raises what it enforces on its own reading of a budget: it
// enforces the leader's numbers, lowered (never raised) by the floor it
// computes from its own copy of the budget.
type Pod struct {
	region string
	drift  time.Duration

	synced     bool   // applied a term's full grants once
	leader     uint64 // the term of the last answer (learning ones too)
	renewedBy  uint64 // the newest term that renewed grants of an older one
	unsure     bool   // the last report went unanswered (see Unanswered)
	term       uint64
	epoch      uint64
	grants     map[string]Grant
	leaseUntil time.Time // zero: never renewed
	lastSent   time.Time // the report whose answer set cold and share
	cold       Ceiling
	coldNamed  map[string]Ceiling // by budget name (Answer.ColdNamed); not modified
	shareD     int
	pods       int
	// reachedTerm, reachedEpoch: the term and epoch the pod held when a
	// leader last removed it (see Removed); an answer below them is one
	// the pod had already moved past.
	reachedTerm, reachedEpoch uint64
}

// NewPod returns the state of a pod of region. drift is subtracted from
// every lease (clock rate differences between pod and leader must fit).
func NewPod(region string, drift time.Duration) *Pod {
	return &Pod{region: region, drift: drift, grants: map[string]Grant{}}
}

// Region returns the pod's region.
func (p *Pod) Region() string { return p.region }

// State returns what the pod's next report carries: the term of its grants
// and the epoch up to which it applied them.
func (p *Pod) State() (term, applied uint64) { return p.term, p.epoch }

// Held returns the grants the pod holds when they are of an older term than
// the leader's that last answered, or when its last report went unanswered
// (see Unanswered): the next report carries them (their floors outlive the
// lease, and a new leader must count them, and may renew them). nil
// otherwise.
func (p *Pod) Held() []Entry {
	if p.term == 0 || !p.unsure && (p.term == p.leader || p.leader == 0) {
		return nil
	}
	out := make([]Entry, 0, len(p.grants))
	for t, g := range p.grants {
		out = append(out, Entry{Tenant: t, Grant: g})
	}
	// In tenant order: a leader that meets these tenants first numbers them
	// in this order, and the same reports must make the same epochs.
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Tenant, b.Tenant) })
	if len(out) == 0 {
		out = []Entry{}
	}
	return out
}

// Standing returns what the pod's next report says of its standing: the
// newest term it heard an answer of (it ignores every other answer of an
// older term from then on), the newest term that renewed the grants it
// holds (see Answered), and whether its lease is valid at now.
func (p *Pod) Standing(now time.Time) (heard, renewedBy uint64, leased bool) {
	return p.leader, p.renewedBy, p.Leased(now)
}

// Unanswered records that a report got no answer from a leader (it failed,
// or the coordinator it reached does not lead): until one answers, reports
// carry what the pod holds, so that a new leader learns it (and can renew
// it) one report sooner.
func (p *Pod) Unanswered() { p.unsure = true }

// Synced reports whether the pod ever received a term's grants. Until then
// it enforces nothing for budget limits.
func (p *Pod) Synced() bool { return p.synced }

// Answered applies, at now, the leader's answer to the report the pod sent
// at sentAt (both pod clock). Answers may arrive late, twice or out of
// order: an answer of an older term is ignored, grants apply only when newer
// than the tenant's, and the lease only ever grows. own, when not nil,
// returns a tenant's floor by the pod's own reading: each grant's floor is
// lowered to it as it is applied (see LowerFloors).
func (p *Pod) Answered(now, sentAt time.Time, a Answer, own func(tenant string) Ceiling) {
	if a.Term == 0 {
		return
	}
	p.unsure = false
	p.leader = max(p.leader, a.Term)
	if a.Learning {
		// Its entries only lower floors of grants the pod holds (see
		// Leader.Report): lowering is safe whatever the term.
		for _, e := range a.Entries {
			if g, ok := p.grants[e.Tenant]; ok && !e.Grant.Dropped {
				g.FloorRate, g.FloorBurst = min(g.FloorRate, e.Grant.FloorRate), min(g.FloorBurst, e.Grant.FloorBurst)
				p.grants[e.Tenant] = g
			}
		}
		if a.Lease > 0 && a.Term == p.leader && a.Term > p.term && p.term != 0 && p.term == a.HeldTerm && p.epoch == a.Epoch && p.leaseUntil.After(now.Add(a.LeasedFor+p.drift)) {
			// Renewed by a newer leader while it learns, on exactly the
			// grants the report said the pod holds, and with the lease
			// the older leader counts them under valid until that leader
			// surely stopped (once the lease lapses, a deposed leader
			// that has not noticed may give the room to another region:
			// a lapsed lease is never renewed). From now on answers
			// of older terms are ignored: the newer leader counts only
			// what the pod reported. The cold floor only comes down, and
			// the pod fails closed until it holds the newer term's
			// grants (the newer leader has handed it no share).
			if until := sentAt.Add(a.Lease - p.drift); until.After(p.leaseUntil) {
				p.leaseUntil = until
			}
			p.renewedBy = max(p.renewedBy, a.Term)
			p.cold = Ceiling{Rate: min(p.cold.Rate, a.Cold.Rate), Burst: min(p.cold.Burst, a.Cold.Burst)}
			p.coldNamed = lowerCold(p.coldNamed, a.ColdNamed)
			p.shareD = 0
		}
		return
	}
	if a.Term < p.leader || a.Term < p.term {
		// An older term's, once the pod heard of a newer one: its reports
		// since told the newer leader what the pod holds (see Standing),
		// so nothing an older leader says may change it.
		return
	}
	if a.Term < p.reachedTerm || a.Term == p.reachedTerm && a.Epoch < p.reachedEpoch {
		// A late answer from before the pod was removed: its leader has
		// since counted the pod as holding the newer epoch it reported
		// (and may have given away what this one grants).
		return
	}
	if a.Term > p.term {
		if !a.Full {
			return // cannot happen from an honest leader: wait for a full answer
		}
		p.term, p.epoch = a.Term, 0
		p.leaseUntil, p.lastSent = time.Time{}, time.Time{}
		p.shareD = 0
	}
	if a.Full && a.Epoch >= p.epoch {
		clear(p.grants)
		p.epoch = 0
	}
	for _, e := range a.Entries {
		if e.Grant.Epoch <= p.epoch {
			// The pod already holds the region's newest grants up to its
			// epoch: this one was applied, or replaced, or dropped (an
			// answer to an older report, arriving late).
			continue
		}
		if g, ok := p.grants[e.Tenant]; ok && g.Epoch >= e.Grant.Epoch {
			continue
		}
		if e.Grant.Dropped {
			delete(p.grants, e.Tenant) // the leader forgot the tenant
			continue
		}
		g := e.Grant
		if own != nil {
			c := own(e.Tenant)
			g.FloorRate, g.FloorBurst = min(g.FloorRate, c.Rate), min(g.FloorBurst, c.Burst)
		}
		p.grants[e.Tenant] = g
	}
	coldSet := false
	if a.Epoch >= p.epoch {
		// The leader counts a pod that reports epoch E as holding what an
		// answer of epoch E says: an answer that moves the epoch forward
		// sets the fail-open share even when it answers an older report
		// (keeping the share of an older epoch while reporting a newer one
		// let two pods hold 1/1 and 1/2 of one region). Within an epoch the
		// newest report's answer wins.
		newer := a.Epoch > p.epoch
		p.epoch = a.Epoch
		if !sentAt.Before(p.lastSent) {
			p.lastSent, coldSet = sentAt, true
			p.cold, p.coldNamed, p.shareD, p.pods = a.Cold, a.ColdNamed, a.SharePods, a.Pods
		} else if newer {
			p.shareD = a.SharePods
		}
	}
	if a.Lease > 0 && !coldSet {
		// An answer to an older report, or one behind the epoch the pod
		// holds, still renews the lease below: it lowers the cold floor
		// to its own, never raises it. (The leader counts a lowered cold
		// floor at its older value only until the leases of the answers
		// that carried that value have ended: a lease renewed by a later
		// answer must come with that answer's floor.)
		p.cold = Ceiling{Rate: min(p.cold.Rate, a.Cold.Rate), Burst: min(p.cold.Burst, a.Cold.Burst)}
		p.coldNamed = lowerCold(p.coldNamed, a.ColdNamed)
	}
	p.synced = true
	if until := sentAt.Add(a.Lease - p.drift); until.After(p.leaseUntil) {
		p.leaseUntil = until
	}
}

// lowerCold returns the smaller of two sets of named cold floors, name by
// name (a name one lacks: none), as a new map.
func lowerCold(held, next map[string]Ceiling) map[string]Ceiling {
	out := make(map[string]Ceiling, len(held))
	for name, c := range held {
		if n, ok := next[name]; ok {
			out[name] = Ceiling{Rate: min(c.Rate, n.Rate), Burst: min(c.Burst, n.Burst)}
		}
	}
	return out
}

// Pushed applies, at now, an answer the leader pushed without a report
// (Leader.Push): as the answer to a report sent long ago, so it renews no
// lease and sets the cold floor only with a newer epoch.
func (p *Pod) Pushed(now time.Time, a Answer, own func(tenant string) Ceiling) {
	if a.Learning || a.Full || a.Term == 0 {
		return
	}
	a.Lease = 0
	p.Answered(now, time.Time{}, a, own)
}

// LowerFloors lowers every grant's floor to the tenant's floor by the pod's
// own reading (own returns it), so that a later reading that rises again
// cannot raise what a pod whose lease lapsed enforces. Call it whenever the
// pod's copy of the policy or of a budget changes.
func (p *Pod) LowerFloors(own func(tenant string) Ceiling) {
	for t, g := range p.grants {
		c := own(t)
		if c.Rate < g.FloorRate || c.Burst < g.FloorBurst {
			g.FloorRate, g.FloorBurst = min(g.FloorRate, c.Rate), min(g.FloorBurst, c.Burst)
			p.grants[t] = g
		}
	}
}

// Removed records that a leader refused the pod's report because its
// region is not in the policy: the pod drops every grant, floor and lease
// and enforces nothing for budget limits until a leader answers it again.
// It still ignores every answer below the term and epoch it had reached: a
// late one would bring back grants its leader counts as replaced (the
// checker found one that did, the region's shrink acknowledged and given
// away).
func (p *Pod) Removed() {
	if p.term > p.reachedTerm || p.term == p.reachedTerm && p.epoch > p.reachedEpoch {
		p.reachedTerm, p.reachedEpoch = p.term, p.epoch
	}
	clear(p.grants)
	p.leaseUntil, p.cold, p.coldNamed, p.shareD = time.Time{}, Ceiling{}, nil, 0
	p.epoch = 0
	p.term = 0
}

// Leased reports whether the pod's lease is valid at now.
func (p *Pod) Leased(now time.Time) bool {
	return !p.leaseUntil.IsZero() && now.Before(p.leaseUntil)
}

// LeaseUntil returns when the lease ends (zero: never renewed).
func (p *Pod) LeaseUntil() time.Time { return p.leaseUntil }

// Grant returns the tenant's grant as last applied.
func (p *Pod) Grant(tenant string) (Grant, bool) {
	g, ok := p.grants[tenant]
	return g, ok
}

// Grants returns how many tenants the pod holds grants of.
func (p *Pod) Grants() int { return len(p.grants) }

// Effective returns what the pod enforces for tenant at now on the Redis
// path. own is the tenant's floor by the pod's own reading of the budget
// (see [Floor]); it only ever lowers the leader's floors. leased reports
// whether a leased grant applies. A tenant it holds no grant of gets the
// cold floor while the lease is valid and nothing after. Before the pod
// synced it enforces 0.
func (p *Pod) Effective(now time.Time, tenant string, own Ceiling) (rate float64, burst int64, leased bool) {
	if !p.synced {
		return 0, 0, false
	}
	g, ok := p.grants[tenant]
	leased = p.Leased(now)
	switch {
	case ok && leased:
		return g.Rate, g.Burst, true
	case ok:
		return min(g.FloorRate, own.Rate), min(g.FloorBurst, own.Burst), false
	case leased:
		// A tenant the leader has not granted yet: the cold floor (of the
		// budget's name), which the leader counts for every leased pod
		// lacking the tenant.
		cold := p.cold
		if _, name := SplitBudgetID(tenant); name != "" {
			cold = p.coldNamed[BudgetClass(name)]
		}
		return min(cold.Rate, own.Rate), min(cold.Burst, own.Burst), false
	}
	return 0, 0, false
}

// FailOpenShare returns the denominator of the pod's fail-open share at
// now: its fail-open limits admit at most 1/d of what the region enforces.
// 0 means the pod may not fail open (no valid lease, or a share not yet
// handed out).
func (p *Pod) FailOpenShare(now time.Time) int {
	if !p.Leased(now) {
		return 0
	}
	return p.shareD
}

// Pods returns the region's pod count as the leader last counted it.
func (p *Pod) Pods() int { return p.pods }
