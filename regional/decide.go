package regional

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/keys"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/policy"
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
}

// item is one limit of a request, ready for the store.
type item struct {
	l   *policy.ResolvedLimit
	req gcra.Request
	// fallback is the local (T, B) when the store is unavailable.
	fallback gcra.Limit
}

// plan is a request split by how its limits are decided.
type plan struct {
	enforced []item // one composite call
	shadow   []item // decided on their own, never enforced
	leased   []item // from local leases, after the composite
	budget   bool   // a limit spends the tenant's budget (count for reports)
	// deny is set when a limit can never admit this request here (a zero
	// grant, a cost above this region's share of the burst).
	deny *item
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
	if err := policy.ValidTenant(t); err != nil {
		return badRequest("descriptors.tenant: %v", err)
	}
	return nil
}

// Decide decides one request: every matching limit of the tenant's policy,
// enforced ones all or nothing in one store round trip.
func (s *Service) Decide(ctx context.Context, d map[string]string, cost int64) (Decision, error) {
	if err := checkRequest(d, cost); err != nil {
		return Decision{}, err
	}
	tenant := d["tenant"]
	te := s.view.tenant(tenant)
	if te == nil {
		return Decision{}, ErrNotReady
	}
	p, err := s.plan(te, d, cost)
	if err != nil {
		return Decision{}, err
	}
	dec := s.decide(ctx, p)
	if p.budget {
		s.counts.add(tenant, cost, dec.Allowed)
	}
	result := "allowed"
	if !dec.Allowed {
		result = "denied"
	}
	s.m.decisions.WithLabelValues(dec.Limit, s.cfg.Region, result).Inc()
	return dec, nil
}

// plan resolves the request's limits into store requests.
func (s *Service) plan(te *tenantEntry, d map[string]string, cost int64) (plan, error) {
	var p plan
	now := s.cfg.Now()
	pods := s.livePods()
	for i := range te.resolved.Limits {
		l := &te.resolved.Limits[i]
		if !l.Matches(d) {
			continue
		}
		it := item{l: l}
		ds := make([]keys.Descriptor, 0, len(l.Descriptors))
		for _, k := range l.Descriptors {
			if k != "tenant" {
				ds = append(ds, keys.Descriptor{Name: k, Value: d[k]})
			}
		}
		key, err := keys.Key(te.resolved.Tenant, l.Name, ds...)
		if err != nil {
			return plan{}, badRequest("descriptors: %v", err)
		}
		var lim gcra.Limit
		if l.FromBudget {
			p.budget = true
			if cost > l.Burst {
				return plan{}, badRequest("cost: %d exceeds the burst %d of limit %q and can never be admitted", cost, l.Burst, l.Name)
			}
			rate, burst, _ := s.view.effective(now, te.resolved.Tenant, te.budget)
			if rate <= 0 || burst < cost {
				// This region may admit nothing of it now (a pinned tenant's
				// other region, or a burst share below the cost).
				it.req = gcra.Request{Key: key, Cost: cost}
				if p.deny == nil {
					p.deny = &it
				}
				continue
			}
			if lim, err = gcra.FromPerSecond(rate, burst); err != nil {
				return plan{}, fmt.Errorf("limit %q: grant %v/s burst %d: %w", l.Name, rate, burst, err)
			}
		} else {
			if lim, err = gcra.NewLimit(l.Rate, l.Burst); err != nil {
				return plan{}, fmt.Errorf("limit %q: %w", l.Name, err)
			}
			if cost > lim.Burst {
				return plan{}, badRequest("cost: %d exceeds the burst %d of limit %q and can never be admitted", cost, lim.Burst, l.Name)
			}
		}
		it.req = gcra.Request{Key: key, Limit: lim, Cost: cost}
		it.fallback = fallbackLimit(l, lim, pods, cost)
		switch {
		case l.Shadow:
			p.shadow = append(p.shadow, it)
		case l.Lease > 0:
			p.leased = append(p.leased, it)
		default:
			p.enforced = append(p.enforced, it)
		}
	}
	return p, nil
}

// fallbackLimit is what one pod admits for a limit while the store is
// unavailable: the policy's fallback rate, or the limit's (T, B) divided
// among the region's live pods.
func fallbackLimit(l *policy.ResolvedLimit, lim gcra.Limit, pods int, cost int64) gcra.Limit {
	if l.FallbackRate.Count > 0 {
		if f, err := gcra.NewLimit(l.FallbackRate, max(lim.Burst/int64(pods), cost, 1)); err == nil {
			return f
		}
	}
	rate := lim.PerSecond() / float64(pods)
	burst := max(lim.Burst/int64(pods), cost, 1)
	if f, err := gcra.FromPerSecond(math.Max(rate, 1e-6), burst); err == nil {
		return f
	}
	return lim
}

