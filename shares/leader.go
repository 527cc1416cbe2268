package shares

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"time"
)

// ErrForgedReport: a report claims state its leader never issued (a term
// above the leader's, an epoch above what was issued to its region, a
// negative share). It is rejected and changes nothing.
var ErrForgedReport = errors.New("shares: impossible report")

// ErrTooManyPods: a region already has LeaderConfig.MaxPodsPerRegion pods
// that may hold a lease; a report from yet another pod is refused.
var ErrTooManyPods = errors.New("shares: too many pods in the region")

// LeaderConfig configures a [Leader]: one term of leadership.
type LeaderConfig struct {
	// Config is the allocator's (regions, intervals, lease, smoothing).
	Config
	// Term identifies this term; it must be greater than every earlier
	// term's (the coordinator uses its etcd election revision, shifted, plus
	// a counter of the terms it started itself).
	Term uint64
	// Learning is how long after the term starts the leader only learns:
	// it answers reports without renewing any lease and grants nothing,
	// so that every lease an older term granted has expired before it
	// hands out capacity. It must be at least Lease (the coordinator adds
	// its election session TTL, which bounds how long a deposed leader may
	// still answer).
	Learning time.Duration
	// First: no earlier term ever granted (the coordinator knows from etcd),
	// so no pod holds an older lease and the leader need not learn
	// (Learning is then ignored).
	First bool
	// MaxPodsPerRegion bounds the pods of one region the leader tracks.
	// Default 256.
	MaxPodsPerRegion int
	// MaxTenants caps the tenants the leader tracks; usage of further
	// tenants is dropped (they stay on cold floors) and counted. 0: no cap.
	MaxTenants int
	// Deposed bounds how long after this term starts a leader of an older
	// term may still answer pods, not having noticed that it lost the
	// election. A learning answer renews what a pod holds only if the
	// pod's lease outlasts it. 0: older leaders stop before a newer term
	// starts (they fence themselves, as the coordinator does).
	Deposed time.Duration
	// IdleTimeout: a tenant without a budget of its own (see SetBudgets)
	// that no pod reported traffic of for this long is forgotten (see
	// Rebalance). 0: every tenant is kept.
	IdleTimeout time.Duration
	// StepHold (DefaultStepHold is a good value): a tenant rebalanced on a step is not rebalanced on another
	// step for this long; the steps that arrive meanwhile are rebalanced
	// together when it ends (see FlushSteps). The pods of a region see a
	// step within a few milliseconds of each other: one rebalance for them
	// all makes one shrink to acknowledge, not one per pod. 0: none.
	StepHold time.Duration
	// ValidTenant checks a reported tenant name; nil accepts any non-empty
	// name.
	ValidTenant func(string) error
	// Roster, when RosterKnown, lists every pod an older term may have
	// leased and whose lease may still be valid: the coordinator keeps it
	// in etcd, where a leader adds a pod before it first leases it (a
	// write guarded by its election, so that none lands once a newer
	// leader could have read the roster). Learning then ends as soon as
	// every pod of the roster has reported, after hearing of this term,
	// that it holds nothing, or holds no valid lease, or holds what this
	// term renewed — and no sooner than Deposed after the term started.
	// From that report on, the pod ignores older terms' answers: what it
	// may enforce is what this leader knows. Without a roster, or while a
	// pod of it has not reported so, learning lasts Learning.
	Roster      []PodKey
	RosterKnown bool
}

// Validate checks c. Errors name the field.
// A pod that reports without a lease has its tenants rebalanced as steps,
// unless it reports more than maxLeaseSteps of them: then the next periodic
// rebalance takes them all at once, cheaper than one by one (and within an
// interval). maxStepOut bounds the changes a Leader keeps for ReportChanges
// between reports.
const (
	maxLeaseSteps = 1000
	maxStepOut    = 4096
)

// DefaultStepHold is the StepHold allot uses: about one message delay
// between regions.
const DefaultStepHold = 100 * time.Millisecond

func (c LeaderConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	switch {
	case c.Term == 0:
		return configErr("Term", "must be positive")
	case c.Learning < c.Lease && !c.First:
		return configErr("Learning", "%v: must be at least Lease (%v), or a new leader could grant capacity an older term's lease still holds", c.Learning, c.Lease)
	case c.MaxPodsPerRegion < 0:
		return configErr("MaxPodsPerRegion", "%d: must not be negative", c.MaxPodsPerRegion)
	case c.MaxTenants < 0:
		return configErr("MaxTenants", "%d: must not be negative", c.MaxTenants)
	case c.Deposed < 0:
		return configErr("Deposed", "%v: must not be negative", c.Deposed)
	case c.IdleTimeout < 0:
		return configErr("IdleTimeout", "%v: must not be negative (0 keeps every tenant)", c.IdleTimeout)
	case c.StepHold < 0 || c.StepHold > c.Interval:
		return configErr("StepHold", "%v: must be in [0, Interval]", c.StepHold)
	}
	return nil
}

// PodReport is one pod's report to the leader.
type PodReport struct {
	Region string
	// Pod identifies the process (unique per process: a restarted pod is a
	// new pod).
	Pod string
	// Term and Applied are the term whose grants the pod holds and the
	// region epoch up to which it applied them (0, 0: none).
	Term, Applied uint64
	// Interval is the span Usage covers (> 0).
	Interval time.Duration
	Usage    map[string]Usage
	// Seq numbers the pod's reports, from 1 up (0: not numbered). The
	// usage of a report older than one already taken from the pod (the
	// network reordered them) is ignored: it would undo a newer step.
	Seq uint64
	// Partial: an early report (see Tracker), of only the tenants in
	// Usage: their rates replace the pod's, the others' stay as the pod
	// last reported them.
	Partial bool
	// LivePods is the region's pod count as the pod's gossip sees it (0:
	// no gossip).
	LivePods int
	// Held lists the grants the pod holds from an older term than the
	// answering leader's (see Pod.Held): their floors outlive the lease.
	Held []Entry
	// Heard, RenewedBy and Leased are the pod's standing (see
	// Pod.Standing): the newest term it heard an answer of (from then on
	// it ignores every other answer of an older term), the newest term
	// whose learning answer renewed what it holds, and whether its lease
	// was valid when it sent the report. With a roster they let a new
	// leader end its learning early (see LeaderConfig.Roster).
	Heard, RenewedBy uint64
	Leased           bool
}

// PodKey names one pod: its region and its id.
type PodKey struct{ Region, Pod string }

// Entry is one tenant's grant in an [Answer].
type Entry struct {
	Tenant string
	Grant  Grant
}

// Answer is the leader's answer to a report.
type Answer struct {
	Term uint64
	// Learning: the leader is in its learning period and grants nothing;
	// the pod keeps what it holds. When Lease is set, the answer renews
	// the pod's lease on the grants of term HeldTerm up to Epoch, which
	// its report said it holds (the pod applies it only if it still holds
	// exactly those).
	Learning bool
	HeldTerm uint64
	// LeasedFor: a renewal applies only if the pod's lease is valid for at
	// least this long after it applies the answer.
	LeasedFor time.Duration
	// Lease lets the pod enforce its grants until it sent the report plus
	// Lease, minus its drift margin.
	Lease time.Duration
	// Full: Entries are every grant of the region; the pod drops the rest.
	Full bool
	// Epoch: once Entries are applied the pod holds every grant of the
	// region up to this epoch.
	Epoch   uint64
	Entries []Entry
	// Cold is what the pod enforces for a tenant it holds no grant of (the
	// smaller of it and the tenant's floor by the pod's own reading).
	Cold Ceiling
	// ColdNamed is Cold for named budgets (see BudgetID), by budget name:
	// what the pod enforces for a named budget it holds no grant of. A name
	// it lacks: nothing. The pod must not modify it.
	ColdNamed map[string]Ceiling
	// SharePods: while its lease is valid, the pod's fail-open limits
	// admit at most 1/SharePods of what the region enforces. 0: the pod
	// may not fail open.
	SharePods int
	// Pods is how many pods of the region may hold a lease.
	Pods int
	// ReportNow (only in a push, with nothing else): the leader asks the
	// pod to report at once. It holds an older term's grants under a lease
	// this term renewed, and the term now grants: the answer to its next
	// report carries them. A pod that holds this term's grants never gets
	// one.
	ReportNow bool
}

