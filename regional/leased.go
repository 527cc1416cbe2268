package regional

import (
	"context"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/lease"
)

// leaseTaken is one leased limit of a decision (p.leased.at(i)), reserved
// from its lease. It holds an index, not a pointer, so that the plan can
// stay on the stack.
type leaseTaken struct {
	i int
	d gcra.Decision
	r lease.Reservation
}

// leaseHold is what a decision holds of its leased limits while the rest
// of it is decided: the reservations (the first ones inline), and the
// leased limits whose lease the store could not serve (failed, with the
// reason), which are decided by on_failure with the others.
type leaseHold struct {
	n      int
	head   [2]leaseTaken
	tail   []leaseTaken
	failed items
	reason string
}

func (h *leaseHold) add(t leaseTaken) {
	if h.n < len(h.head) {
		h.head[h.n] = t
	} else {
		h.tail = append(h.tail, t)
	}
	h.n++
}

func (h *leaseHold) at(i int) *leaseTaken {
	if i < len(h.head) {
		return &h.head[i]
	}
	return &h.tail[i-len(h.head)]
}

// cancel gives every reservation of h back to its lease. It does so even
// when ctx has ended (the caller gave up): giving back waits at most for a
// refill of the key in progress, one store call under the store timeout.
func (h *leaseHold) cancel(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	for i := range h.n {
		h.at(i).r.Cancel(ctx)
	}
}

// unleased moves p's leased limits that the lease limiter would not lease
// (a burst too small for leasing, a cost above the lease size) to its
// enforced ones: the store decides them in the composite with the others,
// all or nothing, instead of in a call of their own.
func (s *Service) unleased(p *plan) {
	if p.leased.n == 0 {
		return
	}
	var keep items
	moved := false
	for i := range p.leased.n {
		it := p.leased.at(i)
		if s.leases.Leases(it.req, it.l.Lease) {
			keep.add(*it)
			continue
		}
		p.enforced.add(*it)
		moved = true
	}
	if moved {
		p.leased = keep
	}
}

// leaseClass is the counter of the leased, served and stranded units of
// it's limit in this region.
func (s *Service) leaseClass(it *item) *lease.Class {
	return &s.counters(it.lc, it.l.Name).lease
}

// reserveLeased reserves the units of p's leased limits, in h. When one
// denies, it cancels those reserved before and returns its denial with
// done set: nothing else is asked. A leased limit whose lease the store
// failed to serve is left in h.failed, decided with the others by
// on_failure (decideRest).
func (s *Service) reserveLeased(ctx context.Context, p *plan, h *leaseHold) (Decision, *limitCache, bool) {
	for i := range p.leased.n {
		it := p.leased.at(i)
		d, r, err := s.leases.Reserve(ctx, it.req, it.l.Lease, s.leaseClass(it))
		if err != nil {
			h.failed.add(*it)
			if h.reason == "" {
				h.reason = failureReason(err)
			}
			continue
		}
		if !d.Allowed {
			h.cancel(ctx)
			dec, lc := fromStore(d, it)
			return dec, lc, true
		}
		h.add(leaseTaken{i: i, d: d, r: r})
	}
	return Decision{}, nil, false
}

// decideRest decides p's limits other than the reserved leased ones: the
// enforced (and shadow) limits in one store round trip, or, when the store
// failed to serve a lease, the enforced limits and those leased limits
// together by on_failure, without the store (it just failed), in one local
// composite.
func (s *Service) decideRest(ctx context.Context, p *plan, h *leaseHold) (Decision, *limitCache) {
	if h.failed.n == 0 {
		return s.decideStore(ctx, p)
	}
	var all items
	for i := range p.enforced.n {
		all.add(*p.enforced.at(i))
	}
	for i := range h.failed.n {
		all.add(*h.failed.at(i))
	}
	return s.fallbackDecide(ctx, p.shard, &all, h.reason)
}

// finishLeased ends a decision p whose leased limits h holds, after the rest
// of it decided dec: when dec denies, the reservations go back to their
// leases and dec stands; otherwise they are committed and the answer names
// whichever limit has fewer units left (keeping dec's shadow and fallback
// marks).
func (s *Service) finishLeased(ctx context.Context, p *plan, h *leaseHold, dec Decision, lc *limitCache) (Decision, *limitCache) {
	if !dec.Allowed {
		h.cancel(ctx)
		return dec, lc
	}
	shadow, fallback := dec.Shadow, dec.Fallback
	for i := range h.n {
		t := h.at(i)
		t.r.Commit()
		if dec.Limit == "" || t.d.Remaining < dec.Remaining {
			dec, lc = fromStore(t.d, p.leased.at(t.i))
			dec.Shadow, dec.Fallback = shadow, fallback
		}
	}
	return dec, lc
}
