package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/gcra"
)

// MaxSize bounds Config.Size and DecideSized's size: a key's held units are
// packed in 40 bits of one word (see entry).
const MaxSize = 1<<tokenBits - 1

// ErrSize: DecideSized was given a lease size outside 1 to MaxSize.
var ErrSize = errors.New("lease: size out of range")

// Config configures a Limiter.
type Config struct {
	// Size is L, the units one lease takes from the store, for Decide and
	// DecideOne (DecideSized takes its own). A lease should last a fraction
	// of a second at the key's per-pod rate. Default 10, at most MaxSize.
	Size int64
	// TTL is how long leased units may be served locally. With P pods, at
	// most P·Size units are stranded, each for at most TTL. Default 1s.
	TTL time.Duration
	// MinBurst: keys whose limit's burst is below it are not leased, since a
	// lease would take too large a share of their burst. At least Size.
	// Default 40. (DecideSized leases a key when its burst is at least
	// max(MinBurst, size).)
	MinBurst int64
	// Clock measures TTLs; tests pass a fake. nil (the default) reads the
	// monotonic clock alone (time.Since of an instant taken in New: one
	// clock read, where time.Now makes two).
	Clock func() time.Time
	// Tick, when positive, lets decisions served from a lease read a coarse
	// clock, one atomic load, instead of Clock: Run advances it every Tick
	// and every refill advances it too. It only ever lags Clock, so an
	// expired lease may be served late, never early: by at most Tick plus
	// however long the Go scheduler delays Run's goroutine. Whatever the
	// lag, what is served late is units the store already admitted, at most
	// Size − 1 per key. While no Run is running, decisions read Clock.
	// Zero reads Clock on every decision. Default 10ms (1% of the TTL).
	Tick time.Duration
}

// DefaultConfig returns leases of 10 units for 1 s, for keys with a burst
// of at least 40, on the monotonic clock read coarsely every 10 ms while
// Run runs.
func DefaultConfig() Config {
	return Config{Size: 10, TTL: time.Second, MinBurst: 40, Tick: 10 * time.Millisecond}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Size < 1 || c.Size > MaxSize:
		return fmt.Errorf("lease: Size = %d, want 1 to %d", c.Size, int64(MaxSize))
	case c.TTL <= 0:
		return fmt.Errorf("lease: TTL = %v, want > 0", c.TTL)
	case c.MinBurst < c.Size:
		return fmt.Errorf("lease: MinBurst = %d, want ≥ Size (%d)", c.MinBurst, c.Size)
	case c.Tick < 0:
		return fmt.Errorf("lease: Tick = %v, want ≥ 0", c.Tick)
	}
	return nil
}

// Stats counts what a Limiter did since it was built.
type Stats struct {
	// Served is decisions answered from leased units, and ServedUnits
	// their units (LeasedUnits − Stranded − Held; units reserved and not
	// yet committed or cancelled count as served).
	Served, ServedUnits int64
	// Leases is leases taken from the store, LeasedUnits their units.
	Leases, LeasedUnits int64
	// Fallbacks is decisions sent to the store with their own cost because
	// a full lease was not available; FallbackUnits the units admitted so
	// (less those of cancelled reservations, which count as leased).
	Fallbacks, FallbackUnits int64
	// Passthrough is decisions not leased (composite, small burst, cost
	// above Size).
	Passthrough int64
	// Denied is decisions denied (after a fallback or a pass-through).
	Denied int64
	// Stranded is leased units that expired unused.
	Stranded int64
	// Held is leased units held now, not yet served nor expired.
	Held int64
}

// An entry's word packs the units it holds (low tokenBits bits) and the
// decisions served from them since they were last counted into
// Limiter.served (the high bits), so that serving a decision is one
// compare-and-swap on one word, with no lock and no shared counter.
const (
	tokenBits = 40
	tokenMask = 1<<tokenBits - 1
	servedOne = 1 << tokenBits
	servedMax = 1<<(64-tokenBits) - 1
)

type entry struct {
	word atomic.Uint64
	// expires is when the units held expire, in ns on the Limiter's clock.
	// Written only with refill held, before the units it covers are added.
	expires atomic.Int64
	refill  chan struct{} // one refiller (or sweeper) at a time; waiting honours ctx
	// class counts the units of the leases e holds (nil: no class). Read
	// and written only with refill held.
	class *Class
	dead  atomic.Bool                  // removed by Sweep (refill held); look the key up again
	_     [64 - 8 - 8 - 8 - 8 - 4]byte // one cache line per key: keys served on other cores do not contend
}