// LeaderStats is what a Leader counts, for metrics.
type LeaderStats struct {
	Reports, Rejected, Learning, FullSyncs int64
	Renewed                                int64 // learning answers that renewed a pod's older grants
	EntriesSent                            int64
	DroppedTenants                         int64 // usage of tenants beyond MaxTenants
	Forgotten                              int64 // tenants forgotten (idle, or without a budget)
	// StepRebalances counts tenants rebalanced as a report marking them
	// as steps arrived; StepChanges the grant changes those made.
	StepRebalances, StepChanges int64
	// Reordered counts reports whose usage was ignored: the pod's newer
	// report had arrived first.
	Reordered int64
	// Pushes counts the answers Push made.
	Pushes int64
	// EarlyEnd: how long after the term started learning ended, when the
	// roster ended it early (0: it did not).
	EarlyEnd time.Duration
}

// podRec is the leader's record of one pod.
type podRec struct {
	acked    uint64    // every grant up to this epoch applied (this term)
	reported uint64    // the newest epoch of this term the pod reported applying (0: none)
	expires  time.Time // leader clock: the pod's lease surely ended by then
	lastSeen time.Time
	live     int
}

// logRec is one grant change of a region, in epoch order.
type logRec struct {
	tenant string
	grant  Grant
}

type leaderRegion struct {
	name    string
	pods    map[string]*podRec
	log     []logRec
	current map[string]Grant // newest grant per tenant
	// latest is each pod's rates (units per second) over its last reports
	// (about one Interval, see accumulate): a region's demand is the sum
	// over its pods of their latest rates, so that how many reports fall
	// between two rebalances does not matter.
	latest map[string]podUsage
	// rates are the summed latest rates by tenant index as of the last
	// fold, ratesIDs the indices set (for TenantRates and Busiest).
	rates    []Usage
	ratesIDs []int32
	wStart   time.Time
	cold     Ceiling
	// shareD is the fail-open denominator, raised at epoch shareEpoch.
	shareD     int
	shareEpoch uint64
	// dumpers are the pods that reported an older term's grants and have
	// not reported this term's since, with when their record expires.
	dumpers map[string]time.Time
	// dirty: a grant of the region changed since the last Nudges.
	dirty bool
}

// Leader is one term of the coordinator's leadership, pure: it takes pods'
// reports, answers each with a renewal and the region's grants that changed
// since the epoch the pod applied, and runs the [Allocator]. See
// docs/protocol.md. Not safe for concurrent use.
type Leader struct {
	cfg    LeaderConfig
	alloc  *Allocator
	start  time.Time
	regs   []leaderRegion
	regIdx map[string]int
	stats  LeaderStats
	// budgets are the tenants' own budgets (SetBudgets).
	budgets map[string]Budget
	// Scratch of accumulate and fold.
	newNames []string
	sum      []Usage // by tenant index
	seen     []bool
	touched  []int32
	podIDs   []string // (see podOrder)
	use      []Usage
	steps    []int32 // the tenants the report being taken marks as steps
	// lastStep: when a step last rebalanced each tenant (within
	// StepHold); stepDue: when each deferred step is due.
	lastStep, stepDue map[string]time.Time
	stepOut           []Change // the changes the last Report made (StepChanges)
	deflt             *Budget  // the default tier (nil: unknown tenants denied)
	// deflts: the default budget of each budget class (see
	// Allocator.classOf), deflt at 0; a nil one is denied.
	deflts []*Budget
	// namedCold: each region's cold floors of named budgets, by name.
	namedCold []map[string]Ceiling
	// coldWait: cold floors a policy raised in some region while it
	// lowered one elsewhere (a pinned default tier's new home), by class
	// name ("" the tenants' budgets): answers carry them only once every
	// lease granted before the lowering has ended (see setCold).
	coldWait map[string]*coldRaise
	// rebalanced: the first rebalance after learning ran; until then
	// reports are answered as in learning.
	rebalanced bool
	// learnEnd: when learning ends (sooner once unknown, the roster's
	// pods that have not yet fixed what they hold, is empty).
	learnEnd time.Time
	unknown  map[PodKey]struct{}
	// legacyClosed: since the last rebalance, a region's last pod that
	// held an older term's grants reported this term's (RebalanceDue).
	legacyClosed bool
}

