package regional

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/keys"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/policy"
	"github.com/allot-dev/allot/shares"
)

// Errors callers branch on.
var (
	// ErrBadRequest: the request is malformed; the message names the field.
	ErrBadRequest = errors.New("bad request")
	// ErrNotReady: the pod has not loaded a policy yet.
	ErrNotReady = errors.New("not ready: no policy loaded yet")
)

// Limits on descriptors.
const (
	maxDescriptors     = 16
	maxDescriptorValue = 1024
)

// Decision is the answer to one request.
type Decision struct {
	Allowed bool
	// Remaining whole units of the limiting limit (in this region).
	Remaining int64
	// RetryAfter is set when denied.
	RetryAfter time.Duration
	// ResetAfter is the wait until the limiting limit is fully rested.
	ResetAfter time.Duration
	// Limit names the limiting limit ("" when no limit matched).
	Limit string
	// Shadow: a shadow limit would have denied (the request is not denied
	// for it).
	Shadow bool
	// Fallback: decided without the store (Redis failed), by on_failure.
	Fallback bool
	// Closed: denied only because the store is unavailable and the limit
	// fails closed. The caller did not exceed its allowance: HTTP answers
	// 503, not 429.
	Closed bool
	// Quota per Window is the limiting limit's advertised policy (the global
	// budget for budget limits), for the RateLimit-Policy field.
	Quota  int64
	Window time.Duration
	// SettleToken settles a reserved decision with its actual cost
	// (Reserve, Settle); "" for Decide, and for a reserved decision that
	// cannot be settled.
	SettleToken string
}

// item is one limit of a request, ready for the store.
type item struct {
	l  *policy.ResolvedLimit
	lc *limitCache // the tenant's cache for l
	// req.Limit is the (T, B) enforced here; the local fallback derives its
	// own from it when the store is unavailable (fallbackLimit).
	req gcra.Request
}

// items is a short list of items: the first ones inline, so that a plan of
// the common one or two limits of each kind lives on the stack.
type items struct {
	n    int
	head [2]item
	tail []item
}

func (l *items) add(it item) {
	if l.n < len(l.head) {
		l.head[l.n] = it
	} else {
		l.tail = append(l.tail, it)
	}
	l.n++
}

func (l *items) at(i int) *item {
	if i < len(l.head) {
		return &l.head[i]
	}
	return &l.tail[i-len(l.head)]
}

// plan is a request split by how its limits are decided.
type plan struct {
	enforced items // one composite call
	shadow   items // decided on their own, never enforced
	leased   items // from local leases, after the composite
	budget   bool  // a limit spends one of the tenant's budgets (count for reports)
	// bids are the budgets' IDs (shares.BudgetID) the request spends,
	// each counted in reports: nbids of them, the first ones inline.
	bids  [2]string
	nbids int
	more  []string
	shard int // the tenant's coordinator shard (-1: not known yet)
	// deny is set when a limit can never admit this request here (a zero
	// grant, a cost above this region's share of the burst).
	deny    item
	denying bool
}

// addBudget records that the request spends the budget of ID id.
func (p *plan) addBudget(id string) {
	p.budget = true
	for i := range min(p.nbids, len(p.bids)) {
		if p.bids[i] == id {
			return
		}
	}
	if slices.Contains(p.more, id) {
		return
	}
	if p.nbids < len(p.bids) {
		p.bids[p.nbids] = id
	} else {
		p.more = append(p.more, id)
	}
	p.nbids++
}

// budgetIDs returns the IDs of every budget the request spends (a new
// slice: not for the decide path).
func (p *plan) budgetIDs() []string {
	out := make([]string, 0, p.nbids)
	out = append(out, p.bids[:min(p.nbids, len(p.bids))]...)
	return append(out, p.more...)
}

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// checkRequest validates descriptors and cost.
func checkRequest(d map[string]string, cost int64) error {
	if cost < 1 {
		return badRequest("cost: %d: want a whole number of units ≥ 1", cost)
	}
	if len(d) == 0 {
		return badRequest("descriptors: missing: want at least {\"tenant\": \"...\"}")
	}
	if len(d) > maxDescriptors {
		return badRequest("descriptors: %d entries, at most %d", len(d), maxDescriptors)
	}
	for k, v := range d {
		if k == "" || len(k) > 64 {
			return badRequest("descriptors: key %q: want 1 to 64 bytes", k)
		}
		if len(v) > maxDescriptorValue {
			return badRequest("descriptors.%s: %d bytes, at most %d", k, len(v), maxDescriptorValue)
		}
	}
	t, ok := d["tenant"]
	if !ok || t == "" {
		return badRequest("descriptors.tenant: missing: every request names its tenant")
	}
	if err := policy.ValidateTenant(t); err != nil {
		return badRequest("descriptors.tenant: %v", err)
	}
	return nil
}