// take serves cost units from e if it holds them unexpired at now (ns on
// the Limiter's clock) and returns the units it still holds and when they
// expire. It never writes expired units off: that is done with refill held.
func (l *Limiter) take(e *entry, now int64, cost int64) (rem, expires int64, ok bool) {
	expires = e.expires.Load()
	if now >= expires {
		return 0, 0, false
	}
	c := uint64(cost)
	for {
		w := e.word.Load()
		if w&tokenMask < c {
			return 0, 0, false
		}
		nw, spill := w-c+servedOne, false
		if w>>tokenBits == servedMax {
			nw, spill = (w-c)&tokenMask, true
		}
		if e.word.CompareAndSwap(w, nw) {
			if spill {
				l.served.Add(servedMax + 1)
			}
			return int64(nw & tokenMask), expires, true
		}
	}
}

// settle, with e.refill held, writes off e's units as stranded if they
// expired by now (in e's class too), counts the decisions served from them
// into l.served, and then adds add units. It returns the units e holds
// after.
func (l *Limiter) settle(e *entry, now int64, add int64) int64 {
	expired := now >= e.expires.Load()
	for {
		w := e.word.Load()
		held := int64(w & tokenMask)
		if expired {
			held = 0
		}
		nw := uint64(held + add)
		if e.word.CompareAndSwap(w, nw) {
			l.served.Add(int64(w >> tokenBits))
			if expired {
				l.strand(e.class, int64(w&tokenMask))
			}
			return held + add
		}
	}
}

// Limiter is a gcra.Store that leases units from another Store.
type Limiter struct {
	store   gcra.Store
	cfg     Config
	epoch   time.Time // the clock's zero
	entries sync.Map  // key → *entry

	coarse  atomic.Int64 // ns since epoch; only ever behind the clock
	ticking atomic.Int32 // running Run loops that advance coarse

	served, leases, leasedUnits           atomic.Int64
	fallbacks, fallbackUnits, passthrough atomic.Int64
	denied, stranded                      atomic.Int64
}

var _ gcra.Store = (*Limiter)(nil)

// New returns a Limiter over store. It copies cfg.
func New(store gcra.Store, cfg Config) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("lease: store is nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{store: store, cfg: cfg}
	if cfg.Clock != nil {
		l.epoch = cfg.Clock()
	} else {
		l.epoch = time.Now()
	}
	return l, nil
}

// clock reads the clock: ns since epoch.
func (l *Limiter) clock() int64 {
	if l.cfg.Clock == nil {
		return int64(time.Since(l.epoch))
	}
	return int64(l.cfg.Clock().Sub(l.epoch))
}

// now is the instant a served decision checks expiry against: the coarse
// clock while Run advances it, the clock otherwise.
func (l *Limiter) now() int64 {
	if l.ticking.Load() != 0 {
		return l.coarse.Load()
	}
	return l.clock()
}

// advance moves the coarse clock forward to now (never back).
func (l *Limiter) advance(now int64) {
	for {
		c := l.coarse.Load()
		if c >= now || l.coarse.CompareAndSwap(c, now) {
			return
		}
	}
}

func (l *Limiter) entry(key string) *entry {
	if e, ok := l.entries.Load(key); ok {
		return e.(*entry)
	}
	e, _ := l.entries.LoadOrStore(key, &entry{refill: make(chan struct{}, 1)})
	return e.(*entry)
}

// leased reports whether req is decided from leases of size units, not
// passed through.
func (l *Limiter) leased(req *gcra.Request, size int64) bool {
	return req.Limit.Burst >= max(l.cfg.MinBurst, size) && req.Cost <= size
}

// Decide answers a single request from the key's lease when it can, takes a
// new lease of Size units when the lease is spent or expired, and falls back
// to a request of the decision's own cost when a full lease is not
// available. Other decisions go to the store unchanged. Remaining, for a
// decision served from a lease, is the units this Limiter still holds for
// the key.
func (l *Limiter) Decide(ctx context.Context, reqs []gcra.Request) (gcra.Decision, error) {
	if len(reqs) != 1 || !l.leased(&reqs[0], l.cfg.Size) {
		return l.passThrough(ctx, reqs)
	}
	return l.decide(ctx, reqs[0], l.cfg.Size, nil, nil)
}