// NewLeader starts a term at now.
func NewLeader(now time.Time, cfg LeaderConfig) (*Leader, error) {
	if cfg.MaxPodsPerRegion == 0 {
		cfg.MaxPodsPerRegion = 256
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a, err := NewAllocator(cfg.Config)
	if err != nil {
		return nil, err
	}
	l := &Leader{cfg: cfg, alloc: a, start: now, regIdx: map[string]int{},
		lastStep: map[string]time.Time{}, stepDue: map[string]time.Time{}}
	for i, r := range cfg.Regions {
		l.regIdx[r] = i
		l.regs = append(l.regs, leaderRegion{name: r, pods: map[string]*podRec{}, current: map[string]Grant{},
			latest: map[string]podUsage{}, wStart: now, dumpers: map[string]time.Time{}})
	}
	l.learnEnd = now.Add(cfg.Learning)
	if cfg.First {
		l.learnEnd = now
	} else if cfg.RosterKnown {
		l.unknown = make(map[PodKey]struct{}, len(cfg.Roster))
		for _, k := range cfg.Roster {
			l.unknown[k] = struct{}{}
		}
		l.rosterDone(now)
	}
	return l, nil
}

// fixes reports whether r, from a pod of the roster, fixes what the pod may
// enforce of older terms: it heard of this term before sending r (so it
// ignores older terms' answers since), and it holds no grant, or holds no
// valid lease (its floors, which r lists, are all it may enforce), or holds
// exactly what this term renewed (which r lists too).
func (l *Leader) fixes(r *PodReport) bool {
	if r.Heard < l.cfg.Term || r.Term >= l.cfg.Term {
		return false
	}
	return r.Term == 0 || r.Held != nil && (!r.Leased || r.RenewedBy >= l.cfg.Term)
}

// rosterDone ends learning at now, or at Deposed after the term started if
// later, once every pod of the roster has fixed what it holds.
func (l *Leader) rosterDone(now time.Time) {
	if len(l.unknown) > 0 {
		return
	}
	end := l.start.Add(l.cfg.Deposed)
	if end.Before(now) {
		end = now
	}
	if end.Before(l.learnEnd) {
		l.learnEnd = end
		l.stats.EarlyEnd = end.Sub(l.start)
	}
	l.unknown = nil
}

// Start returns when the term started.
func (l *Leader) Start() time.Time { return l.start }

// Term returns the leader's term.
func (l *Leader) Term() uint64 { return l.cfg.Term }

// Allocator returns the allocator, for read-only views (grants, demand).
func (l *Leader) Allocator() *Allocator { return l.alloc }

// Learning reports whether the leader is still in its learning period at now.
func (l *Leader) Learning(now time.Time) bool { return now.Before(l.LearningUntil()) }

// LearningUntil returns when the learning period ends, as far as the
// leader knows now: with a roster it may end sooner (see
// LeaderConfig.Roster).
func (l *Leader) LearningUntil() time.Time { return l.learnEnd }

// RebalanceDue reports whether learning is over but the term's first
// rebalance has not run: until it does, every report gets a learning
// answer. A coordinator runs it at once when learning ends early.
// It also reports true once a region's pods all hold this term's grants
// after some held an older term's: what those older grants kept from the
// other regions is free once the region's acknowledgements say so.
func (l *Leader) RebalanceDue(now time.Time) bool {
	return !l.Learning(now) && (!l.rebalanced || l.legacyClosed)
}

// Prunable reports whether pod of region surely holds no lease of this or
// any older term at now: the learning period (its full length: an older
// term's lease that no report fixed ends by then) is over and this term
// has not leased the pod or its lease surely ended. The coordinator drops
// such pods from the roster.
func (l *Leader) Prunable(now time.Time, region, pod string) bool {
	if !l.cfg.First && now.Before(l.start.Add(l.cfg.Learning)) {
		return false
	}
	if i, ok := l.regIdx[region]; ok {
		if p := l.regs[i].pods[pod]; p != nil && now.Before(p.expires) {
			return false
		}
	}
	return true
}

// Stats returns the counters.
func (l *Leader) Stats() LeaderStats { return l.stats }

// Tenants returns how many tenants the leader tracks.
func (l *Leader) Tenants() int { return l.alloc.Tenants() }

// SetDefault sets the budget of tenants that have none of their own (the
// policy's default tier), or nil when pods deny such tenants. Its floor in
// each region is the cold floor: what a pod enforces for a tenant it holds
// no grant of, while its lease is valid. Pods take it with their next
// answer.
func (l *Leader) SetDefault(b *Budget) {
	if b != nil && b.Validate(l.cfg.Regions) != nil {
		b = nil
	}
	l.deflt = b
	l.setClassDefault(0, b)
	l.setCold("", b)
}

// SetNamedDefault is SetDefault for the named budget name (see BudgetID),
// or for every key of a global limit with name "LIMIT=" (KeyBudgetID):
// the budget of a tenant's budget of that name when it has none of its own
// (SetBudgets), nil when there is none. Its floor in each region is the
// cold floor of budgets of that name.
func (l *Leader) SetNamedDefault(name string, b *Budget) {
	if name == "" {
		l.SetDefault(b)
		return
	}
	if b != nil && b.Validate(l.cfg.Regions) != nil {
		b = nil
	}
	l.setClassDefault(l.alloc.classOf(BudgetID("x", name)), b)
	l.setCold(name, b)
}

// coldRaise is one class's cold floors waiting to be raised: the targets by
// region, carried from at on (leader clock).
type coldRaise struct {
	want []Ceiling
	at   time.Time
}

// setCold sets the cold floors of the class name (the default budget b's
// floor in each region; none when b is nil). A pod holds the cold floor of
// the last answer that renewed its lease until its next one, so a region
// whose cold floor falls may enforce the old one until every lease granted
// before then has ended. A region's cold floor rises at once only when no
// other region's falls (a budget raised everywhere: the mix of old and new
// floors stays within the new budget); otherwise (the default tier pinned
// to another home, a region set that changed) it stays where it was, or
// falls with the rest, until those leases have ended: the old home and the
// new one never both hold the whole budget as their cold floor.
func (l *Leader) setCold(name string, b *Budget) {
	want := make([]Ceiling, len(l.regs))
	lowered := false
	for i := range l.regs {
		if b != nil {
			want[i].Rate, want[i].Burst = Floor(*b, l.cfg.Regions, l.regs[i].name)
		}
		cur := l.coldCarried(name, i)
		lowered = lowered || want[i].Rate < cur.Rate || want[i].Burst < cur.Burst
	}
	w := l.coldWait[name]
	if !lowered && w == nil {
		for i := range l.regs {
			l.carryCold(name, i, want[i])
		}
		return
	}
	if w == nil {
		if l.coldWait == nil {
			l.coldWait = map[string]*coldRaise{}
		}
		w = &coldRaise{}
		l.coldWait[name] = w
	}
	w.want = want
	for i := range l.regs {
		cur := l.coldCarried(name, i)
		l.carryCold(name, i, Ceiling{Rate: min(cur.Rate, want[i].Rate), Burst: min(cur.Burst, want[i].Burst)})
	}
	if lowered {
		// (Only a lowering moves the wait: a policy rewritten more often
		// than a lease must not hold a raise back for ever.)
		for i := range l.regs {
			if exp := l.alloc.regs[i].leaseExpiry; exp.After(w.at) {
				w.at = exp
			}
		}
	}
}

// raiseCold carries, at now, the cold floors setCold held back whose wait
// is over.
func (l *Leader) raiseCold(now time.Time) {
	for name, w := range l.coldWait {
		if now.Before(w.at) {
			continue
		}
		for i := range l.regs {
			l.carryCold(name, i, w.want[i])
		}
		delete(l.coldWait, name)
	}
}

// coldCarried returns the cold floor answers carry to region i for class
// name.
func (l *Leader) coldCarried(name string, i int) Ceiling {
	if name == "" {
		return l.regs[i].cold
	}
	if l.namedCold == nil {
		return Ceiling{}
	}
	return l.namedCold[i][name] // (none: zero)
}

// carryCold makes c the cold floor answers carry to region i for class
// name, and the one the allocator counts.
func (l *Leader) carryCold(name string, i int, c Ceiling) {
	if name == "" {
		l.regs[i].cold = c
		l.record(l.alloc.SetCold(l.regs[i].name, c))
		return
	}
	if l.namedCold == nil {
		l.namedCold = make([]map[string]Ceiling, len(l.regs))
	}
	// A new map: answers already handed out keep theirs.
	m := make(map[string]Ceiling, len(l.namedCold[i])+1)
	maps.Copy(m, l.namedCold[i])
	if c.Rate > 0 || c.Burst > 0 {
		m[name] = c
	} else {
		delete(m, name)
	}
	l.namedCold[i] = m
	l.record(l.alloc.SetColdOf(l.regs[i].name, name, c))
}

func (l *Leader) setClassDefault(cl int32, b *Budget) {
	for int(cl) >= len(l.deflts) {
		l.deflts = append(l.deflts, nil)
	}
	l.deflts[cl] = b
}

// defaultFor returns the default budget of budget ID id's class (nil: none,
// its pods deny it).
func (l *Leader) defaultFor(id string) *Budget {
	_, name := SplitBudgetID(id)
	if name == "" {
		return l.deflt
	}
	cl, ok := l.alloc.classes[BudgetClass(name)]
	if !ok {
		return nil
	}
	return classDefault(l.deflts, cl)
}

// coldOf returns region i's cold floors of named budgets (nil: none).
func (l *Leader) coldOf(i int) map[string]Ceiling {
	if l.namedCold == nil {
		return nil
	}
	return l.namedCold[i]
}

func reportErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidReport, fmt.Sprintf(format, args...))
}