// Decide decides one request: every matching limit of the tenant's policy,
// enforced ones all or nothing in one store round trip.
func (s *Service) Decide(ctx context.Context, d map[string]string, cost int64) (Decision, error) {
	return s.decideOne(ctx, d, cost, false)
}

// decideOne is Decide, and with reserve Reserve.
func (s *Service) decideOne(ctx context.Context, d map[string]string, cost int64, reserve bool) (Decision, error) {
	if err := checkRequest(d, cost); err != nil {
		return Decision{}, err
	}
	tenant := d["tenant"]
	te := s.view.tenant(tenant)
	if te == nil {
		return Decision{}, ErrNotReady
	}
	var p plan
	if err := s.plan(&p, te, d, cost); err != nil {
		return Decision{}, err
	}
	var dec Decision
	var lc *limitCache
	if reserve && !p.denying && p.enforced.n > 0 && p.leased.n == 0 && p.shadow.n == 0 && s.settler != nil {
		dec, lc = s.decideReserved(ctx, tenant, &p)
	} else {
		dec, lc = s.decide(ctx, &p)
	}
	s.record(tenant, &p, cost, dec, lc)
	return dec, nil
}

// record counts a decision: in the tenant's report counters when it spends
// the budget, and in the decisions metric.
func (s *Service) record(tenant string, p *plan, cost int64, dec Decision, lc *limitCache) {
	if p.budget {
		if c := s.countsOf(p.shard); c != nil {
			for i := range min(p.nbids, len(p.bids)) {
				c.add(p.bids[i], cost, dec.Allowed)
			}
			for _, id := range p.more {
				c.add(id, cost, dec.Allowed)
			}
		}
	}
	c := s.counters(lc, dec.Limit)
	if dec.Allowed {
		c.allowed.Inc()
	} else {
		c.denied.Inc()
	}
}

// counters returns the decision counters of the limit lc caches (of name,
// when lc is nil).
func (s *Service) counters(lc *limitCache, name string) *limitCounters {
	if lc == nil {
		return s.m.forLimit(name)
	}
	if c := lc.counters.Load(); c != nil {
		return c
	}
	c := s.m.forLimit(name)
	lc.counters.Store(c)
	return c
}

// plan resolves the request's limits into store requests, in p.
func (s *Service) plan(p *plan, te *tenantEntry, d map[string]string, cost int64) error {
	p.shard = te.shard
	if te.resolved.UnknownDenied && !s.view.hasBudget(te.resolved.Tenant) {
		p.deny, p.denying = item{l: &unknownTenant}, true
		return nil
	}
	var now time.Time // read once, for the first budget limit
	for i := range te.resolved.Limits {
		l := &te.resolved.Limits[i]
		if !l.Matches(d) {
			continue
		}
		lc := &te.limits[i]
		it := item{l: l, lc: lc}
		key := lc.key
		if key == "" {
			var buf [4]keys.Descriptor
			ds := buf[:0]
			for _, k := range l.Descriptors {
				if k != "tenant" {
					ds = append(ds, keys.Descriptor{Name: k, Value: d[k]})
				}
			}
			var err error
			if key, err = keys.Key(te.resolved.Tenant, l.Name, ds...); err != nil {
				return badRequest("descriptors: %v", err)
			}
		}
		var lim gcra.Limit
		if l.Global {
			if cost > l.Burst {
				return badRequest("cost: %d exceeds the burst %d of limit %q and can never be admitted", cost, l.Burst, l.Name)
			}
			if now.IsZero() {
				now = s.cfg.Now()
			}
			var rate float64
			var burst int64
			var cold bool
			id := lc.share
			if l.FromBudget {
				rate, burst, _, cold = s.view.effective(now, te, lc)
			} else {
				// One key's share of a global limit of its own rate.
				id = keyShareID(te.resolved.Tenant, l, d)
				rate, burst, _, cold = s.view.effectiveKey(now, te, id, lc)
			}
			p.addBudget(id)
			if cold && !l.Shadow && s.restater != nil {
				// Restated under the budget's grant when it arrives.
				s.view.cold.remember(now, id, te.shard, coldKey{key: key, te: te, lc: lc, keyShare: !l.FromBudget})
			}
			// The region's share (grant or floor) is slower than the budget
			// and may rest longer than gcra's window: Fit lowers its burst
			// to fit, admitting less, never more, than the share.
			var ok bool
			if lim, ok = gcra.Fit(rate, burst); !ok || lim.Burst < cost {
				// This region may admit nothing of it now (a pinned tenant's
				// other region, a burst share below the cost, or a share
				// below one unit per gcra.MaxWindow).
				it.req = gcra.Request{Key: key, Cost: cost}
				if !p.denying {
					p.deny, p.denying = it, true
				}
				continue
			}
		} else {
			if lc.limErr != nil {
				return fmt.Errorf("limit %q: %w", l.Name, lc.limErr)
			}
			lim = lc.lim
			if cost > lim.Burst {
				return badRequest("cost: %d exceeds the burst %d of limit %q and can never be admitted", cost, lim.Burst, l.Name)
			}
		}
		it.req = gcra.Request{Key: key, Limit: lim, Cost: cost}
		switch {
		case l.Shadow:
			p.shadow.add(it)
		case l.Lease > 0:
			p.leased.add(it)
		default:
			p.enforced.add(it)
		}
	}
	return nil
}