// DecideOne decides one request as Decide([]gcra.Request{req}) would,
// without the caller building a slice: a decision served from a lease
// allocates nothing.
func (l *Limiter) DecideOne(ctx context.Context, req gcra.Request) (gcra.Decision, error) {
	return l.DecideSized(ctx, req, l.cfg.Size)
}

// DecideSized decides one request as DecideOne does, with leases of size
// units instead of Config.Size, so that one Limiter (and one Run) serves
// keys whose lease sizes differ, such as the limits of a policy. The
// request is leased when its limit's burst is at least max(MinBurst, size)
// and its cost at most size; otherwise it goes to the store unchanged. A
// key's size may change from one call to the next (a policy changed): the
// units it holds are served as before and the next lease takes the new
// size. The invariants do not depend on the size: every unit served was
// charged by the store. size must be 1 to MaxSize (ErrSize otherwise).
func (l *Limiter) DecideSized(ctx context.Context, req gcra.Request, size int64) (gcra.Decision, error) {
	if size < 1 || size > MaxSize {
		return gcra.Decision{}, fmt.Errorf("%w: %d, want 1 to %d", ErrSize, size, int64(MaxSize))
	}
	if !l.leased(&req, size) {
		return l.passThrough(ctx, []gcra.Request{req})
	}
	return l.decide(ctx, req, size, nil, nil)
}

// Leases reports whether DecideSized and Reserve decide req with leases of
// size units (its limit's burst is at least max(MinBurst, size), its cost
// at most size, and size is 1 to MaxSize) rather than passing it through.
func (l *Limiter) Leases(req gcra.Request, size int64) bool {
	return size >= 1 && size <= MaxSize && l.leased(&req, size)
}

// decide decides a request that is leased with leases of size units,
// counting the units of leases it takes in c (nil: none). When r is not
// nil, an admission is returned as a reservation in r (see Reserve).
func (l *Limiter) decide(ctx context.Context, req gcra.Request, size int64, c *Class, r *Reservation) (gcra.Decision, error) {
	if err := validate(&req); err != nil {
		return gcra.Decision{}, err
	}
	for {
		e := l.entry(req.Key)
		// Fast path: units in hand. A dead entry holds none.
		if rem, exp, ok := l.take(e, l.now(), req.Cost); ok {
			r.hold(l, e, c, &req, exp, fromLease)
			return gcra.Decision{Result: gcra.Result{Allowed: true, Remaining: rem}}, nil
		}
		// Slow path: one refiller per key; the others wait for it.
		select {
		case e.refill <- struct{}{}:
		case <-ctx.Done():
			return gcra.Decision{}, ctx.Err()
		}
		d, retry, err := l.refill(ctx, e, req, size, c, r)
		<-e.refill
		if !retry {
			return d, err
		}
	}
}

// validate checks a leased request as gcra.ValidateRequests would.
func validate(req *gcra.Request) error {
	if req.Key == "" {
		return &gcra.ItemError{Index: 0, Err: gcra.ErrKey}
	}
	if err := req.Limit.Validate(); err != nil {
		return &gcra.ItemError{Index: 0, Err: err}
	}
	if err := req.Limit.CheckCost(req.Cost); err != nil {
		return &gcra.ItemError{Index: 0, Err: err}
	}
	return nil
}

func (l *Limiter) passThrough(ctx context.Context, reqs []gcra.Request) (gcra.Decision, error) {
	l.passthrough.Add(1)
	d, err := l.store.Decide(ctx, reqs)
	if err == nil && !d.Allowed {
		l.denied.Add(1)
	}
	return d, err
}