// validate checks r against what this leader knows; nothing changes.
func (l *Leader) validate(r *PodReport) (int, error) {
	i, ok := l.regIdx[r.Region]
	if !ok {
		return 0, fmt.Errorf("region %q (regions: %v): %w", r.Region, l.cfg.Regions, ErrUnknownRegion)
	}
	switch {
	case r.Pod == "" || len(r.Pod) > 253:
		return 0, reportErr("pod: %q: want a name of 1 to 253 bytes", r.Pod)
	case r.Interval <= 0 || r.Interval > 100*l.cfg.Interval:
		return 0, reportErr("interval: %v: want a positive span of at most 100 rebalance intervals", r.Interval)
	case r.Term > l.cfg.Term:
		return 0, fmt.Errorf("%w: term %d is above the leader's (%d)", ErrForgedReport, r.Term, l.cfg.Term)
	case r.Term == l.cfg.Term && r.Applied > l.alloc.regs[i].epoch:
		return 0, fmt.Errorf("%w: applied epoch %d is above the %d issued to region %q", ErrForgedReport, r.Applied, l.alloc.regs[i].epoch, r.Region)
	case r.LivePods < 0:
		return 0, reportErr("live_pods: %d: must not be negative", r.LivePods)
	}
	for t, u := range r.Usage {
		if t == "" {
			return 0, reportErr("usage: empty tenant name")
		}
		if l.cfg.ValidTenant != nil {
			if err := l.cfg.ValidTenant(t); err != nil {
				return 0, reportErr("usage[%q]: %v", t, err)
			}
		}
		if !(u.Offered >= 0) || math.IsInf(u.Offered, 0) || !(u.Admitted >= 0) || math.IsInf(u.Admitted, 0) {
			return 0, reportErr("usage[%q]: offered %v, admitted %v: must be finite and ≥ 0", t, u.Offered, u.Admitted)
		}
		if u.Admitted > u.Offered*(1+1e-9)+1e-9 {
			return 0, reportErr("usage[%q]: admitted %v exceeds offered %v", t, u.Admitted, u.Offered)
		}
	}
	return i, nil
}

// Report takes pod report r at now (leader clock) and answers it. An
// invalid or impossible report is an error and changes nothing.
// Admissible returns the error Report would refuse r with for what r says
// (invalid, or a pod without a lease in a region with MaxPodsPerRegion
// leased pods already), without taking it: a coordinator checks it before
// it puts the pod on the roster.
func (l *Leader) Admissible(now time.Time, r PodReport) error {
	i, err := l.validate(&r)
	if err != nil {
		return err
	}
	reg := &l.regs[i]
	prev := reg.pods[r.Pod]
	hadLease := prev != nil && now.Before(prev.expires)
	if !hadLease && l.leasedPods(reg, now) >= l.cfg.MaxPodsPerRegion {
		return fmt.Errorf("%w: %q already has %d", ErrTooManyPods, r.Region, l.cfg.MaxPodsPerRegion)
	}
	return nil
}

func (l *Leader) Report(now time.Time, r PodReport) (Answer, error) {
	i, err := l.validate(&r)
	if err != nil {
		l.stats.Rejected++
		return Answer{}, err
	}
	l.raiseCold(now)
	reg := &l.regs[i]
	prev := reg.pods[r.Pod]
	hadLease := prev != nil && now.Before(prev.expires)
	if !hadLease && l.leasedPods(reg, now) >= l.cfg.MaxPodsPerRegion {
		l.stats.Rejected++
		return Answer{}, fmt.Errorf("%w: %q already has %d", ErrTooManyPods, r.Region, l.cfg.MaxPodsPerRegion)
	}
	l.stats.Reports++
	if cap(l.stepOut) > maxStepOut {
		l.stepOut = nil // (do not hold on to a restarted pod's every change)
	}
	l.stepOut = l.stepOut[:0]
	// A report older than one the pod sent after it applied this term's
	// grants (the network reordered them) says nothing of what it holds.
	stale := r.Seq != 0 && r.Seq <= reg.latest[r.Pod].seq && prev != nil && prev.reported > 0
	l.accumulate(reg, r, now)
	if l.unknown != nil && l.Learning(now) {
		if k := (PodKey{r.Region, r.Pod}); l.fixes(&r) {
			if _, ok := l.unknown[k]; ok {
				delete(l.unknown, k)
				l.rosterDone(now)
			}
		}
	}
	learning := l.Learning(now) || !l.rebalanced || (r.Term != 0 && r.Term != l.cfg.Term && r.Held == nil)
	renew := learning && l.renewable(r)
	if r.Term != l.cfg.Term && len(r.Held) > 0 {
		// Grants of an older term: their floors outlive the lease, and
		// when this answer renews it, so do their rates.
		for _, e := range r.Held {
			if l.cfg.ValidTenant != nil && l.cfg.ValidTenant(e.Tenant) != nil {
				continue
			}
			c := Ceiling{Rate: e.Grant.FloorRate, Burst: e.Grant.FloorBurst}
			if renew {
				c = Ceiling{Rate: max(c.Rate, e.Grant.Rate), Burst: max(c.Burst, e.Grant.Burst)}
			}
			l.alloc.Legacy(e.Tenant, r.Region, c)
			if k, ok := l.alloc.tIdx[e.Tenant]; ok {
				l.used(k, now)
			}
		}
		if !stale {
			reg.dumpers[r.Pod] = now.Add(l.cfg.Lease)
		}
	} else if _, ok := reg.dumpers[r.Pod]; ok && r.Term == l.cfg.Term {
		delete(reg.dumpers, r.Pod)
		if len(reg.dumpers) == 0 {
			// The region's older grants no longer count in its ceilings
			// once acknowledged: rebalance soon, not at the next tick.
			l.legacyClosed = true
		}
	}
	if learning {
		// Learning; or a pod of an older term that has not said what it
		// holds: it will (an answer with this term asks it to).
		l.stats.Learning++
		ans := Answer{Term: l.cfg.Term, Learning: true, Entries: l.lowered(r)}
		if renew {
			// The pod keeps enforcing what it holds: nothing a leader
			// grants during learning, and every region's held grants
			// count in its ceilings after (Legacy above). It is one of
			// the region's leased pods that acknowledged nothing of this
			// term, until it holds this term's grants: the region's
			// acknowledged epoch waits for it (it may enforce the cold
			// floor for tenants it holds no grant of), and so do
			// fail-open shares.
			l.stats.Renewed++
			rec := reg.pods[r.Pod]
			if rec == nil {
				rec = &podRec{}
				reg.pods[r.Pod] = rec
			}
			rec.acked, rec.expires, rec.lastSeen, rec.live = 0, now.Add(l.cfg.Lease), now, r.LivePods
			l.alloc.renew(i, now)
			ans.Lease, ans.HeldTerm, ans.Epoch, ans.Cold, ans.ColdNamed = l.cfg.Lease, r.Term, r.Applied, reg.cold, l.coldOf(i)
			// A deposed leader may act until it notices, up to Deposed
			// after this term started: it may give a pod's room to
			// another region once that pod's lease lapses. So the pod
			// takes the renewal only if its lease outlasts that.
			ans.LeasedFor = max(0, l.start.Add(l.cfg.Deposed).Sub(now))
		}
		return ans, nil
	}
	// A pod behind a forgotten tenant's tombstone gets a full answer: no
	// delta carries the tombstone any more.
	synced := r.Term == l.cfg.Term && r.Applied > 0 && r.Applied >= l.alloc.regs[i].forgotten
	p := prev
	if p == nil {
		p = &podRec{}
	}
	reg.pods[r.Pod] = p // (leasedPods may have dropped an expired record)
	p.expires, p.lastSeen, p.live = now.Add(l.cfg.Lease), now, r.LivePods
	// The region holds a lease until this one surely ended: a rebalance
	// must not revoke its grants before (a report that carries no usage,
	// such as an answer to a nudge, renews it too).
	l.alloc.renew(i, now)
	if !hadLease && !r.Partial && len(l.steps) == 0 && len(r.Usage) <= maxLeaseSteps {
		// A pod without a lease (new, restarted, or cut off and back):
		// its rates are news to the allocator, which may have given its
		// region's room away. Rebalance its tenants now, as steps.
		l.steps = l.steps[:0]
		for t := range r.Usage {
			if k, ok := l.alloc.tIdx[t]; ok {
				l.steps = append(l.steps, int32(k))
			}
		}
		slices.Sort(l.steps)
	}
	// The fail-open share: 1/D of the region for every pod, with D at
	// least the pods that may hold a lease. Raising D (smaller shares) is
	// a change of the region's epoch; a share is handed out only once
	// every leased pod applied the last raise, so a pod that just joined
	// gets none while another may still hold a larger one.
	n := l.leasedPods(reg, now)
	if n > reg.shareD {
		reg.shareD = n
		l.alloc.regs[i].epoch++
		reg.shareEpoch = l.alloc.regs[i].epoch
	} else if n < reg.shareD {
		reg.shareD = n // larger shares: the pods that left hold none
	}
	if r.Term == l.cfg.Term {
		p.reported = max(p.reported, r.Applied)
	} else {
		p.reported = 0
	}
	if hadLease {
		// It may still enforce what it held when it sent this report.
		if r.Term == l.cfg.Term {
			p.acked = max(p.acked, r.Applied)
		}
	} else {
		// It holds no lease: until it applies this answer (which brings it
		// to epoch) it enforces floors and has no fail-open share.
		p.acked = l.alloc.regs[i].epoch
	}
	if len(l.steps) > 0 {
		// Rebalance the tenants whose rates stepped now, with what this
		// report acknowledged, so that the answer carries their changes.
		if ack, ok := l.regionAck(reg, now); ok {
			_, _ = l.alloc.Ack(r.Region, ack)
		}
		l.stepNow(i, now)
	}
	epoch := l.alloc.regs[i].epoch

	ans := Answer{Term: l.cfg.Term, Lease: l.cfg.Lease, Epoch: epoch, Cold: reg.cold, ColdNamed: l.coldOf(i), Pods: n}
	if synced {
		ans.Entries = l.delta(reg, r.Applied)
	} else {
		ans.Full = true
		ans.Entries = l.full(reg)
		l.stats.FullSyncs++
	}
	l.stats.EntriesSent += int64(len(ans.Entries))
	ack, _ := l.regionAck(reg, now) // p itself holds a lease: never empty
	if ack >= reg.shareEpoch {
		ans.SharePods = reg.shareD
	}
	_, _ = l.alloc.Ack(r.Region, ack)
	return ans, nil
}

