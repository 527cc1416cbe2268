package regional

import (
	"context"
	"time"

	"github.com/allot-dev/allot/gcra"
)

// Request is one request of a batch.
type Request struct {
	Descriptors map[string]string
	Cost        int64
}

// Result is the answer to one request of a batch: a decision, or the error
// Decide would have returned for it alone.
type Result struct {
	Decision Decision
	Err      error
}

// DecideMany decides independent requests as Decide decides each, in
// order, but with as few store round trips as order allows: the enforced
// limits of consecutive requests travel in one pipeline (one composite call
// per request, in request order). A request with a shadow limit, or one a
// limit denies outright, is decided on its own, after its tenant's earlier
// requests: one tenant's requests are decided in order. A request's leased
// limits are reserved before the pipeline, after its tenant's earlier
// requests, and settled after it, as Decide does. A store failure
// sends every request of the round trip to its limits' on_failure, as
// Decide would. results[i] answers reqs[i].
func (s *Service) DecideMany(ctx context.Context, reqs []Request) []Result {
	results := make([]Result, len(reqs))
	plans := make([]plan, len(reqs))
	b := batchRun{s: s, reqs: reqs, plans: plans, results: results}
	for i, r := range reqs {
		if err := checkRequest(r.Descriptors, r.Cost); err != nil {
			results[i].Err = err
			continue
		}
		tenant := r.Descriptors["tenant"]
		te := s.view.tenant(tenant)
		if te == nil {
			results[i].Err = ErrNotReady
			continue
		}
		p := &plans[i]
		if err := s.plan(p, te, r.Descriptors, r.Cost); err != nil {
			results[i].Err = err
			continue
		}
		s.unleased(p)
		if p.denying || p.shadow.n > 0 || p.enforced.n == 0 {
			// Decided on its own, now: after the tenant's earlier requests,
			// so those go first.
			if b.holds(tenant) {
				b.flush(ctx)
			}
			dec, lc := s.decide(ctx, p)
			s.record(tenant, p, r.Cost, dec, lc)
			results[i].Decision = dec
			continue
		}
		if p.leased.n > 0 {
			// Its leases are reserved now and settled after the round trip:
			// the tenant's earlier requests go first, so that the units they
			// give back are in the leases, as when decided one by one.
			if b.holds(tenant) {
				b.flush(ctx)
			}
			h := b.hold(i)
			dec, lc, done := s.reserveLeased(ctx, p, h)
			if !done && h.failed.n > 0 {
				// The store failed to lease: by on_failure, now.
				dec, lc = s.decideRest(ctx, p, h)
				dec, lc = s.finishLeased(ctx, p, h, dec, lc)
				done = true
			}
			if done {
				delete(b.leases, i)
				s.record(tenant, p, r.Cost, dec, lc)
				results[i].Decision = dec
				continue
			}
		}
		b.add(i, tenant)
	}
	b.flush(ctx)
	return results
}

// batchRun gathers the requests of a DecideMany that go to the store
// together, in request order.
type batchRun struct {
	s       *Service
	reqs    []Request
	plans   []plan
	results []Result

	batch   [][]gcra.Request
	owners  []int // batch[k] is reqs[owners[k]]'s
	tenants map[string]struct{}
	leases  map[int]*leaseHold // reqs[i]'s reserved leased limits
}

// hold returns a new leaseHold for reqs[i].
func (b *batchRun) hold(i int) *leaseHold {
	if b.leases == nil {
		b.leases = map[int]*leaseHold{}
	}
	h := &leaseHold{}
	b.leases[i] = h
	return h
}

func (b *batchRun) holds(tenant string) bool {
	_, ok := b.tenants[tenant]
	return ok
}

func (b *batchRun) add(i int, tenant string) {
	if b.tenants == nil {
		b.tenants = make(map[string]struct{}, len(b.reqs))
	}
	b.tenants[tenant] = struct{}{}
	b.batch = append(b.batch, requests(&b.plans[i].enforced))
	b.owners = append(b.owners, i)
}

// flush decides the gathered requests in one round trip, settles the
// leased limits reserved for them (committed when the request is admitted,
// given back otherwise), and records them.
func (b *batchRun) flush(ctx context.Context) {
	if len(b.batch) == 0 {
		return
	}
	s := b.s
	answers, reason := s.callStoreBatch(ctx, b.batch)
	for k, i := range b.owners {
		p := &b.plans[i]
		var dec Decision
		var lc *limitCache
		switch {
		case reason != "":
			dec, lc = s.fallbackDecide(ctx, p.shard, &p.enforced, reason)
		case answers[k].Err != nil:
			dec, lc = s.fallbackDecide(ctx, p.shard, &p.enforced, failureReason(answers[k].Err))
		default:
			a := answers[k].Decision
			dec, lc = fromStore(a, p.enforced.at(a.Limiting))
		}
		if h := b.leases[i]; h != nil {
			dec, lc = s.finishLeased(ctx, p, h, dec, lc)
			delete(b.leases, i)
		}
		s.record(b.reqs[i].Descriptors["tenant"], p, b.reqs[i].Cost, dec, lc)
		b.results[i].Decision = dec
	}
	b.batch, b.owners = b.batch[:0], b.owners[:0]
	clear(b.tenants)
}

// callStoreBatch decides each element of batch all or nothing, in one
// round trip through the breaker and the timeout (one pipeline when the
// store batches). It returns one answer per element, or the reason the
// whole round trip failed; an element's own failure is in its answer. The
// breaker counts the round trip once.
func (s *Service) callStoreBatch(ctx context.Context, batch [][]gcra.Request) ([]gcra.Answer, string) {
	start := time.Now()
	cctx, cancel := context.WithDeadline(ctx, start.Add(s.cfg.StoreTimeout))
	defer cancel()
	answers, err := s.breaker.Execute(func() ([]gcra.Answer, error) {
		var out []gcra.Answer
		if bs, ok := s.cfg.Store.(gcra.BatchStore); ok && len(batch) > 1 {
			out = bs.DecideMany(cctx, batch)
		} else {
			out = make([]gcra.Answer, len(batch))
			for i, reqs := range batch {
				out[i].Decision, out[i].Err = s.cfg.Store.Decide(cctx, reqs)
			}
		}
		for _, a := range out {
			if isStoreFailure(a.Err) {
				return out, a.Err
			}
		}
		return out, nil
	})
	if reason := s.observeStore(start, err); reason != "" {
		if answers == nil { // the breaker refused: nothing was sent
			return nil, reason
		}
		// Sent, and at least one element failed: those fall back, the
		// others stand (their scripts ran).
		return answers, ""
	}
	return answers, ""
}