// refill runs with e.refill held: it serves from a lease another refiller
// just took, or takes a new lease of size units (counted in c), or falls
// back to a request of the decision's own cost; an admission is held in r
// when r is not nil. retry is true when e died meanwhile. Units are added
// only when the key holds fewer than the cost (take failed), so it holds
// fewer than size after: never more than MaxSize.
func (l *Limiter) refill(ctx context.Context, e *entry, req gcra.Request, size int64, c *Class, r *Reservation) (d gcra.Decision, retry bool, err error) {
	if e.dead.Load() {
		return gcra.Decision{}, true, nil
	}
	now := l.clock()
	l.advance(now)
	if rem, exp, ok := l.take(e, now, req.Cost); ok {
		r.hold(l, e, c, &req, exp, fromLease)
		return gcra.Decision{Result: gcra.Result{Allowed: true, Remaining: rem}}, false, nil
	}

	lease := req
	lease.Cost = size
	d, err = l.store.Decide(ctx, []gcra.Request{lease})
	if err != nil {
		return gcra.Decision{}, false, err
	}
	if d.Allowed {
		now := l.clock()
		l.advance(now)
		l.leases.Add(1)
		l.leasedUnits.Add(size)
		l.served.Add(1)
		// Write expired units off (to the class of the lease they came
		// from) before the new expiry covers them; the units added after it
		// are covered by it.
		l.settle(e, now, 0)
		if c != nil {
			e.class = c
			c.leased.Add(size)
		}
		exp := now + int64(l.cfg.TTL)
		e.expires.Store(exp)
		d.Remaining = l.settle(e, now, size-req.Cost)
		r.hold(l, e, c, &req, exp, fromLease)
		return d, false, nil
	}
	// A full lease is not available: ask for just this decision's units.
	l.fallbacks.Add(1)
	d, err = l.store.Decide(ctx, []gcra.Request{req})
	if err != nil {
		return gcra.Decision{}, false, err
	}
	if d.Allowed {
		l.fallbackUnits.Add(req.Cost)
		r.hold(l, e, c, &req, l.clock()+int64(l.cfg.TTL), fromStore)
	} else {
		l.denied.Add(1)
	}
	return d, false, nil
}

// Sweep writes off the units of expired leases as stranded and forgets keys
// that hold nothing. It returns the number of keys forgotten. Keys being
// refilled are left for the next sweep.
func (l *Limiter) Sweep() int {
	now := l.clock()
	l.advance(now)
	n, seen := 0, 0
	l.entries.Range(func(k, v any) bool {
		if seen++; seen%1024 == 0 {
			l.advance(l.clock()) // a long sweep delays Run's next tick
		}
		e := v.(*entry)
		select {
		case e.refill <- struct{}{}:
		default:
			return true // busy
		}
		// Takers can take units but never add them: once e holds none, it
		// holds none until a refill, which waits for e.refill.
		if l.settle(e, now, 0) == 0 {
			e.dead.Store(true)
			l.entries.Delete(k)
			n++
		}
		<-e.refill
		return true
	})
	return n
}

// Run sweeps once per TTL and, when Config.Tick is positive, advances the
// coarse clock every Tick, until ctx is done; then it returns nil.
func (l *Limiter) Run(ctx context.Context) error {
	if l.cfg.Tick <= 0 {
		t := time.NewTicker(l.cfg.TTL)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				l.Sweep()
			}
		}
	}
	l.advance(l.clock())
	l.ticking.Add(1)
	defer l.ticking.Add(-1)
	t := time.NewTicker(l.cfg.Tick)
	defer t.Stop()
	next := l.clock() + int64(l.cfg.TTL)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			now := l.clock()
			l.advance(now)
			if now >= next {
				l.Sweep()
				next = now + int64(l.cfg.TTL)
			}
		}
	}
}

// Stats returns the counters. Units of leases that expired but were not yet
// swept or touched are still in Held. Under concurrent decisions the fields
// are read one by one, not as one snapshot.
func (l *Limiter) Stats() Stats {
	var held, served int64
	l.entries.Range(func(_, v any) bool {
		w := v.(*entry).word.Load()
		held += int64(w & tokenMask)
		served += int64(w >> tokenBits)
		return true
	})
	s := Stats{
		Served:        l.served.Load() + served,
		Leases:        l.leases.Load(),
		LeasedUnits:   l.leasedUnits.Load(),
		Fallbacks:     l.fallbacks.Load(),
		FallbackUnits: l.fallbackUnits.Load(),
		Passthrough:   l.passthrough.Load(),
		Denied:        l.denied.Load(),
		Stranded:      l.stranded.Load(),
		Held:          held,
	}
	s.ServedUnits = s.LeasedUnits - s.Stranded - s.Held
	return s
}