// Push returns, at now, what the leader would answer pod of region if it
// reported again now the epoch it last reported, but renewing no lease: the
// region's grants that changed since, the epoch, the cold floor and the
// fail-open share (see docs/protocol.md, "Pushes"). A pod applies it as the
// answer to a report it sent long ago: entries only above the epoch it
// holds, its lease unchanged. ok is false when there is nothing to push, or
// the pod is not one the leader can push to (no lease, another term, behind
// a forgotten tenant's tombstone, or the leader is learning): it gets what
// changed in the answer to its next report. A pod whose older term's lease
// this term renewed gets an answer with ReportNow instead.
func (l *Leader) Push(now time.Time, region, pod string) (ans Answer, ok bool) {
	i, found := l.regIdx[region]
	if !found || l.Learning(now) || !l.rebalanced {
		return Answer{}, false
	}
	reg := &l.regs[i]
	p := reg.pods[pod]
	epoch := l.alloc.regs[i].epoch
	if p != nil && now.Before(p.expires) && p.reported == 0 && p.acked == 0 {
		// Renewed while learning (see Report): it holds no grant of this
		// term yet.
		l.stats.Pushes++
		return Answer{Term: l.cfg.Term, ReportNow: true}, true
	}
	if p == nil || !now.Before(p.expires) || p.reported == 0 || p.reported < l.alloc.regs[i].forgotten || epoch <= p.reported {
		return Answer{}, false
	}
	ans = Answer{Term: l.cfg.Term, Epoch: epoch, Cold: reg.cold, ColdNamed: l.coldOf(i), Pods: l.leasedPods(reg, now), Entries: l.delta(reg, p.reported)}
	if ack, ok := l.regionAck(reg, now); ok && ack >= reg.shareEpoch {
		ans.SharePods = reg.shareD
	}
	l.stats.Pushes++
	l.stats.EntriesSent += int64(len(ans.Entries))
	return ans, true
}

// renewable reports whether a learning answer to r may renew the lease of
// the grants r says its pod holds: they are of an older term, each carries
// the budget it was made under, and no such budget is above the tenant's
// budget now. An older leader kept the grants of every pod together within
// its budgets (I4), so as long as this leader grants nothing, keeping them
// keeps that; a budget lowered since must reach the pods as leases lapse.
func (l *Leader) renewable(r PodReport) bool {
	if r.Term == 0 || r.Term >= l.cfg.Term || r.Held == nil || l.budgets == nil {
		return false
	}
	for _, e := range r.Held {
		g := &e.Grant
		if g.BudgetRate <= 0 || g.BudgetBurst <= 0 {
			return false
		}
		b, ok := l.Budget(e.Tenant)
		if !ok || b.Rate < g.BudgetRate || b.Burst < g.BudgetBurst {
			return false
		}
	}
	return true
}

// lowered returns, for the grants a pod of an older term reports holding,
// the floors this leader's budgets give where they are lower than the held
// ones: a learning answer carries them, and the pod lowers its floors to
// them (never raises). A pod that reaches the coordinators but not etcd
// learns a budget cut this way even while leaders change; without it, it
// would keep the old budget's floors until a leader finished learning.
func (l *Leader) lowered(r PodReport) []Entry {
	if l.budgets == nil || len(r.Held) == 0 {
		return nil
	}
	var out []Entry
	for _, e := range r.Held {
		b, _ := l.Budget(e.Tenant) // none, no tier: denied, floor 0
		var fr float64
		var fb int64
		if b.Rate > 0 {
			if b.Validate(l.cfg.Regions) != nil {
				continue
			}
			fr, fb = Floor(b, l.cfg.Regions, r.Region)
		}
		if fr < e.Grant.FloorRate || fb < e.Grant.FloorBurst {
			out = append(out, Entry{Tenant: e.Tenant, Grant: Grant{Epoch: e.Grant.Epoch,
				FloorRate: min(fr, e.Grant.FloorRate), FloorBurst: min(fb, e.Grant.FloorBurst)}})
		}
	}
	return out
}

// podUsage is one pod's rates over its last reports, per second: use[j] is
// the usage of the allocator's tenant ids[j] (tenants are indexed as reports
// arrive, so that folding a region's reports at a rebalance hashes no
// names), over the span of the reports it covers.
type podUsage struct {
	seq   uint64 // the newest report's PodReport.Seq
	at    time.Time
	span  time.Duration // the time the rates cover (see accumulate)
	frees uint64        // Allocator.frees when recorded: an id born later is another tenant
	ids   []int32
	use   []Usage
}

