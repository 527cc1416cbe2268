package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/policy"
	"github.com/allot-dev/allot/shares"
)

// ErrNoPolicy: the leader cannot take reports or rebalance before a policy
// (which names the regions) has been applied.
var ErrNoPolicy = state.ErrNoPolicy

// ErrBadReport: a report names an unknown region or carries invalid counts.
var ErrBadReport = errors.New("bad report")

// NotLeaderError is returned to a pod that reported to a follower.
type NotLeaderError struct {
	// Leader is the leader's gRPC address, or "" while there is none.
	Leader string
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "not the leader, and no leader is known yet"
	}
	return "not the leader; the leader is " + e.Leader
}

// LeaderInfo is what a leader publishes in the election.
type LeaderInfo = state.Leader

// PodReport is one regional pod's report.
type PodReport struct {
	Region   string
	Pod      string
	Interval time.Duration
	Applied  uint64
	Usage    map[string]shares.Usage
	LivePods int
}

// Coordinator is one coordinator instance: a candidate, and while elected
// the leader.
type Coordinator struct {
	cfg   Config
	store *state.Store
	log   *slog.Logger
	m     *metrics

	// ticks makes the rebalance ticker; tests replace it to drive
	// rebalances one by one.
	ticks func(time.Duration) (<-chan time.Time, func())

	mu         sync.Mutex
	term       *term // non-nil while leading
	leader     LeaderInfo
	lastRun    time.Time
	lastDur    time.Duration
	lastWrites int
	hist       *history // the status page's chart

	budgetCache *budgetCache // the budget records, mirrored from etcd by Run
}

// podState is the leader's view of one pod.
type podState struct {
	applied  uint64
	expires  time.Time // leader clock: answer time + lease
	lastSeen time.Time
	live     int
}

// window accumulates one region's usage between rebalances.
type window struct {
	start time.Time
	usage map[string]shares.Usage
	any   bool
}

// term is the state of one leadership term.
type term struct {
	fence   clientv3.Cmp
	alloc   *shares.Allocator
	regions []string
	policyV int64
	doc     *policy.Document
	pods    map[string]map[string]*podState
	windows map[string]*window
	tenants map[string]struct{}
	// grow asks the leader loop for an early grow pass: a report
	// acknowledged a shrink that a deferred grow waits for. Buffered (1);
	// senders never block.
	grow chan struct{}
}

// New validates cfg and returns a Coordinator. Call Run to take part.
func New(cfg Config) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.ID = "coordinator-" + hex.EncodeToString(b[:])
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	store := state.New(cfg.Etcd, cfg.Prefix)
	return &Coordinator{
		ticks: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		},
		cfg:         cfg,
		store:       store,
		log:         cfg.Logger.With("component", "coordinator", "id", cfg.ID),
		hist:        newHistory(),
		m:           m,
		budgetCache: newBudgetCache(store),
	}, nil
}

// Store returns the state store the coordinator uses.
func (c *Coordinator) Store() *state.Store { return c.store }

// ID returns the instance's ID.
func (c *Coordinator) ID() string { return c.cfg.ID }

// IsLeader reports whether this instance leads now.
func (c *Coordinator) IsLeader() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term != nil
}

