package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/allot-dev/allot/coordinator/statuspage"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/policy"
	"github.com/allot-dev/allot/shares"
)

// ErrNoPolicy: the leader cannot take reports or rebalance before a policy
// (which names the regions) has been applied.
var ErrNoPolicy = state.ErrNoPolicy

// ErrBadReport: a report names an unknown region or carries invalid counts.
var ErrBadReport = errors.New("bad report")

// ErrUnavailable: the leader cannot take the report now (it could not put
// the pod on the roster in etcd); the pod retries.
var ErrUnavailable = errors.New("unavailable")

// rosterTimeout bounds one roster write.
const rosterTimeout = 2 * time.Second

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
type PodReport = shares.PodReport

// ReportAnswer is the leader's answer to a pod: its lease and grants, or
// that its region left the policy.
type ReportAnswer struct {
	shares.Answer
	// RegionRemoved: the pod's region is not in the policy.
	RegionRemoved bool
	// Coordinators are the gRPC addresses of every election candidate.
	Coordinators []string
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
	// page is the status page (statuspage.Page): each rebalance hands it a
	// snapshot, which it takes in after c.mu is released.
	page statusPage

	// budgetCache and policy hold the budget records and the current
	// policy, mirrored from etcd by Run (budgetMirror, policyMirror):
	// the leader reads them instead of etcd.
	budgetCache  *budgetCache
	policy       *policyCache
	budgetMirror *state.BudgetMirror
	policyMirror *state.PolicyMirror
	capLogged    time.Time

	// fenceUntil: this coordinator answers no report from then on unless
	// a keepalive of its election session extends it (see keepFence).
	fenceUntil time.Time

	// shards is the cluster's shard count, read from etcd when Run
	// starts (0 before): this coordinator leads the tenants of shard
	// cfg.Shard among them.
	shards atomic.Int32

	// watchers are the pods watching their region's grants (Watch), by
	// region and pod: each is signalled when the region's grants change.
	watchers map[string]map[string]chan struct{}
}

// term is the state of one leadership: the election it won, and the
// protocol term it runs (a new one whenever the region set changes).
type term struct {
	rev     int64 // the election key's revision: terms of later leaders are larger
	sub     uint64
	first   bool // no leader recorded a term before this one
	lead    *shares.Leader
	regions []string
	policyV int64
	// policyRev is the etcd revision of the policy record doc came from
	// (0: none yet); written by the leader loop only, under c.mu.
	policyRev int64
	doc       *policy.Document
	// budgetsGen and budgetsLead: the budget cache's generation and the
	// policy version of the budgets lead was last given (gen 0: read
	// from etcd, so given again each rebalance).
	budgetsGen  uint64
	budgetsPV   int64
	budgetsLead *shares.Leader
	dropped     int64    // lead's DroppedTenants already counted
	forgotten   int64    // and its Forgotten
	peers       []string // candidates' gRPC addresses
	// grow asks the leader loop for an early grow pass: a report
	// acknowledged a shrink that a deferred grow waits for; steps, to
	// look again at when deferred steps are due; due, for a rebalance now
	// (shares.Leader.RebalanceDue). Buffered (1); senders never block.
	grow, steps, due chan struct{}
	// fence guards this leadership's writes (its election key).
	fence clientv3.Cmp
	// roster: the pods on the roster as this leadership knows it (read
	// when elected, plus its writes since; see docs/protocol.md, rule 4);
	// rosterKnown: the read succeeded, so a new protocol term may end its
	// learning early. rosterMu orders roster writes (adds and drops).
	roster      map[shares.PodKey]bool
	rosterKnown bool
	rosterMu    sync.Mutex
	learnedSet  bool // learnedSeconds set for the current protocol term
	// learnTimer signals due when learning, ended early by the roster
	// but not before Deposed after the term started, is over.
	learnTimer *time.Timer
}

// termID is the protocol term of t's current shares.Leader: the election
// revision in the high bits, so that every later leader's terms are larger.
func (t *term) termID() uint64 { return uint64(t.rev)<<20 | t.sub }

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
	reg := cfg.Registerer
	if reg != nil {
		// Every coordinator metric names its shard: alerts and panels
		// ask for one leader per shard.
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"shard": strconv.Itoa(cfg.Shard)}, reg)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	store := state.New(cfg.Etcd, cfg.Prefix).Shard(cfg.Shard)
	c := &Coordinator{
		ticks: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		},
		cfg:         cfg,
		store:       store,
		log:         cfg.Logger.With("component", "coordinator", "id", cfg.ID),
		m:           m,
		budgetCache: newBudgetCache(),
		policy:      newPolicyCache(),
	}
	if err := c.mirrors(); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	c.page = statuspage.New(pageSource{c}, c.log)
	return c, nil
}