// accumulate records r's usage as its pod's latest rates. A report that
// covers less than an Interval (one sent early, after a shrink) is merged
// with the rates before it, so that the pod's rates always cover about an
// Interval: alone, a few tens of milliseconds of Poisson traffic would say
// a rate of 0 or several times the real one, and a region's demand would
// jump with it. A tenant the allocator does not know yet joins it here (in
// name order within one report, so that the order of tenants is a function
// of the reports), unless MaxTenants are known already.
func (l *Leader) accumulate(reg *leaderRegion, r PodReport, now time.Time) {
	pu := reg.latest[r.Pod]
	l.steps = l.steps[:0]
	if r.Seq != 0 {
		if r.Seq <= pu.seq {
			l.stats.Reordered++
			return
		}
		pu.seq = r.Seq
	}
	if r.Partial {
		l.accumulateSteps(reg, r, now, pu)
		return
	}
	// keep is how much of the previous rates' span to merge with r: those
	// rates, as units over keep, go to l.sum first.
	var keep time.Duration
	if len(pu.ids) > 0 && r.Interval < l.cfg.Interval && now.Sub(pu.at) <= 3*l.cfg.Interval {
		keep = min(pu.span, l.cfg.Interval-r.Interval)
		l.grow()
		l.touched = l.touched[:0]
		ks := keep.Seconds()
		check := pu.frees != l.alloc.frees
		for j, k := range pu.ids {
			if check && (l.alloc.tenants[k].name == "" || l.alloc.tenants[k].born > pu.frees) {
				continue // forgotten since
			}
			l.add(k, pu.use[j].Offered*ks, pu.use[j].Admitted*ks)
		}
	}
	secs := r.Interval.Seconds()
	pu.ids, pu.use = pu.ids[:0], pu.use[:0]
	l.newNames = l.newNames[:0]
	for t, u := range r.Usage {
		k, ok := l.alloc.tIdx[t]
		if !ok {
			l.newNames = append(l.newNames, t)
			continue
		}
		pu.ids = append(pu.ids, int32(k))
		pu.use = append(pu.use, Usage{Offered: u.Offered / secs, Admitted: u.Admitted / secs})
	}
	if len(l.newNames) > 0 {
		sort.Strings(l.newNames)
		for _, t := range l.newNames {
			if _, own := l.budgets[t]; !own && l.defaultFor(t) == nil {
				continue // unknown tenants are denied: nothing to share
			}
			if l.cfg.MaxTenants > 0 && l.alloc.Tenants() >= l.cfg.MaxTenants {
				l.stats.DroppedTenants++
				continue
			}
			u := r.Usage[t]
			pu.ids = append(pu.ids, int32(l.alloc.tenant(t)))
			pu.use = append(pu.use, Usage{Offered: u.Offered / secs, Admitted: u.Admitted / secs})
		}
	}
	// Traffic, for IdleTimeout, is what the pod reports now: the rates
	// merged below decay geometrically when a pod reports more often than
	// Interval, and a tenant it stopped seeing would never reach zero.
	for j, k := range pu.ids {
		if pu.use[j].Offered > 0 || pu.use[j].Admitted > 0 {
			l.used(int(k), now)
		}
	}
	pu.span = r.Interval
	if keep > 0 {
		// Add r's units and make rates over keep + r.Interval.
		l.grow()
		for j, k := range pu.ids {
			l.add(k, pu.use[j].Offered*secs, pu.use[j].Admitted*secs)
		}
		pu.span = keep + r.Interval
		ss := pu.span.Seconds()
		pu.ids, pu.use = pu.ids[:0], pu.use[:0]
		for _, k := range l.touched {
			u := l.sum[k]
			pu.ids = append(pu.ids, k)
			pu.use = append(pu.use, Usage{Offered: u.Offered / ss, Admitted: u.Admitted / ss})
		}
		l.clearSum(l.touched)
		l.touched = l.touched[:0]
	}
	pu.at, pu.frees = now, l.alloc.frees
	reg.latest[r.Pod] = pu
	l.accumulateSteps(reg, r, now, pu)
}

// accumulateSteps sets, in the pod's latest rates, the rate of every tenant
// r marks as a step (of every tenant r carries, when r is partial) to r's
// rate: a step is taken at once, not merged. l.steps lists the stepped
// tenants known to the allocator.
func (l *Leader) accumulateSteps(reg *leaderRegion, r PodReport, now time.Time, pu podUsage) {
	secs := r.Interval.Seconds()
	if r.Partial && pu.frees != l.alloc.frees && len(pu.ids) > 0 {
		// Some tenant was forgotten since these rates were recorded:
		// drop its entry, so that an index reused by another tenant
		// does not inherit them.
		kept := 0
		for j, k := range pu.ids {
			if t := l.alloc.tenants[k]; t.name != "" && t.born <= pu.frees {
				pu.ids[kept], pu.use[kept] = k, pu.use[j]
				kept++
			}
		}
		pu.ids, pu.use = pu.ids[:kept], pu.use[:kept]
	}
	names := l.newNames[:0]
	for t, u := range r.Usage {
		if r.Partial || u.Step {
			names = append(names, t)
		}
	}
	if len(names) == 0 {
		if r.Seq != 0 && len(pu.ids) > 0 {
			reg.latest[r.Pod] = pu // (its seq)
		}
		return
	}
	sort.Strings(names) // new tenants join in name order
	for _, t := range names {
		u := r.Usage[t]
		var k int
		var ok bool
		if r.Partial {
			k, ok = l.join(t)
		} else {
			k, ok = l.alloc.tIdx[t] // (accumulate joined what may join)
		}
		if !ok {
			continue
		}
		rate := Usage{Offered: u.Offered / secs, Admitted: u.Admitted / secs}
		j := slices.Index(pu.ids, int32(k))
		if j < 0 {
			pu.ids, pu.use = append(pu.ids, int32(k)), append(pu.use, rate)
		} else {
			pu.use[j] = rate
		}
		if u.Step {
			l.steps = append(l.steps, int32(k))
		}
	}
	l.newNames = names[:0]
	if pu.at.IsZero() {
		pu.at, pu.span = now, r.Interval
	}
	pu.frees = l.alloc.frees
	reg.latest[r.Pod] = pu
}

// join returns tenant t's index, adding it to the allocator if it is new
// and may be shared (it has a budget of its own or the default tier applies,
// and MaxTenants allows).
func (l *Leader) join(t string) (int, bool) {
	if k, ok := l.alloc.tIdx[t]; ok {
		return k, true
	}
	if _, own := l.budgets[t]; !own && l.defaultFor(t) == nil {
		return 0, false
	}
	if l.cfg.MaxTenants > 0 && l.alloc.Tenants() >= l.cfg.MaxTenants {
		l.stats.DroppedTenants++
		return 0, false
	}
	return l.alloc.tenant(t), true
}

// stepNow rebalances, as their report arrives, the tenants l.steps lists
// (the report's region is i): each one's demand in region i becomes the sum
// of its pods' latest rates at once, and the tenant is rebalanced alone,
// unless a step rebalanced it less than StepHold ago (it is then due when
// the hold ends, see FlushSteps). The changes go into the answer to this
// report, and to the region's other pods with their next.
func (l *Leader) stepNow(i int, now time.Time) {
	reg := &l.regs[i]
	pods := l.podOrder(reg)
	for _, k := range l.steps {
		var x Usage
		for _, id := range pods {
			pu := reg.latest[id]
			if now.Sub(pu.at) > 3*l.cfg.Interval {
				continue
			}
			if j := slices.Index(pu.ids, k); j >= 0 {
				x.Offered += pu.use[j].Offered
				x.Admitted += pu.use[j].Admitted
			}
		}
		name := l.alloc.tenants[k].name
		if _, ok := l.Budget(name); !ok {
			continue
		}
		l.used(int(k), now)
		l.alloc.setDemand(int(k), i, max(x.Offered, x.Admitted))
		if last, ok := l.lastStep[name]; ok && now.Sub(last) < l.cfg.StepHold {
			if _, due := l.stepDue[name]; !due {
				l.stepDue[name] = last.Add(l.cfg.StepHold)
			}
			continue
		}
		l.stepOut = append(l.stepOut, l.stepTenant(int(k), now, true)...)
	}
}

// stepTenant rebalances tenant k alone at now and records the changes; with
// step (it stepped, rather than its budget changed) no other step
// rebalances it for StepHold.
func (l *Leader) stepTenant(k int, now time.Time, step bool) []Change {
	name := l.alloc.tenants[k].name
	b, ok := l.Budget(name)
	if !ok {
		return nil
	}
	changes := l.alloc.rebalanceOne(now, k, &b)
	l.record(changes)
	if step && l.cfg.StepHold > 0 {
		l.lastStep[name] = now
	}
	delete(l.stepDue, name)
	l.stats.StepRebalances++
	l.stats.StepChanges += int64(len(changes))
	return changes
}

// StepsDue reports whether a tenant is due for a rebalance of its own (a
// step a hold deferred, or a budget SetBudgets changed), and when the
// earliest is (the zero time: at once). The coordinator calls FlushSteps
// then.
func (l *Leader) StepsDue() (at time.Time, any bool) {
	for _, t := range l.stepDue {
		if !any || t.Before(at) {
			at, any = t, true
		}
	}
	return at, any
}