// Leader returns the leader as last observed ("" fields while unknown).
func (c *Coordinator) Leader() LeaderInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// Run campaigns for leadership and leads when elected, until ctx ends. On
// return it has resigned (when it led) and stopped every goroutine it
// started.
func (c *Coordinator) Run(ctx context.Context) error {
	// Mirror the budget records for the whole run, leading or not, so a new
	// leader's first rebalance already has them.
	mctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		_ = state.Mirror(mctx, c.cfg.Etcd, c.store.BudgetsPrefix(), c.budgetCache, time.Second, func(err error) {
			c.log.Warn("budget mirror: resyncing", "err", err)
		})
	})
	for {
		err := c.campaign(ctx)
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("left the election; campaigning again", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (c *Coordinator) campaign(ctx context.Context) error {
	sess, err := concurrency.NewSession(c.cfg.Etcd,
		concurrency.WithTTL(int(c.cfg.SessionTTL/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("etcd session: %w", err)
	}
	defer func() { _ = sess.Close() }()
	el := concurrency.NewElection(sess, c.store.ElectionPrefix())

	// Campaign and observe only while the session lives.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		select {
		case <-sess.Done():
			cancel()
		case <-sctx.Done():
		}
	})
	wg.Go(func() { c.observe(sctx, el) })

	val, _ := json.Marshal(LeaderInfo{ID: c.cfg.ID, GRPC: c.cfg.GRPCAddr, HTTP: c.cfg.HTTPAddr})
	if err := el.Campaign(sctx, string(val)); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	return c.lead(ctx, sctx, sess, el)
}

// observe keeps c.leader current until ctx (the session) ends.
// Election.Observe closes its channel without saying why when its read or
// watch fails (etcd compacted past the watch's revision, a request failed):
// the leader seen last may then be gone, so a follower forgets it (pods
// asking get "no leader known" and look the leader up in etcd rather than a
// stale address) and observes again after a short backoff, which grows
// while observing keeps failing at once.
func (c *Coordinator) observe(ctx context.Context, el *concurrency.Election) {
	const minBackoff, maxBackoff = 100 * time.Millisecond, 2 * time.Second
	backoff := minBackoff
	for {
		seen := false
		for r := range el.Observe(ctx) {
			var li LeaderInfo
			if len(r.Kvs) > 0 && json.Unmarshal(r.Kvs[0].Value, &li) == nil {
				seen = true
				c.mu.Lock()
				c.leader = li
				c.mu.Unlock()
			}
		}
		if ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		stale := c.leader
		if c.term == nil { // a leader names itself
			c.leader = LeaderInfo{}
		}
		c.mu.Unlock()
		if seen {
			backoff = minBackoff
		}
		c.log.Warn("election observer ended; forgot the leader and observing again", "last_leader", stale.ID, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (c *Coordinator) lead(ctx, sctx context.Context, sess *concurrency.Session, el *concurrency.Election) error {
	t := &term{
		fence:   clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev()),
		pods:    map[string]map[string]*podState{},
		windows: map[string]*window{},
		tenants: map[string]struct{}{},
		grow:    make(chan struct{}, 1),
	}
	c.mu.Lock()
	c.term = t
	c.leader = LeaderInfo{ID: c.cfg.ID, GRPC: c.cfg.GRPCAddr, HTTP: c.cfg.HTTPAddr}
	c.mu.Unlock()
	c.m.leader.Set(1)
	c.m.terms.Inc()
	c.log.Info("elected leader")
	defer func() {
		c.mu.Lock()
		c.term = nil
		c.mu.Unlock()
		c.m.leader.Set(0)
		if ctx.Err() != nil && sess != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := el.Resign(rctx); err != nil {
				c.log.Warn("resign", "err", err)
			} else {
				c.log.Info("resigned leadership")
			}
			cancel()
		}
	}()
	tick, stop := c.ticks(c.cfg.RebalanceInterval)
	defer stop()
	for {
		if err := c.rebalance(sctx, t); err != nil {
			if errors.Is(err, state.ErrFenced) || sctx.Err() != nil {
				c.log.Warn("deposed", "err", err)
				return err
			}
			if errors.Is(err, errStepDown) {
				return err
			}
			c.log.Warn("rebalance", "err", err)
		}
		// Between ticks, write the grows that acknowledgements unblock
		// as they arrive. This loop stays the only writer.
		for ticked := false; !ticked; {
			select {
			case <-sctx.Done():
				return sctx.Err()
			case <-tick:
				ticked = true
			case <-t.grow:
				// Any error here is a failed or fenced write: step down.
				if err := c.growEarly(sctx, t); err != nil {
					c.log.Warn("early grow", "err", err)
					return err
				}
			}
		}
	}
}

// growEarly writes, between two rebalances, the grows the allocator
// deferred and that acknowledgements received since have made room for
// (shares.Allocator.Grow), fenced like every other write.
func (c *Coordinator) growEarly(ctx context.Context, t *term) error {
	c.mu.Lock()
	if t.alloc == nil {
		c.mu.Unlock()
		return nil
	}
	changes := t.alloc.Grow(c.cfg.Now())
	c.mu.Unlock()
	if len(changes) == 0 {
		return nil
	}
	written, err := c.store.WriteGrants(ctx, t.fence, changes)
	c.m.grantWrites.Add(float64(written))
	if err != nil {
		if errors.Is(err, state.ErrFenced) {
			return err
		}
		c.log.Error("early grow write failed", "written", written, "of", len(changes), "err", err)
		return fmt.Errorf("%w: %w", errStepDown, err)
	}
	c.m.earlyGrows.Inc()
	return nil
}

// errStepDown ends a term whose grant write failed part-way: the next leader
// (possibly this instance again) resumes from what etcd really holds.
var errStepDown = errors.New("grant write failed; stepping down to resume from etcd")

// rebalance runs one rebalance of term t.
func (c *Coordinator) rebalance(ctx context.Context, t *term) error {
	start := time.Now()
	if err := c.refreshPolicy(ctx, t); err != nil {
		return err
	}
	if t.alloc == nil {
		return nil
	}
	records, ok := c.budgetCache.snapshot()
	if !ok {
		var err error
		if records, _, err = c.store.Budgets(ctx); err != nil {
			return err
		}
	}

	c.mu.Lock()
	now := c.cfg.Now()
	c.fold(t, now)
	budgets := c.budgets(t, records)
	changes := t.alloc.Rebalance(now, budgets)
	c.hist.commit(now, t.alloc, budgets)
	c.mu.Unlock()

	written, err := c.store.WriteGrants(ctx, t.fence, changes)
	c.m.grantWrites.Add(float64(written))
	if err != nil {
		if errors.Is(err, state.ErrFenced) {
			return err
		}
		c.log.Error("grant write failed", "written", written, "of", len(changes), "err", err)
		return fmt.Errorf("%w: %w", errStepDown, err)
	}
	d := time.Since(start)
	c.m.rebalanceDuration.Observe(d.Seconds())
	c.m.rebalances.Inc()
	c.m.tenants.Set(float64(len(budgets)))
	c.mu.Lock()
	c.lastRun, c.lastDur, c.lastWrites = now, d, written
	c.mu.Unlock()
	return nil
}

// refreshPolicy loads the policy when it changed, and (re)builds the
// allocator when the region set changed, resuming from etcd's grants.
func (c *Coordinator) refreshPolicy(ctx context.Context, t *term) error {
	pv, doc, err := c.store.Policy(ctx)
	if errors.Is(err, state.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if pv.Version == t.policyV {
		return nil
	}
	if t.alloc != nil && slices.Equal(doc.Regions, t.regions) {
		c.mu.Lock()
		t.policyV, t.doc = pv.Version, doc
		c.mu.Unlock()
		return nil
	}
	cfg := c.cfg.Shares
	cfg.Regions = slices.Clone(doc.Regions)
	cfg.Interval = c.cfg.RebalanceInterval
	cfg.Lease = c.cfg.Lease
	alloc, err := shares.NewAllocator(cfg)
	if err != nil {
		return fmt.Errorf("allocator: %w", err)
	}
	grants, _, err := c.store.Grants(ctx, "")
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	alloc.Restore(c.cfg.Now(), grants)
	for _, g := range grants {
		t.tenants[g.Tenant] = struct{}{}
	}
	t.alloc, t.regions, t.policyV, t.doc = alloc, cfg.Regions, pv.Version, doc
	c.log.Info("allocator ready", "regions", cfg.Regions, "policy_version", pv.Version, "restored_grants", len(grants))
	return nil
}

// fold feeds each region's accumulated pod usage to the allocator. c.mu held.
func (c *Coordinator) fold(t *term, now time.Time) {
	for _, region := range t.regions {
		w := t.windows[region]
		if w == nil || !w.any {
			continue
		}
		applied := uint64(math.MaxUint64)
		for id, p := range t.pods[region] {
			if !now.Before(p.expires) {
				delete(t.pods[region], id) // its lease surely lapsed
				continue
			}
			applied = min(applied, p.applied)
		}
		if applied == math.MaxUint64 {
			applied = 0
		}
		interval := now.Sub(w.start)
		if interval <= 0 {
			interval = time.Millisecond
		}
		c.hist.observe(t.regions, region, w.usage, interval)
		if _, err := t.alloc.Report(now, shares.Report{Region: region, Interval: interval, Applied: applied, Usage: w.usage}); err != nil {
			c.log.Warn("fold report", "region", region, "err", err)
		}
		t.windows[region] = &window{start: now, usage: map[string]shares.Usage{}}
	}
}

// budgets returns the effective budget of every tenant the leader knows.
// c.mu held.
func (c *Coordinator) budgets(t *term, records []state.BudgetRecord) map[string]shares.Budget {
	over := make(map[string]*policy.Budget, len(records))
	for i := range records {
		over[records[i].Tenant] = &records[i].Budget
		t.tenants[records[i].Tenant] = struct{}{}
	}
	for id := range t.doc.Tenants {
		t.tenants[id] = struct{}{}
	}
	out := make(map[string]shares.Budget, len(t.tenants))
	for id := range t.tenants {
		out[id] = t.doc.TenantBudget(id, over[id]).Shares()
	}
	return out
}

// Report takes one pod's report. The leader answers with a renewal; a
// follower with a *NotLeaderError naming the leader.
func (c *Coordinator) Report(_ context.Context, r PodReport) (shares.Renewal, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.term
	if t == nil {
		c.m.reports.WithLabelValues(r.Region, "not_leader").Inc()
		return shares.Renewal{}, &NotLeaderError{Leader: c.leader.GRPC}
	}
	if t.alloc == nil {
		c.m.reports.WithLabelValues(r.Region, "no_policy").Inc()
		return shares.Renewal{}, ErrNoPolicy
	}
	if !slices.Contains(t.regions, r.Region) {
		c.m.reports.WithLabelValues("unknown", "rejected").Inc()
		return shares.Renewal{}, fmt.Errorf("%w: region %q is not in the policy (regions: %v)", ErrBadReport, r.Region, t.regions)
	}
	if r.Pod == "" {
		return shares.Renewal{}, fmt.Errorf("%w: pod: missing", ErrBadReport)
	}
	for tenant, u := range r.Usage {
		if !(u.Offered >= 0) || !(u.Admitted >= 0) || math.IsInf(u.Offered, 0) || math.IsInf(u.Admitted, 0) {
			c.m.reports.WithLabelValues(r.Region, "rejected").Inc()
			return shares.Renewal{}, fmt.Errorf("%w: usage of %q: offered %v, admitted %v: want finite and ≥ 0", ErrBadReport, tenant, u.Offered, u.Admitted)
		}
	}
	now := c.cfg.Now()
	pods := t.pods[r.Region]
	if pods == nil {
		pods = map[string]*podState{}
		t.pods[r.Region] = pods
	}
	pods[r.Pod] = &podState{applied: r.Applied, expires: now.Add(c.cfg.Lease), lastSeen: now, live: r.LivePods}
	// The region has applied what every one of its live pods has: tell the
	// allocator now (its usage waits for the next fold), and wake the
	// leader loop when that unblocks a deferred grow.
	applied := uint64(math.MaxUint64)
	for _, p := range pods {
		if now.Before(p.expires) {
			applied = min(applied, p.applied)
		}
	}
	if ok, err := t.alloc.Ack(r.Region, applied); err == nil && ok {
		select {
		case t.grow <- struct{}{}:
		default:
		}
	}
	w := t.windows[r.Region]
	if w == nil {
		w = &window{start: now.Add(-r.Interval), usage: map[string]shares.Usage{}}
		t.windows[r.Region] = w
	}
	w.any = true
	for tenant, u := range r.Usage {
		acc := w.usage[tenant]
		acc.Offered += u.Offered
		acc.Admitted += u.Admitted
		w.usage[tenant] = acc
		t.tenants[tenant] = struct{}{}
	}
	c.m.reports.WithLabelValues(r.Region, "accepted").Inc()
	return shares.Renewal{Lease: c.cfg.Lease, MinEpoch: t.alloc.MinEpoch(r.Region)}, nil
}