// mirrors sets up the mirrors of the budget records and the policy. A record
// that fails to decode is logged and counted in
// allot_state_decode_errors_total{kind}, registered without the shard
// label (policy and budgets are every shard's, and a regional service of
// the same process shares the counter); the leader keeps the last good
// policy.
func (c *Coordinator) mirrors() error {
	mcfg := func(what string) state.MirrorConfig {
		m := state.DefaultMirrorConfig()
		m.Registerer = c.cfg.Registerer
		m.OnResync = func(err error) { c.log.Warn(what+" mirror: resyncing", "err", err) }
		m.OnDecodeError = func(e *state.DecodeError) {
			c.log.Warn("etcd record does not decode: ignored", "kind", e.Kind, "key", e.Key, "revision", e.Rev, "err", e.Err)
		}
		return m
	}
	var err error
	if c.budgetMirror, err = state.NewBudgetMirror(c.store, c.budgetCache, mcfg("budget")); err != nil {
		return err
	}
	c.policyMirror, err = state.NewPolicyMirror(c.store, c.policy, mcfg("policy"))
	return err
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
	if err := c.readShards(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// Mirror the budget records and the policy for the whole run, leading
	// or not, so a new leader's first rebalance already has them.
	mctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { _ = c.budgetMirror.Run(mctx) })
	wg.Go(func() { _ = c.policyMirror.Run(mctx) })
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

// readShards reads the cluster's shard count (recording cfg.Shards on a new
// cluster), retrying while etcd is out of reach; an instance whose shard
// count or index does not fit the cluster's gets an error.
func (c *Coordinator) readShards(ctx context.Context) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := c.store.InitShards(rctx, c.cfg.Shards)
		cancel()
		switch {
		case errors.Is(err, state.ErrShardsFixed):
			return fmt.Errorf("coordinator: %w", err)
		case err == nil && c.cfg.Shard >= n:
			return fmt.Errorf("coordinator: shard %d: this cluster has %d shard(s), numbered 0 to %d; start this instance with --shard below %d", c.cfg.Shard, n, n-1, n)
		case err == nil:
			c.shards.Store(int32(n))
			c.m.shard.Set(float64(n))
			c.log.Info("coordinator shard", "shard", c.cfg.Shard, "shards", n)
			return nil
		}
		c.log.Warn("reading the shard count from etcd; retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Shards returns the cluster's shard count (0 before Run read it) and the
// shard this coordinator runs.
func (c *Coordinator) Shards() (shards, shard int) { return int(c.shards.Load()), c.cfg.Shard }

// owns reports whether tenant belongs to this coordinator's shard.
func (c *Coordinator) owns(tenant string) bool {
	n := int(c.shards.Load())
	return n <= 1 || shares.ShardOf(tenant, n) == c.cfg.Shard
}

// ownUsage drops from r the usage of tenants of other shards (a pod that
// places tenants differently), counting them.
func (c *Coordinator) ownUsage(r *PodReport) {
	if c.shards.Load() <= 1 {
		return
	}
	var other int
	for t := range r.Usage {
		if !c.owns(t) {
			other++
		}
	}
	if other == 0 {
		return
	}
	own := make(map[string]shares.Usage, len(r.Usage)-other)
	for t, u := range r.Usage {
		if c.owns(t) {
			own[t] = u
		}
	}
	r.Usage = own
	c.m.otherShard.Add(float64(other))
}

func (c *Coordinator) campaign(ctx context.Context) error {
	// The session's lease is granted after this: it expires on etcd no
	// sooner than a TTL from now.
	granted := time.Now()
	sess, err := concurrency.NewSession(c.cfg.Etcd,
		concurrency.WithTTL(int(c.cfg.SessionTTL/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("etcd session: %w", err)
	}
	defer func() { _ = sess.Close() }()
	el := concurrency.NewElection(sess, c.store.ElectionPrefix())
	c.extendFence(granted, c.cfg.SessionTTL)

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
	wg.Go(func() { c.keepFence(sctx, sess.Lease(), cancel) })

	val, _ := json.Marshal(LeaderInfo{ID: c.cfg.ID, GRPC: c.cfg.GRPCAddr, HTTP: c.cfg.HTTPAddr, Shard: c.cfg.Shard})
	if err := el.Campaign(sctx, string(val)); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	return c.lead(ctx, sctx, sess, el)
}

// fenceMargin is what a fence keeps from the session's expiry on etcd, for
// clock rates: a tenth of the TTL, at least 100 ms.
func fenceMargin(ttl time.Duration) time.Duration { return max(100*time.Millisecond, ttl/10) }

// deposedBound is how long after a term starts its leaders assume an older
// leader may still answer pods (shares.LeaderConfig.Deposed). The fence
// makes it zero; twice the fence margin more covers a fence that errs by as
// much (an etcd server that revokes a lease early, clock rates) at little
// cost: renewals need a pod's lease to outlast it.
func deposedBound(ttl time.Duration) time.Duration { return 2 * fenceMargin(ttl) }

// keepFence renews the election session's lease itself every third of the
// TTL, until ctx ends, and moves the fence to a margin before the expiry
// each renewal guarantees: etcd expires the lease a TTL after it took the
// renewal, which is after this coordinator sent it. So a leader answers no
// report once etcd may have expired its session and another coordinator may
// lead: a deposed leader never acts after its successor's term started, and
// the successor may renew what pods hold almost at once (deposedBound). The
// session's own keepalives continue beside these. When the fence lapses
// while the session still lives (etcd answers the session's keepalives but
// not these in time), lapsed is called: the coordinator leaves the election
// rather than lead without answering.
func (c *Coordinator) keepFence(ctx context.Context, id clientv3.LeaseID, lapsed func()) {
	every := c.cfg.SessionTTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		kctx, cancel := context.WithTimeout(ctx, every)
		resp, err := c.cfg.Etcd.KeepAliveOnce(kctx, id)
		cancel()
		if err == nil && resp.TTL > 0 {
			c.extendFence(sent, time.Duration(resp.TTL)*time.Second)
			continue
		}
		c.log.Debug("session keepalive for the fence failed", "err", err)
		c.mu.Lock()
		gone := c.term != nil && !time.Now().Before(c.fenceUntil)
		c.mu.Unlock()
		if gone {
			c.log.Warn("fence lapsed: etcd may have expired this leader's session; leaving the election", "err", err)
			lapsed()
			return
		}
	}
}

// extendFence moves the fence to a margin before sent + ttl, if later.
func (c *Coordinator) extendFence(sent time.Time, ttl time.Duration) {
	until := sent.Add(ttl - fenceMargin(ttl))
	c.mu.Lock()
	if until.After(c.fenceUntil) {
		c.fenceUntil = until
	}
	c.mu.Unlock()
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
		rev:    el.Rev(),
		grow:   make(chan struct{}, 1),
		steps:  make(chan struct{}, 1),
		due:    make(chan struct{}, 1),
		roster: map[shares.PodKey]bool{},
	}
	// Record the term; the very first leader of a cluster need not learn.
	fence := clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())
	t.fence = fence
	for {
		first, err := c.store.ClaimTerm(sctx, fence, t.termID()+1)
		if err == nil {
			t.first = first
			break
		}
		if errors.Is(err, state.ErrFenced) || sctx.Err() != nil {
			return err
		}
		c.log.Warn("record term", "err", err)
		select {
		case <-sctx.Done():
			return sctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Read the roster: every pod an older leader may have leased is on it
	// (a leader adds a pod before it leases it, under its fence, and every
	// older fence is gone now). Without it the term learns for the whole
	// lease and session TTL.
	c.readRoster(sctx, t)
	c.mu.Lock()
	c.term = t
	c.leader = LeaderInfo{ID: c.cfg.ID, GRPC: c.cfg.GRPCAddr, HTTP: c.cfg.HTTPAddr, Shard: c.cfg.Shard}
	c.mu.Unlock()
	c.m.leader.Set(1)
	c.m.terms.Inc()
	c.log.Info("elected leader")
	defer func() {
		c.mu.Lock()
		c.term = nil
		c.closeWatchers()
		if t.learnTimer != nil {
			t.learnTimer.Stop()
		}
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
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()
	// Budget records reach the leader as they change (at most every
	// budgetsEvery), not only with the next rebalance: a tenant's first
	// step is then rebalanced under its own budget.
	budgets := time.NewTimer(time.Hour)
	budgets.Stop()
	defer budgets.Stop()
	var budgetsAt time.Time
	// A new policy is rebalanced as it arrives (at most every
	// budgetsEvery), not only at the next tick: the mirror may deliver it
	// just after a tick read the one before.
	policies := time.NewTimer(time.Hour)
	policies.Stop()
	defer policies.Stop()
	var policiesAt time.Time
	for {
		if err := c.rebalance(sctx, t); err != nil {
			if sctx.Err() != nil {
				c.log.Warn("deposed", "err", err)
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
			case <-t.due:
				ticked = true // (the roster ended learning early, or older grants stopped counting)
			case <-t.grow:
				c.growEarly(t)
			case <-t.steps:
				c.armFlush(t, flush)
			case <-flush.C:
				c.flushSteps(t)
				c.armFlush(t, flush)
			case <-c.budgetCache.changed:
				budgets.Reset(max(0, budgetsEvery-time.Since(budgetsAt)))
			case <-budgets.C:
				budgetsAt = time.Now()
				c.handBudgets(t)
			case <-c.policy.changed:
				policies.Reset(max(0, budgetsEvery-time.Since(policiesAt)))
			case <-policies.C:
				policiesAt = time.Now()
				_, _, rev := c.policy.current()
				ticked = rev != t.policyRev // (else the last rebalance had it)
			}
		}
	}
}

// budgetsEvery bounds how often budget changes are handed to the leader
// between rebalances (each hand-over walks every tenant), and how often a
// policy change starts a rebalance.
const budgetsEvery = 100 * time.Millisecond

// handBudgets hands the mirrored budget records to the leader when they
// changed since it last got them.
func (c *Coordinator) handBudgets(t *term) {
	records, gen, ok := c.budgetCache.snapshot()
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.lead == nil || t.doc == nil || (gen == t.budgetsGen && t.policyV == t.budgetsPV && t.lead == t.budgetsLead) {
		return
	}
	t.lead.SetBudgets(c.budgets(t, records))
	t.budgetsGen, t.budgetsPV, t.budgetsLead = gen, t.policyV, t.lead
	// The tenants whose budgets changed are rebalanced at once.
	select {
	case t.steps <- struct{}{}:
	default:
	}
}

// armFlush sets flush to fire when the earliest step a hold deferred is due
// (shares.Leader.StepsDue).
func (c *Coordinator) armFlush(t *term, flush *time.Timer) {
	c.mu.Lock()
	var due time.Time
	var any bool
	if t.lead != nil {
		due, any = t.lead.StepsDue()
	}
	now := c.cfg.Now()
	c.mu.Unlock()
	if !any {
		return
	}
	flush.Reset(max(due.Sub(now), 0))
}

// flushSteps rebalances the tenants whose steps a hold deferred and pushes
// what changed.
func (c *Coordinator) flushSteps(t *term) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.lead == nil {
		return
	}
	if changes := t.lead.FlushSteps(c.cfg.Now()); len(changes) > 0 {
		c.m.grantWrites.Add(float64(len(changes)))
		c.m.stepChanges.Add(float64(len(changes)))
	}
	c.nudge(t, "")
}

// nudge signals the watchers of every region whose grants changed, but not
// pod except (whose answer carries the changes). c.mu held.
func (c *Coordinator) nudge(t *term, except string) {
	for _, region := range t.lead.Nudges() {
		for pod, ch := range c.watchers[region] {
			if pod == except {
				continue
			}
			select {
			case ch <- struct{}{}:
			default: // one is pending: the push reads the latest
			}
		}
	}
}

// closeWatchers ends every watch (leadership ended). c.mu held.
func (c *Coordinator) closeWatchers() {
	for _, pods := range c.watchers {
		for _, ch := range pods {
			close(ch)
		}
	}
	c.watchers = nil
}

// Watch registers pod of region for pushes of its region's grants: the
// channel is signalled when they change (and once at once), and closed when
// this coordinator stops leading; cancel ends the watch. A follower answers
// with a *NotLeaderError.
func (c *Coordinator) Watch(region, pod string) (signals <-chan struct{}, cancel func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.term
	switch {
	case t == nil:
		return nil, nil, &NotLeaderError{Leader: c.leader.GRPC}
	case !time.Now().Before(c.fenceUntil):
		return nil, nil, &NotLeaderError{}
	case !slices.Contains(t.regions, region):
		return nil, nil, fmt.Errorf("%w: region %q is not in the policy", ErrBadReport, region)
	case pod == "" || len(pod) > 253:
		return nil, nil, fmt.Errorf("%w: pod: %q: want a name of 1 to 253 bytes", ErrBadReport, pod)
	}
	if c.watchers == nil {
		c.watchers = map[string]map[string]chan struct{}{}
	}
	pods := c.watchers[region]
	if pods == nil {
		pods = map[string]chan struct{}{}
		c.watchers[region] = pods
	}
	if old, ok := pods[pod]; ok {
		close(old) // one watch per pod: the newer wins
	} else if len(pods) >= maxWatchersPerRegion {
		return nil, nil, fmt.Errorf("%w: region %q already has %d watchers", shares.ErrTooManyPods, region, maxWatchersPerRegion)
	}
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	pods[pod] = ch
	c.m.watchers.Inc()
	return ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.m.watchers.Dec()
		if c.watchers[region][pod] == ch {
			delete(c.watchers[region], pod)
		}
	}, nil
}

// LeaderBudget returns the budget this coordinator's leader rebalances
// tenant under (its own, or the default tier), or false when it does not
// lead or knows none.
func (c *Coordinator) LeaderBudget(tenant string) (shares.Budget, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term == nil || c.term.lead == nil {
		return shares.Budget{}, false
	}
	return c.term.lead.Budget(tenant)
}

// maxWatchersPerRegion bounds the watches of one region (as the leader
// bounds its leased pods).
const maxWatchersPerRegion = 256

// Push returns what changed in the grants of pod's region since the epoch
// it last reported, as a push (shares.Leader.Push): ok is false when there
// is nothing to push. A follower, or a fenced leader, answers with a
// *NotLeaderError.
func (c *Coordinator) Push(region, pod string) (ans shares.Answer, ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.term
	switch {
	case t == nil:
		return shares.Answer{}, false, &NotLeaderError{Leader: c.leader.GRPC}
	case !time.Now().Before(c.fenceUntil):
		return shares.Answer{}, false, &NotLeaderError{}
	case t.lead == nil:
		return shares.Answer{}, false, nil
	}
	ans, ok = t.lead.Push(c.cfg.Now(), region, pod)
	if ok {
		c.m.pushes.Inc()
		c.m.answerGrants.Add(float64(len(ans.Entries)))
	}
	return ans, ok, nil
}

// growEarly completes, between two rebalances, the grows the allocator
// deferred and that acknowledgements received since have made room for
// (shares.Leader.Grow). They reach pods in the answers to their reports.
func (c *Coordinator) growEarly(t *term) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.lead == nil {
		return
	}
	if changes := t.lead.Grow(c.cfg.Now()); len(changes) > 0 {
		c.m.grantWrites.Add(float64(len(changes)))
		c.m.earlyGrows.Inc()
	}
	c.nudge(t, "")
}

// rebalance runs one rebalance of term t.
func (c *Coordinator) rebalance(ctx context.Context, t *term) error {
	start := time.Now()
	if err := c.refreshPolicy(t); err != nil {
		return err
	}
	if t.lead == nil {
		return nil
	}
	records, gen, ok := c.budgetCache.snapshot()
	if !ok {
		var err error
		if records, _, err = c.store.Budgets(ctx); err != nil {
			return err
		}
	}
	peers := c.peers(ctx)
	wanted := c.page.Wanted()

	c.mu.Lock()
	now := c.cfg.Now()
	if peers != nil {
		t.peers = peers
	}
	if gen == 0 || gen != t.budgetsGen || t.policyV != t.budgetsPV || t.lead != t.budgetsLead {
		// Only when they changed: at 100,000 tenants walking them costs
		// more than the rebalance.
		t.lead.SetBudgets(c.budgets(t, records))
		t.budgetsGen, t.budgetsPV, t.budgetsLead = gen, t.policyV, t.lead
	}
	changes := t.lead.Rebalance(now)
	c.nudge(t, "")
	if f := t.lead.Stats().Forgotten; f != t.forgotten {
		if f > t.forgotten {
			c.m.tenantsForgotten.Add(float64(f - t.forgotten))
		}
		t.forgotten = f // (a new protocol term counts from 0)
	}
	learning := t.lead.Learning(now)
	if !learning && !t.learnedSet {
		t.learnedSet = true
		c.m.learnedSeconds.Set(t.lead.LearningUntil().Sub(t.lead.Start()).Seconds())
	}
	prunable := c.prunable(t, now)
	snap := pageSnapshot(now, t.regions, learning, t.lead, wanted)
	tenants := t.lead.Tenants()
	c.mu.Unlock()

	c.page.Commit(snap)
	c.prune(ctx, t, prunable)
	d := time.Since(start)
	c.m.grantWrites.Add(float64(len(changes)))
	c.m.rebalanceDuration.Observe(d.Seconds())
	c.m.rebalances.Inc()
	c.m.tenants.Set(float64(tenants))
	if learning {
		c.m.learning.Set(1)
	} else {
		c.m.learning.Set(0)
	}
	c.mu.Lock()
	c.lastRun, c.lastDur, c.lastWrites = now, d, len(changes)
	c.mu.Unlock()
	return nil
}

// peers reads the gRPC addresses of every election candidate (nil when etcd
// does not answer).
func (c *Coordinator) peers(ctx context.Context) []string {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := c.cfg.Etcd.Get(rctx, c.store.ElectionPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil
	}
	out := []string{}
	for _, kv := range resp.Kvs {
		var li LeaderInfo
		if json.Unmarshal(kv.Value, &li) == nil && li.GRPC != "" && !slices.Contains(out, li.GRPC) {
			out = append(out, li.GRPC)
		}
	}
	return out
}

// refreshPolicy loads the policy when the mirror has a newer one than t's
// (none before it found one: the leader takes no reports until then); a
// change of the region set starts a new protocol term, which learns before
// it grants. Called by the leader loop only.
func (c *Coordinator) refreshPolicy(t *term) error {
	pv, doc, rev := c.policy.current()
	if rev == 0 || rev == t.policyRev {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.lead != nil && slices.Equal(doc.Regions, t.regions) {
		prev := t.doc
		t.policyV, t.policyRev, t.doc = pv.Version, rev, doc
		c.setDefaults(t.lead, doc, prev)
		return nil
	}
	// The learning period covers every lease an older term may have
	// granted: the lease itself, plus the session TTL for which a deposed
	// leader may not yet know it lost.
	cfg := shares.LeaderConfig{
		Config:      c.cfg.allocatorConfig(doc.Regions),
		Learning:    c.cfg.Lease + c.cfg.SessionTTL,
		Deposed:     deposedBound(c.cfg.SessionTTL),
		MaxTenants:  c.cfg.MaxTenants,
		IdleTimeout: c.cfg.TenantIdleTimeout,
		ValidTenant: policy.ValidateBudgetID,
		StepHold:    min(shares.DefaultStepHold, c.cfg.RebalanceInterval),
	}
	t.sub++
	cfg.First = t.first && t.sub == 1
	cfg.Term = t.termID()
	if t.rosterKnown {
		cfg.RosterKnown = true
		cfg.Roster = make([]shares.PodKey, 0, len(t.roster))
		for k := range t.roster {
			cfg.Roster = append(cfg.Roster, k)
		}
	}
	t.learnedSet = false
	if t.learnTimer != nil {
		t.learnTimer.Stop()
		t.learnTimer = nil
	}
	lead, err := shares.NewLeader(c.cfg.Now(), cfg)
	if err != nil {
		return fmt.Errorf("leader: %w", err)
	}
	c.setDefaults(lead, doc, nil)
	t.lead, t.regions, t.policyV, t.policyRev, t.doc = lead, cfg.Regions, pv.Version, rev, doc
	c.log.Info("protocol term started: learning before granting", "term", cfg.Term, "regions", cfg.Regions,
		"policy_version", pv.Version, "learning_until", lead.LearningUntil())
	return nil
}

// defaultBudget is the budget of a tenant with none of its own, or nil when
// the policy denies unknown tenants.
func (c *Coordinator) defaultBudget(doc *policy.Document) *shares.Budget {
	if doc.UnknownTenants == policy.UnknownDeny {
		return nil
	}
	b := doc.TenantBudget("", nil).Shares()
	return &b
}

// setDefaults gives lead doc's default budgets: the tenant budget's, each
// named budget's and each global keyed limit's (none for names prev had and
// doc has not).
func (c *Coordinator) setDefaults(lead *shares.Leader, doc, prev *policy.Document) {
	lead.SetDefault(c.defaultBudget(doc))
	names := doc.BudgetNames()
	if prev != nil {
		for _, n := range prev.BudgetNames() {
			if !slices.Contains(names, n) {
				lead.SetNamedDefault(n, nil)
			}
		}
	}
	for _, n := range names {
		lead.SetNamedDefault(n, c.namedDefault(doc, n))
	}
	// Every key of a global limit with a rate of its own is shared under
	// the limit's budget (class "LIMIT=").
	keyed := doc.KeyLimits()
	if prev != nil {
		for _, l := range prev.KeyLimits() {
			if !slices.ContainsFunc(keyed, func(k policy.ResolvedLimit) bool { return k.Name == l.Name }) {
				lead.SetNamedDefault(l.Name+"=", nil)
			}
		}
	}
	for i := range keyed {
		b := doc.KeyBudget(&keyed[i]).Shares()
		lead.SetNamedDefault(keyed[i].Name+"=", &b)
	}
}

// namedDefault is defaultBudget for the named budget name.
func (c *Coordinator) namedDefault(doc *policy.Document, name string) *shares.Budget {
	if doc.UnknownTenants == policy.UnknownDeny {
		return nil
	}
	rb, ok := doc.NamedBudget("", name, nil)
	if !ok {
		return nil
	}
	b := rb.Shares()
	return &b
}

// budgets returns the budgets of the tenants that have one of their own: a
// budget record or a policy entry (the tenant's budget and each named one,
// by shares.BudgetID). The leader gives every other tenant it
// knows the default tier, until the tenant is idle. c.mu held.
func (c *Coordinator) budgets(t *term, records []state.BudgetRecord) map[string]shares.Budget {
	over := make(map[string]*policy.Budget, len(records))
	for i := range records {
		over[records[i].Tenant] = &records[i].Budget
	}
	out := make(map[string]shares.Budget, len(records)+len(t.doc.Tenants))
	for id, b := range over {
		if !c.owns(id) {
			continue
		}
		tenant, name := shares.SplitBudgetID(id)
		if rb, ok := t.doc.NamedBudget(tenant, name, b); ok {
			out[id] = rb.Shares()
		}
	}
	names := t.doc.BudgetNames()
	for id := range t.doc.Tenants {
		if !c.owns(id) {
			continue
		}
		out[id] = t.doc.TenantBudget(id, over[id]).Shares()
		for _, n := range names {
			bid := shares.BudgetID(id, n)
			if rb, ok := t.doc.NamedBudget(id, n, over[bid]); ok {
				out[bid] = rb.Shares()
			}
		}
	}
	return out
}

// Report takes one pod's report. The leader answers with a renewal and the
// region's grants that changed since the epoch the pod applied; a follower
// with a *NotLeaderError naming the leader.
func (c *Coordinator) Report(_ context.Context, r PodReport) (ReportAnswer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.term
	if t == nil {
		c.m.reports.WithLabelValues(r.Region, "not_leader").Inc()
		return ReportAnswer{}, &NotLeaderError{Leader: c.leader.GRPC}
	}
	if !time.Now().Before(c.fenceUntil) {
		// etcd may have expired the session: another coordinator may
		// lead. The pod looks the leader up again.
		c.m.reports.WithLabelValues(r.Region, "fenced").Inc()
		return ReportAnswer{}, &NotLeaderError{}
	}
	if t.lead == nil {
		c.m.reports.WithLabelValues(r.Region, "no_policy").Inc()
		return ReportAnswer{}, ErrNoPolicy
	}
	c.ownUsage(&r)
	if !t.roster[shares.PodKey{Region: r.Region, Pod: r.Pod}] && t.lead.Admissible(c.cfg.Now(), r) == nil {
		// Put the pod on the roster before anything may lease it (a
		// report the leader would refuse writes nothing).
		if err := c.addToRoster(t, r.Region, r.Pod); err != nil {
			c.m.reports.WithLabelValues(r.Region, "roster_failed").Inc()
			return ReportAnswer{}, err
		}
		// The lock was released meanwhile: this coordinator may have
		// stopped leading, or passed its fence (the write's success says
		// only that the election key existed when it committed).
		if c.term != t || t.lead == nil || !time.Now().Before(c.fenceUntil) {
			c.m.reports.WithLabelValues(r.Region, "not_leader").Inc()
			return ReportAnswer{}, &NotLeaderError{}
		}
	}
	now := c.cfg.Now()
	ans, err := t.lead.Report(now, r)
	switch {
	case errors.Is(err, shares.ErrUnknownRegion):
		c.m.reports.WithLabelValues("unknown", "region_removed").Inc()
		return ReportAnswer{Answer: shares.Answer{Term: t.lead.Term()}, RegionRemoved: true, Coordinators: t.peers}, nil
	case err != nil:
		c.m.reports.WithLabelValues(r.Region, "rejected").Inc()
		return ReportAnswer{}, fmt.Errorf("%w: %w", ErrBadReport, err)
	}
	if d := t.lead.Stats().DroppedTenants; d > t.dropped {
		c.m.tenantsDropped.Add(float64(d - t.dropped))
		t.dropped = d
		c.logTenantCap()
	} else if d < t.dropped {
		t.dropped = d // a new protocol term
	}
	if ans.Learning {
		c.m.reports.WithLabelValues(r.Region, "learning").Inc()
		if ans.Lease > 0 {
			c.m.renewals.WithLabelValues(r.Region).Inc()
		}
	} else {
		c.m.reports.WithLabelValues(r.Region, "accepted").Inc()
	}
	c.m.answerGrants.Add(float64(len(ans.Entries)))
	if ch := t.lead.ReportChanges(); len(ch) > 0 {
		c.m.grantWrites.Add(float64(len(ch)))
		c.m.stepChanges.Add(float64(len(ch)))
	}
	c.nudge(t, r.Pod)
	if t.lead.Growable() {
		select {
		case t.grow <- struct{}{}:
		default:
		}
	}
	if _, any := t.lead.StepsDue(); any {
		select {
		case t.steps <- struct{}{}:
		default:
		}
	}
	if t.lead.RebalanceDue(now) {
		select {
		case t.due <- struct{}{}:
		default:
		}
	} else if until := t.lead.LearningUntil(); t.lead.Learning(now) && until.Sub(now) < c.cfg.RebalanceInterval && t.learnTimer == nil {
		// The roster ended learning, as of a moment before the next
		// tick: rebalance then.
		due := t.due
		t.learnTimer = time.AfterFunc(until.Sub(now), func() {
			select {
			case due <- struct{}{}:
			default:
			}
		})
	}
	return ReportAnswer{Answer: ans, Coordinators: t.peers}, nil
}

// logTenantCap logs, at most once a minute, that the tenant cap was hit.
// c.mu held.
func (c *Coordinator) logTenantCap() {
	if now := time.Now(); now.Sub(c.capLogged) >= time.Minute {
		c.capLogged = now
		c.log.Warn("tenant cap reached: further tenants are not tracked (they stay on cold floors)",
			"max_tenants", c.cfg.MaxTenants, "note", "counted in allot_coordinator_tenants_dropped_total; raise --max-tenants")
	}
}

// readRoster reads the roster into t (a few tries: without it the first
// protocol term learns for the whole lease and session TTL).
func (c *Coordinator) readRoster(ctx context.Context, t *term) {
	for try := range 3 {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		pods, err := c.store.Roster(rctx)
		cancel()
		if err == nil {
			for _, p := range pods {
				t.roster[shares.PodKey{Region: p.Region, Pod: p.Pod}] = true
			}
			t.rosterKnown = true
			c.m.rosterPods.Set(float64(len(t.roster)))
			return
		}
		c.log.Warn("read roster: a new term will learn for the whole lease and session TTL", "err", err, "try", try+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// addToRoster puts a pod on t's roster, in etcd under t's fence, then in
// t.roster. c.mu held; released meanwhile (t may have stopped leading when
// it returns).
func (c *Coordinator) addToRoster(t *term, region, pod string) error {
	c.mu.Unlock()
	defer c.mu.Lock()
	t.rosterMu.Lock()
	defer t.rosterMu.Unlock()
	k := shares.PodKey{Region: region, Pod: pod}
	c.mu.Lock()
	have := t.roster[k]
	c.mu.Unlock()
	if have {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), rosterTimeout)
	err := c.store.AddToRoster(ctx, t.fence, state.RosterPod{Region: region, Pod: pod})
	cancel()
	if err != nil {
		c.m.rosterWrites.WithLabelValues("add", "failed").Inc()
		c.log.Warn("cannot put a pod on the roster: its report is refused (it retries)", "region", region, "pod", pod, "err", err)
		return fmt.Errorf("%w: record the pod in the roster: %w", ErrUnavailable, err)
	}
	c.m.rosterWrites.WithLabelValues("add", "ok").Inc()
	c.mu.Lock()
	t.roster[k] = true
	c.m.rosterPods.Set(float64(len(t.roster)))
	c.mu.Unlock()
	return nil
}

// prunable lists the pods of t's roster whose leases surely ended
// (shares.Leader.Prunable). c.mu held.
func (c *Coordinator) prunable(t *term, now time.Time) []shares.PodKey {
	var out []shares.PodKey
	for k := range t.roster {
		if t.lead.Prunable(now, k.Region, k.Pod) {
			out = append(out, k)
		}
	}
	return out
}

// prune drops pods from t's roster: from t.roster first, under c.mu and
// only if still prunable (a report that comes meanwhile puts its pod back,
// through etcd, after the drop), then from etcd.
func (c *Coordinator) prune(ctx context.Context, t *term, cands []shares.PodKey) {
	if len(cands) == 0 {
		return
	}
	t.rosterMu.Lock()
	defer t.rosterMu.Unlock()
	c.mu.Lock()
	now := c.cfg.Now()
	var drop []state.RosterPod
	for _, k := range cands {
		if t.lead != nil && t.roster[k] && t.lead.Prunable(now, k.Region, k.Pod) {
			delete(t.roster, k)
			drop = append(drop, state.RosterPod{Region: k.Region, Pod: k.Pod})
		}
	}
	c.m.rosterPods.Set(float64(len(t.roster)))
	c.mu.Unlock()
	if len(drop) == 0 {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, rosterTimeout)
	err := c.store.DropFromRoster(dctx, t.fence, drop...)
	cancel()
	if err != nil {
		// Some may be gone from etcd and some not (a timeout after the
		// commit, or a later batch failed): none goes back into
		// t.roster, so that a report of any of them puts it on the
		// roster again before it is leased. One left in etcd only makes
		// a later leader wait for it, as for any pod that never reports,
		// until a leader drops it.
		c.m.rosterWrites.WithLabelValues("drop", "failed").Inc()
		c.log.Warn("drop pods from the roster", "pods", len(drop), "err", err)
		return
	}
	c.m.rosterWrites.WithLabelValues("drop", "ok").Inc()
}