func quota(l *policy.ResolvedLimit) (int64, time.Duration) { return l.Rate.Count, l.Rate.Period }

// decide runs a plan.
func (s *Service) decide(ctx context.Context, p plan) Decision {
	if p.deny != nil {
		q, w := quota(p.deny.l)
		return Decision{Limit: p.deny.l.Name, RetryAfter: time.Second, Quota: q, Window: w}
	}
	dec := Decision{Allowed: true}
	if len(p.enforced)+len(p.shadow) > 0 {
		batch := make([][]gcra.Request, 0, 1+len(p.shadow))
		if len(p.enforced) > 0 {
			reqs := make([]gcra.Request, len(p.enforced))
			for i, it := range p.enforced {
				reqs[i] = it.req
			}
			batch = append(batch, reqs)
		}
		for _, it := range p.shadow {
			batch = append(batch, []gcra.Request{it.req})
		}
		answers, reason := s.callStore(ctx, batch)
		if reason != "" {
			return s.fallbackDecide(ctx, p, reason)
		}
		if len(p.enforced) > 0 {
			a := answers[0]
			answers = answers[1:]
			dec = fromStore(a.Decision, p.enforced)
		}
		for i, a := range answers {
			if a.Err == nil && !a.Allowed {
				dec.Shadow = true
				s.m.decisions.WithLabelValues(p.shadow[i].l.Name, s.cfg.Region, "shadow_denied").Inc()
			}
		}
	}
	if !dec.Allowed {
		return dec
	}
	for _, it := range p.leased {
		var d gcra.Decision
		l, err := s.leaser(it.l.Lease)
		if err == nil {
			d, err = l.Decide(ctx, []gcra.Request{it.req})
		}
		if err != nil {
			reason := failureReason(err)
			fd := s.fallbackDecide(ctx, plan{enforced: []item{it}}, reason)
			if !fd.Allowed {
				return fd
			}
			continue
		}
		if !d.Allowed || dec.Limit == "" || d.Remaining < dec.Remaining {
			ld := fromStore(d, []item{it})
			ld.Shadow = dec.Shadow
			dec = ld
			if !d.Allowed {
				return dec
			}
		}
	}
	return dec
}

func fromStore(d gcra.Decision, items []item) Decision {
	l := items[d.Limiting].l
	q, w := quota(l)
	return Decision{
		Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter,
		Limit: l.Name, Quota: q, Window: w,
	}
}

// callStore makes one round trip through the breaker and the timeout. It
// returns the answers, or the reason it failed.
func (s *Service) callStore(ctx context.Context, batch [][]gcra.Request) ([]gcra.Answer, string) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	start := time.Now()
	answers, err := s.breaker.Execute(func() ([]gcra.Answer, error) {
		if bs, ok := s.cfg.Store.(gcra.BatchStore); ok && len(batch) > 1 {
			out := bs.DecideMany(cctx, batch)
			return out, out[0].Err
		}
		out := make([]gcra.Answer, len(batch))
		for i, reqs := range batch {
			d, err := s.cfg.Store.Decide(cctx, reqs)
			out[i] = gcra.Answer{Decision: d, Err: err}
			if i == 0 && err != nil {
				return out, err
			}
		}
		return out, nil
	})
	el := time.Since(start).Seconds()
	if err != nil {
		reason := failureReason(err)
		s.m.storeDuration.WithLabelValues("error").Observe(el)
		s.m.storeErrors.WithLabelValues(reason).Inc()
		return nil, reason
	}
	s.m.storeDuration.WithLabelValues("ok").Observe(el)
	return answers, ""
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
func (s *Service) fallbackDecide(ctx context.Context, p plan, reason string) Decision {
	for _, it := range p.enforced {
		if it.l.FailClosed {
			s.countFallback(it.l.Name, reason, "closed")
			q, w := quota(it.l)
			return Decision{Limit: it.l.Name, RetryAfter: time.Second, Fallback: true, Closed: true, Quota: q, Window: w}
		}
	}
	if len(p.enforced) == 0 {
		return Decision{Allowed: true, Fallback: true}
	}
	reqs := make([]gcra.Request, len(p.enforced))
	for i, it := range p.enforced {
		reqs[i] = gcra.Request{Key: it.req.Key, Limit: it.fallback, Cost: it.req.Cost}
		s.countFallback(it.l.Name, reason, "open")
	}
	d, err := s.local.Decide(ctx, reqs)
	if err != nil {
		// The local store cannot fail but on a malformed request; deny.
		s.log.Error("local fallback failed", "err", err)
		return Decision{Limit: p.enforced[0].l.Name, RetryAfter: time.Second, Fallback: true}
	}
	dec := fromStore(d, p.enforced)
	dec.Fallback = true
	return dec
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