// keyShareID is the share ID of the key d names of global limit l.
func keyShareID(tenant string, l *policy.ResolvedLimit, d map[string]string) string {
	var buf [4]string
	vals := buf[:0]
	for _, k := range l.Descriptors {
		if k != "tenant" {
			vals = append(vals, d[k])
		}
	}
	return shares.KeyBudgetID(tenant, l.Name, vals...)
}

// fallbackLimit is what one pod admits for a limit while the store is
// unavailable: 1/share of the limit's (T, B) — for a budget limit share is
// the leader's fail-open share, for others the larger of the gossip and the
// leader's pod counts — or the policy's fallback rate when it is lower.
// ok is false when the pod may admit nothing (a share of the burst below
// the cost, or no share).
func fallbackLimit(l *policy.ResolvedLimit, lim gcra.Limit, share int, cost int64) (gcra.Limit, bool) {
	if share <= 0 {
		return gcra.Limit{}, false
	}
	rate := lim.PerSecond() / float64(share)
	burst := lim.Burst / int64(share)
	if l.FallbackRate.Count > 0 {
		rate = min(rate, float64(l.FallbackRate.Count)/l.FallbackRate.Period.Seconds())
	}
	if burst < cost || burst < 1 || !(rate > 0) {
		return gcra.Limit{}, false
	}
	f, ok := gcra.Fit(rate, burst)
	return f, ok
}

func quota(l *policy.ResolvedLimit) (int64, time.Duration) { return l.Rate.Count, l.Rate.Period }

// decide runs a plan. It returns the decision and the cache of its
// limiting limit (nil when no limit decided it). Leased limits are
// reserved from the pod's leases first and the rest decided after, so that
// a decision any limit denies charges none (see decideLeased).
func (s *Service) decide(ctx context.Context, p *plan) (Decision, *limitCache) {
	if p.denying {
		q, w := quota(p.deny.l)
		return Decision{Limit: p.deny.l.Name, RetryAfter: time.Second, Quota: q, Window: w}, p.deny.lc
	}
	s.unleased(p)
	if p.leased.n > 0 {
		return s.decideLeased(ctx, p)
	}
	return s.decideStore(ctx, p)
}

// decideStore decides p's enforced limits all or nothing in one round trip,
// its shadow limits beside them, or by on_failure when the store fails. It
// admits when p has no enforced limit.
func (s *Service) decideStore(ctx context.Context, p *plan) (Decision, *limitCache) {
	switch {
	case p.shadow.n > 0:
		dec, lc, _ := s.decideWithShadow(ctx, p)
		return dec, lc
	case p.enforced.n > 0:
		d, reason := s.callStore(ctx, &p.enforced)
		if reason != "" {
			return s.fallbackDecide(ctx, p.shard, &p.enforced, reason)
		}
		return fromStore(d, p.enforced.at(d.Limiting))
	}
	return Decision{Allowed: true}, nil
}

// decideLeased decides a plan with leased limits: it reserves their units
// from the pod's leases, then decides the other limits, then commits the
// reservations when everything admitted and cancels them otherwise (the
// units go back to the leases). So a leased limit that denies charges
// nothing in the store (the store is not asked), and a store that denies
// consumes nothing of the leases: I3 for the whole decision.
func (s *Service) decideLeased(ctx context.Context, p *plan) (Decision, *limitCache) {
	var h leaseHold
	if dec, lc, done := s.reserveLeased(ctx, p, &h); done {
		return dec, lc
	}
	dec, lc := s.decideRest(ctx, p, &h)
	return s.finishLeased(ctx, p, &h, dec, lc)
}