// FlushSteps rebalances, at now, the tenants whose steps a hold deferred and
// is over, and returns the changes (deliver them as Rebalance's).
func (l *Leader) FlushSteps(now time.Time) []Change {
	if l.Learning(now) || !l.rebalanced {
		clear(l.stepDue) // (the first rebalance takes every tenant)
		return nil
	}
	var names []string
	for t, at := range l.stepDue {
		if !at.After(now) {
			names = append(names, t)
		}
	}
	sort.Strings(names) // deterministic epochs
	var out []Change
	for _, t := range names {
		step := !l.stepDue[t].IsZero() // (zero: its budget changed)
		delete(l.stepDue, t)
		if k, ok := l.alloc.tIdx[t]; ok {
			out = append(out, l.stepTenant(k, now, step)...)
		}
	}
	for t, at := range l.lastStep {
		if now.Sub(at) >= l.cfg.StepHold {
			delete(l.lastStep, t)
		}
	}
	return out
}

// add adds units of tenant k to l.sum, noting k in l.touched.
func (l *Leader) add(k int32, offered, admitted float64) {
	if !l.seen[k] {
		l.seen[k] = true
		l.touched = append(l.touched, k)
	}
	l.sum[k].Offered += offered
	l.sum[k].Admitted += admitted
}

// grow sizes the scratch sums to the allocator's tenants.
func (l *Leader) grow() {
	if n := len(l.alloc.tenants); len(l.sum) < n {
		l.sum = append(l.sum, make([]Usage, n-len(l.sum))...)
		l.seen = append(l.seen, make([]bool, n-len(l.seen))...)
	}
}

// regionSum sums, into l.sum by tenant index, the latest rates of reg's pods
// that reported within three rebalance intervals, forgetting the others. It
// returns the tenants summed; the caller clears their sums.
func (l *Leader) regionSum(reg *leaderRegion, now time.Time) []int32 {
	l.grow()
	l.touched = l.touched[:0]
	for _, id := range l.podOrder(reg) {
		pu := reg.latest[id]
		if now.Sub(pu.at) > 3*l.cfg.Interval {
			delete(reg.latest, id)
			continue
		}
		check := pu.frees != l.alloc.frees // some tenant was forgotten since
		for j, k := range pu.ids {
			if check && (l.alloc.tenants[k].name == "" || l.alloc.tenants[k].born > pu.frees) {
				continue
			}
			if !l.seen[k] {
				l.seen[k] = true
				l.touched = append(l.touched, k)
			}
			acc := &l.sum[k]
			acc.Offered += pu.use[j].Offered
			acc.Admitted += pu.use[j].Admitted
		}
	}
	// In index order: the allocator's slots are then visited in memory
	// order (in report order, at 100,000 tenants, most visits missed the
	// cache). Scanning seen is cheaper than sorting once most are touched.
	if n := len(l.touched); n*8 >= len(l.alloc.tenants) {
		l.touched = l.touched[:0]
		for k, ok := range l.seen[:len(l.alloc.tenants)] {
			if ok {
				l.touched = append(l.touched, int32(k))
			}
		}
	} else {
		slices.Sort(l.touched)
	}
	return l.touched
}

// podOrder returns the pods of reg.latest in name order, in a buffer the
// next call reuses: sums over pods are then made in one order, so that the
// same reports make the same floating-point demand, and the same grants.
func (l *Leader) podOrder(reg *leaderRegion) []string {
	l.podIDs = l.podIDs[:0]
	for id := range reg.latest {
		l.podIDs = append(l.podIDs, id)
	}
	slices.Sort(l.podIDs)
	return l.podIDs
}

// used records that a pod reported tenant k's traffic (or grant) at now.
func (l *Leader) used(k int, now time.Time) {
	if t := &l.alloc.tenants[k]; now.After(t.usedAt) {
		t.usedAt = now
	}
}

// clearSum resets the sums regionSum made.
func (l *Leader) clearSum(ids []int32) {
	for _, k := range ids {
		l.sum[k], l.seen[k] = Usage{}, false
	}
}

// leasedPods counts the pods of reg whose lease may be valid at now,
// forgetting those whose lease surely ended.
func (l *Leader) leasedPods(reg *leaderRegion, now time.Time) int {
	n := 0
	for id, p := range reg.pods {
		if now.Before(p.expires) {
			n++
		} else {
			delete(reg.pods, id)
		}
	}
	return n
}

// regionAck is the smallest epoch applied by the pods that may hold a lease.
func (l *Leader) regionAck(reg *leaderRegion, now time.Time) (uint64, bool) {
	ack, any := uint64(math.MaxUint64), false
	for _, p := range reg.pods {
		if now.Before(p.expires) {
			ack, any = min(ack, p.acked), true
		}
	}
	return ack, any
}

// delta returns the region's grants newer than applied, newest per tenant.
func (l *Leader) delta(reg *leaderRegion, applied uint64) []Entry {
	k := sort.Search(len(reg.log), func(j int) bool { return reg.log[j].grant.Epoch > applied })
	if k == len(reg.log) {
		return nil
	}
	out := make([]Entry, 0, len(reg.log)-k)
	for _, rec := range reg.log[k:] {
		if cur, ok := reg.current[rec.tenant]; ok && cur.Epoch == rec.grant.Epoch {
			out = append(out, Entry{Tenant: rec.tenant, Grant: rec.grant})
		}
	}
	return out
}

// full returns every current grant of the region, in epoch order.
func (l *Leader) full(reg *leaderRegion) []Entry {
	out := make([]Entry, 0, len(reg.current))
	for t, g := range reg.current {
		if !g.Dropped { // a full answer drops what it does not carry
			out = append(out, Entry{Tenant: t, Grant: g})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Grant.Epoch < out[b].Grant.Epoch })
	return out
}

// record appends changes to their regions' logs, compacting a log that
// holds mostly superseded records.
func (l *Leader) record(changes []Change) {
	for _, c := range changes {
		i, ok := l.regIdx[c.Region]
		if !ok {
			continue
		}
		reg := &l.regs[i]
		g := c.Grant
		if k, ok := l.alloc.tIdx[c.Tenant]; ok && !g.Dropped {
			g.BudgetRate, g.BudgetBurst = l.alloc.stampOf(k)
		}
		reg.log = append(reg.log, logRec{tenant: c.Tenant, grant: g})
		reg.current[c.Tenant] = g
		reg.dirty = true
	}
	for i := range l.regs {
		reg := &l.regs[i]
		if len(reg.log) > 2*len(reg.current)+64 {
			kept := reg.log[:0]
			for _, rec := range reg.log {
				if cur := reg.current[rec.tenant]; cur.Epoch == rec.grant.Epoch {
					kept = append(kept, rec)
				}
			}
			clear(reg.log[len(kept):])
			reg.log = kept
		}
	}
}

// fold feeds every region's accumulated usage to the allocator.
func (l *Leader) fold(now time.Time) {
	for i := range l.regs {
		reg := &l.regs[i]
		open := false
		for id, exp := range reg.dumpers {
			if now.Before(exp) {
				open = true
			} else {
				delete(reg.dumpers, id)
			}
		}
		l.alloc.SetLegacyOpen(reg.name, open)
		for _, k := range reg.ratesIDs {
			reg.rates[k] = Usage{}
		}
		reg.ratesIDs = reg.ratesIDs[:0]
		if len(reg.latest) == 0 {
			reg.wStart = now
			continue
		}
		interval := now.Sub(reg.wStart)
		if interval <= 0 {
			interval = time.Millisecond
		}
		ids := l.regionSum(reg, now)
		secs := interval.Seconds()
		l.use = l.use[:0]
		if n := len(l.alloc.tenants); len(reg.rates) < n {
			reg.rates = append(reg.rates, make([]Usage, n-len(reg.rates))...)
		}
		for _, k := range ids {
			u := l.sum[k]
			if u.Offered > 0 || u.Admitted > 0 {
				reg.rates[k] = u
				reg.ratesIDs = append(reg.ratesIDs, k)
			}
			l.use = append(l.use, Usage{Offered: u.Offered * secs, Admitted: u.Admitted * secs})
		}
		l.alloc.report(now, i, interval, ids, l.use)
		l.clearSum(ids)
		if ack, ok := l.regionAck(reg, now); ok && !l.Learning(now) {
			_, _ = l.alloc.Ack(reg.name, ack)
		}
		reg.wStart = now
	}
}

