package lease

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/allot-dev/allot/gcra"
)

// ErrNotLeased: Reserve was given a request that is not decided from leases
// (see Leases); such a request goes to the store as it is, where what it
// is charged cannot be given back.
var ErrNotLeased = errors.New("lease: request is not leased")

// Class counts the units of the leases of a group of keys, such as the
// keys of one limit of a policy, for metrics: how many units were leased
// from the store, how many of them were served, how many were stranded.
// Its zero value is ready; it is safe for concurrent use. A key's leases
// are counted in the Class of the Reserve call that took them.
type Class struct {
	leased, served, stranded atomic.Int64
}

// ClassStats is what a Class counted. Leased − Served − Stranded is the
// units held now (in leases, or reserved by decisions not yet committed
// or cancelled).
type ClassStats struct {
	// Leased is units taken from the store as leases, and units of
	// cancelled fallback reservations kept as leased (see Cancel).
	Leased int64
	// Served is units of committed reservations served from leases.
	Served int64
	// Stranded is leased units that expired unserved.
	Stranded int64
}

// Stats returns c's counters, read one by one: Leased last, so that
// Served + Stranded ≤ Leased holds in what it returns even under
// concurrent decisions.
func (c *Class) Stats() ClassStats {
	served := c.served.Load()
	stranded := c.stranded.Load()
	return ClassStats{Leased: c.leased.Load(), Served: served, Stranded: stranded}
}

// strand counts n leased units as stranded, in c too.
func (l *Limiter) strand(c *Class, n int64) {
	l.stranded.Add(n)
	if c != nil {
		c.stranded.Add(n)
	}
}

// source says where a reservation's units came from.
type source uint8

const (
	fromNone  source = iota // nothing held
	fromLease               // units of a lease the key held
	fromStore               // a fallback request the store admitted on its own
)

// A Reservation holds the units Reserve admitted until the caller knows
// whether the rest of its decision admits too: Commit keeps them served,
// Cancel gives them back. A Reservation is used by one goroutine; once
// committed or cancelled it holds nothing and both are no-ops. Its zero
// value holds nothing.
type Reservation struct {
	l       *Limiter
	e       *entry
	c       *Class
	key     string
	cost    int64
	expires int64 // ns on the Limiter's clock: the units may be served until then
	from    source
}

// hold records an admission in r (nothing when r is nil).
func (r *Reservation) hold(l *Limiter, e *entry, c *Class, req *gcra.Request, expires int64, from source) {
	if r == nil {
		return
	}
	*r = Reservation{l: l, e: e, c: c, key: req.Key, cost: req.Cost, expires: expires, from: from}
}

// Reserve decides req as DecideSized does, counting the leases it takes in
// c (nil: no class), but the units it admits stay reserved for the caller:
// Commit when the caller's whole decision admits, Cancel when another part
// of it denies, so that a denied decision charges nothing. A denial or an
// error holds nothing. req must be leased with leases of size units (see
// Leases; ErrNotLeased otherwise, ErrSize for a size outside 1 to MaxSize).
//
// Units reserved from a lease are out of the key's lease until the caller
// commits or cancels: concurrent decisions of the key do not see them, and
// may take a new lease meanwhile. They are never served twice: Cancel puts
// them back, and only units that Reserve took.
func (l *Limiter) Reserve(ctx context.Context, req gcra.Request, size int64, c *Class) (gcra.Decision, Reservation, error) {
	if size < 1 || size > MaxSize {
		return gcra.Decision{}, Reservation{}, fmt.Errorf("%w: %d, want 1 to %d", ErrSize, size, int64(MaxSize))
	}
	if !l.leased(&req, size) {
		return gcra.Decision{}, Reservation{}, fmt.Errorf("%w: key %q: burst %d, cost %d, lease size %d (min burst %d)",
			ErrNotLeased, req.Key, req.Limit.Burst, req.Cost, size, l.cfg.MinBurst)
	}
	var r Reservation
	d, err := l.decide(ctx, req, size, c, &r)
	if err != nil || !d.Allowed {
		return d, Reservation{}, err
	}
	return d, r, nil
}

// Commit keeps r's units as served: the units of a lease count as served
// in r's class.
func (r *Reservation) Commit() {
	if r.from == fromLease && r.c != nil {
		r.c.served.Add(r.cost)
	}
	*r = Reservation{}
}

// Cancel gives r's units back to the key's lease, so that a later decision
// is served them (once). Units of a lease go back to the lease the key
// holds now, or, when it holds none, to a lease ending when theirs ended;
// units whose lease has ended are written off as stranded, as they would
// have been had they never been reserved. Units the store admitted to a
// fallback request (no full lease was available) become a lease of their
// own from then on, counted as leased, ending a TTL after they were
// admitted: the store counted them, so they are served from the lease
// rather than charged again. Cancel waits for a refill of the key in
// progress (one store call); if ctx ends first, the units are written off
// as stranded.
func (r *Reservation) Cancel(ctx context.Context) {
	if r.from == fromNone {
		return
	}
	l, c, cost := r.l, r.c, r.cost
	if r.from == fromStore {
		l.fallbackUnits.Add(-cost)
		l.leasedUnits.Add(cost)
		if c != nil {
			c.leased.Add(cost)
		}
	} else {
		l.served.Add(-1) // taking them counted a decision served
	}
	e, key, expires := r.e, r.key, r.expires
	*r = Reservation{}
	for {
		select {
		case e.refill <- struct{}{}:
		case <-ctx.Done():
			l.strand(c, cost)
			return
		}
		if !e.dead.Load() {
			break
		}
		// Swept meanwhile (it held nothing): give them to the key's new entry.
		<-e.refill
		e = l.entry(key)
	}
	defer func() { <-e.refill }()
	now := l.clock()
	l.advance(now)
	l.settle(e, now, 0) // write expired units off before anything extends them
	switch {
	case int64(e.word.Load()&tokenMask)+cost > tokenMask:
		l.strand(c, cost) // the key's word is full (only near MaxSize)
		return
	case now < e.expires.Load():
		// The key's lease is live: the units join it.
	case now < expires:
		e.expires.Store(expires)
	default:
		l.strand(c, cost)
		return
	}
	if c != nil {
		e.class = c
	}
	l.settle(e, now, cost)
}