// decideWithShadow runs the enforced limits and the shadow ones in one
// round trip (a pipeline when the store batches). ok is false when the
// answer is final (the store failed: a fallback decision).
func (s *Service) decideWithShadow(ctx context.Context, p *plan) (Decision, *limitCache, bool) {
	batch := make([][]gcra.Request, 0, 1+p.shadow.n)
	if p.enforced.n > 0 {
		batch = append(batch, requests(&p.enforced))
	}
	for i := range p.shadow.n {
		batch = append(batch, []gcra.Request{p.shadow.at(i).req})
	}
	answers, reason := s.callStoreBatch(ctx, batch)
	if reason == "" && p.enforced.n > 0 && answers[0].Err != nil {
		reason = failureReason(answers[0].Err)
	}
	if reason != "" {
		dec, lc := s.fallbackDecide(ctx, p.shard, &p.enforced, reason)
		return dec, lc, false
	}
	dec, lc := Decision{Allowed: true}, (*limitCache)(nil)
	if p.enforced.n > 0 {
		dec, lc = fromStore(answers[0].Decision, p.enforced.at(answers[0].Limiting))
		answers = answers[1:]
	}
	for i, a := range answers {
		if a.Err == nil && !a.Allowed {
			dec.Shadow = true
			it := p.shadow.at(i)
			s.counters(it.lc, it.l.Name).shadowDenied.Inc()
		}
	}
	return dec, lc, true
}

// requests returns the store requests of its, in a new slice: the store
// may keep it after a call that ended early (a pipeline still in flight).
func requests(its *items) []gcra.Request {
	reqs := make([]gcra.Request, its.n)
	for i := range reqs {
		reqs[i] = its.at(i).req
	}
	return reqs
}

// fromStore is the store's decision d, whose limiting limit is it.
func fromStore(d gcra.Decision, it *item) (Decision, *limitCache) {
	q, w := quota(it.l)
	return Decision{
		Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter,
		Limit: it.l.Name, Quota: q, Window: w,
	}, it.lc
}

// storeCall is one call to the store through the breaker: the common one
// or two requests and the answer live in it, so that a call allocates it
// and the closure the breaker runs, and nothing else. It is not reused:
// a store may keep the requests after a call that ended early.
type storeCall struct {
	buf [2]gcra.Request
	d   gcra.Decision
}

// requests returns its's store requests, in c when they fit.
func (c *storeCall) requests(its *items) []gcra.Request {
	if its.n > len(c.buf) {
		return requests(its)
	}
	reqs := c.buf[:its.n]
	for i := range reqs {
		reqs[i] = its.at(i).req
	}
	return reqs
}

// callStore decides its all or nothing in one round trip through the
// breaker and the timeout. It returns the store's decision, or the reason
// it failed.
func (s *Service) callStore(ctx context.Context, its *items) (gcra.Decision, string) {
	c := &storeCall{}
	if err := s.execStore(ctx, c, c.requests(its)); err != nil {
		return gcra.Decision{}, failureReason(err)
	}
	return c.d, ""
}

// guardedStore is the region's store behind the pod's protections (the
// breaker, the store timeout, the store metrics): the store the lease
// limiter takes its leases from.
type guardedStore struct{ s *Service }

func (g guardedStore) Decide(ctx context.Context, reqs []gcra.Request) (gcra.Decision, error) {
	c := &storeCall{}
	err := g.s.execStore(ctx, c, reqs)
	return c.d, err
}

// execStore decides reqs all or nothing in one round trip through the
// breaker, under the store timeout, observed in the store metrics; the
// decision lands in c.d.
func (s *Service) execStore(ctx context.Context, c *storeCall, reqs []gcra.Request) error {
	start := time.Now()
	cctx, cancel := context.WithDeadline(ctx, start.Add(s.cfg.StoreTimeout))
	defer cancel()
	_, err := s.breaker.Execute(func() ([]gcra.Answer, error) {
		var err error
		c.d, err = s.cfg.Store.Decide(cctx, reqs)
		return nil, err
	})
	s.observeStore(start, err)
	return err
}