// TenantRates returns tenant's offered and admitted units per second in
// each region (in the order of the regions), summed over the pods' latest
// reports as of the last Rebalance; nil for a tenant the leader does not
// track.
func (l *Leader) TenantRates(tenant string) []Usage {
	k, ok := l.alloc.tIdx[tenant]
	if !ok {
		return nil
	}
	out := make([]Usage, len(l.regs))
	for i := range l.regs {
		if r := l.regs[i].rates; k < len(r) {
			out[i] = r[k]
		}
	}
	return out
}

// Busiest returns the n tenants that offered the most, summed over regions,
// as of the last Rebalance, busiest first (ties by name). Tenants that
// offered nothing are left out.
func (l *Leader) Busiest(n int) []string {
	type load struct {
		k   int
		off float64
	}
	top := make([]load, 0, n+1)
	less := func(a, b load) bool { // a ranks below b
		if a.off != b.off {
			return a.off < b.off
		}
		return l.alloc.tenants[a.k].name > l.alloc.tenants[b.k].name
	}
	for k := range l.alloc.tenants {
		if l.alloc.tenants[k].name == "" {
			continue
		}
		var off float64
		for i := range l.regs {
			if r := l.regs[i].rates; k < len(r) {
				off += r[k].Offered
			}
		}
		x := load{k, off}
		if off <= 0 || len(top) == n && !less(top[n-1], x) {
			continue
		}
		j := sort.Search(len(top), func(j int) bool { return less(top[j], x) })
		top = slices.Insert(top, j, x)
		if len(top) > n {
			top = top[:n]
		}
	}
	out := make([]string, len(top))
	for j, x := range top {
		out[j] = l.alloc.tenants[x.k].name
	}
	return out
}

// SetBudgets sets the tenants that have budgets of their own (records and
// policy entries); every other tenant the leader knows has the default tier
// (SetDefault) while pods report its traffic. The leader keeps budgets:
// the caller must not modify it afterwards. Call it when budgets change,
// not every rebalance: it walks every entry.
//
// Every tenant whose budget changed (or was added or removed) is due for a
// rebalance of its own (see FlushSteps), so that a change between two
// rebalances takes effect as soon as the coordinator flushes.
func (l *Leader) SetBudgets(budgets map[string]Budget) {
	if l.budgets != nil {
		for t, b := range budgets {
			if old, ok := l.budgets[t]; !ok || !budgetEqual(&old, &b) {
				l.stepDue[t] = time.Time{}
			}
		}
		for t := range l.budgets {
			if _, ok := budgets[t]; !ok {
				l.stepDue[t] = time.Time{}
			}
		}
	}
	l.budgets = budgets
	l.alloc.setBudgets(budgets)
}

// Budget returns the budget tenant is rebalanced under: its own, or the
// default tier; false when it has neither.
func (l *Leader) Budget(tenant string) (Budget, bool) {
	if b, ok := l.budgets[tenant]; ok {
		return b, true
	}
	if d := l.defaultFor(tenant); d != nil {
		return *d, true
	}
	return Budget{}, false
}

// Rebalance folds the reports received since the last call and, once the
// learning period is over, rebalances every tenant: those with budgets of
// their own, and the others under the default tier. Those others are
// forgotten once idle for IdleTimeout, or at once when there is no default
// tier (see docs/protocol.md, rule 7): their grants shrink to the cold
// floor, tombstones drop them, and their slots are freed. It returns the
// grants that changed; they reach pods in the answers to their reports.
func (l *Leader) Rebalance(now time.Time) []Change {
	l.raiseCold(now)
	l.fold(now)
	var idle func(k int) bool
	if l.cfg.IdleTimeout > 0 {
		cut := now.Add(-l.cfg.IdleTimeout)
		idle = func(k int) bool { return l.alloc.tenants[k].usedAt.Before(cut) }
	}
	if l.Learning(now) {
		// Nothing is granted, but budget changes are noted: a floor one
		// lowers counts for a while in the first grants (see note).
		l.alloc.noteAll(now, l.deflts, idle)
		return nil
	}
	if !l.rebalanced && l.stats.EarlyEnd > 0 {
		// The term's first grants, after learning ended early: its demand
		// estimates have the history of a few reports only, so each
		// region's demand is what its pods report now, and no grow is
		// slewed (as on a step).
		for i := range l.regs {
			reg := &l.regs[i]
			for _, k := range reg.ratesIDs {
				u := reg.rates[k]
				l.alloc.setDemand(int(k), i, max(u.Offered, u.Admitted))
			}
		}
		l.alloc.noSlew = true
	}
	l.legacyClosed = false
	changes := l.alloc.rebalance(now, l.deflts, idle, true)
	l.alloc.noSlew = false
	l.record(changes)
	clear(l.stepDue) // (rebalanced with the rest)
	for j, t := range l.alloc.freed {
		k := l.alloc.freedIdx[j]
		for i := range l.regs {
			reg := &l.regs[i]
			delete(reg.current, t)
			if int(k) < len(reg.rates) {
				reg.rates[k] = Usage{}
			}
		}
		l.stats.Forgotten++
	}
	l.rebalanced = true
	return changes
}

// Growable reports whether Grow may write something now.
func (l *Leader) Growable() bool { return l.alloc.Growable() }

// Grow completes the grows acknowledgements have made room for since the
// last Rebalance (see Allocator.Grow).
func (l *Leader) Grow(now time.Time) []Change {
	if l.Learning(now) {
		return nil
	}
	changes := l.alloc.Grow(now)
	l.record(changes)
	return changes
}

// PodView is the leader's record of one pod, for status pages.
type PodView struct {
	Pod      string
	Acked    uint64
	Expires  time.Time
	LastSeen time.Time
	Live     int
}

// Pods returns the pods of region that may hold a lease at now.
func (l *Leader) Pods(region string, now time.Time) []PodView {
	i, ok := l.regIdx[region]
	if !ok {
		return nil
	}
	var out []PodView
	for id, p := range l.regs[i].pods {
		if now.Before(p.expires) {
			out = append(out, PodView{Pod: id, Acked: p.acked, Expires: p.expires, LastSeen: p.lastSeen, Live: p.live})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Pod < out[b].Pod })
	return out
}

// ReportChanges returns the grant changes the last Report made (rebalancing
// the tenants it marked as steps), valid until the next Report.
func (l *Leader) ReportChanges() []Change { return l.stepOut }

// Nudges returns the regions whose grants changed since the last call, in
// region order: a coordinator pushes the changes to their pods (Push; see
// docs/protocol.md, "Push") rather than leave them for their next reports.
func (l *Leader) Nudges() []string {
	var out []string
	for i := range l.regs {
		if l.regs[i].dirty {
			l.regs[i].dirty = false
			out = append(out, l.regs[i].name)
		}
	}
	return out
}

// Epoch returns the last epoch issued to region.
func (l *Leader) Epoch(region string) uint64 {
	if i, ok := l.regIdx[region]; ok {
		return l.alloc.regs[i].epoch
	}
	return 0
}