// guarded runs fn, one store call other than a decision (a check, a
// charge, a restate), as execStore runs decisions: through the breaker
// (which then fails it at once while open), under the store timeout,
// observed in the store metrics.
func (s *Service) guarded(ctx context.Context, fn func(ctx context.Context) error) error {
	start := time.Now()
	cctx, cancel := context.WithDeadline(ctx, start.Add(s.cfg.StoreTimeout))
	defer cancel()
	_, err := s.breaker.Execute(func() ([]gcra.Answer, error) { return nil, fn(cctx) })
	s.observeStore(start, err)
	return err
}

// observeStore records a store call that started at start and ended with
// err, and returns the reason it failed ("" if it did not).
func (s *Service) observeStore(start time.Time, err error) string {
	el := time.Since(start).Seconds()
	if err != nil {
		reason := failureReason(err)
		s.m.storeError.Observe(el)
		s.m.storeErrors.WithLabelValues(reason).Inc()
		return reason
	}
	s.m.storeOK.Observe(el)
	return ""
}

// failureReason classifies a store failure for metrics and logs.
func failureReason(err error) string {
	switch {
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		return "breaker_open"
	case errors.Is(err, redisstore.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, redisstore.ErrUnavailable):
		return "unavailable"
	}
	return "error"
}

// isStoreFailure says which errors open the breaker: failures of the store,
// not requests the store rejected as malformed.
func isStoreFailure(err error) bool {
	if err == nil {
		return false
	}
	var ie *gcra.ItemError
	return !errors.As(err, &ie) && !errors.Is(err, gcra.ErrNoRequests) && !errors.Is(err, context.Canceled)
}

// fallbackDecide decides without the store, limit by limit as on_failure
// says: a closed limit denies; open limits are decided together on the local
// in-memory store at their fallback rates.
func (s *Service) fallbackDecide(ctx context.Context, shard int, enforced *items, reason string) (Decision, *limitCache) {
	for i := range enforced.n {
		it := enforced.at(i)
		if it.l.FailClosed {
			s.countFallback(it.l.Name, reason, "closed")
			q, w := quota(it.l)
			return Decision{Limit: it.l.Name, RetryAfter: time.Second, Fallback: true, Closed: true, Quota: q, Window: w}, it.lc
		}
	}
	if enforced.n == 0 {
		return Decision{Allowed: true, Fallback: true}, nil
	}
	pods := max(s.livePods(), s.view.leaderPods())
	budgetShare := s.view.failOpenShare(shard, s.cfg.Now())
	reqs := make([]gcra.Request, enforced.n)
	for i := range reqs {
		it := enforced.at(i)
		share := pods
		if it.l.Global {
			share = budgetShare // (a budget's, or a key's share of a global limit)
		}
		lim, ok := fallbackLimit(it.l, it.req.Limit, share, it.req.Cost)
		if !ok {
			// No fail-open share of the budget (no lease, or one not yet
			// handed out), or a share of the burst below the cost: deny,
			// counted under reason no_share.
			s.countFallback(it.l.Name, "no_share", "closed")
			q, w := quota(it.l)
			return Decision{Limit: it.l.Name, RetryAfter: time.Second, Fallback: true, Closed: true, Quota: q, Window: w}, it.lc
		}
		reqs[i] = gcra.Request{Key: it.req.Key, Limit: lim, Cost: it.req.Cost}
	}
	for i := range reqs {
		s.countFallback(enforced.at(i).l.Name, reason, "open")
	}
	d, err := s.local.Decide(ctx, reqs)
	if err != nil {
		// The local store cannot fail but on a malformed request; deny.
		s.log.Error("local fallback failed", "err", err)
		first := enforced.at(0)
		return Decision{Limit: first.l.Name, RetryAfter: time.Second, Fallback: true}, first.lc
	}
	dec, lc := fromStore(d, enforced.at(d.Limiting))
	dec.Fallback = true
	return dec, lc
}

// countFallback counts a fallback decision and logs it at a bounded rate.
func (s *Service) countFallback(limit, reason, mode string) {
	s.m.fallback.WithLabelValues(limit, s.cfg.Region, reason).Inc()
	now := time.Now()
	s.failMu.Lock()
	last := s.failLogged[limit]
	log := now.Sub(last) >= s.cfg.FailLogEvery
	if log {
		s.failLogged[limit] = now
	}
	s.failMu.Unlock()
	if log {
		s.log.Warn("deciding without the store", "limit", limit, "reason", reason, "on_failure", mode,
			"note", "further fallback decisions for this limit are counted in allot_fallback_decisions_total, not logged, for "+s.cfg.FailLogEvery.String())
	}
}
