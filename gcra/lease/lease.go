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

// Config configures a Limiter.
type Config struct {
	// Size is L, the units one lease takes from the store. A lease should
	// last a fraction of a second at the key's per-pod rate. Default 10.
	Size int64
	// TTL is how long leased units may be served locally. With P pods, at
	// most P·Size units are stranded, each for at most TTL. Default 1s.
	TTL time.Duration
	// MinBurst: keys whose limit's burst is below it are not leased, since a
	// lease would take too large a share of their burst. At least Size.
	// Default 40.
	MinBurst int64
	// Clock measures TTLs. Default time.Now (monotonic).
	Clock func() time.Time
}

// DefaultConfig returns leases of 10 units for 1 s, for keys with a burst
// of at least 40, on the monotonic clock.
func DefaultConfig() Config {
	return Config{Size: 10, TTL: time.Second, MinBurst: 40, Clock: time.Now}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Size < 1:
		return fmt.Errorf("lease: Size = %d, want ≥ 1", c.Size)
	case c.TTL <= 0:
		return fmt.Errorf("lease: TTL = %v, want > 0", c.TTL)
	case c.MinBurst < c.Size:
		return fmt.Errorf("lease: MinBurst = %d, want ≥ Size (%d)", c.MinBurst, c.Size)
	case c.Clock == nil:
		return errors.New("lease: Clock is nil")
	}
	return nil
}

// Stats counts what a Limiter did since it was built.
type Stats struct {
	// Served is decisions answered from leased units, and ServedUnits
	// their units (LeasedUnits − Stranded − Held).
	Served, ServedUnits int64
	// Leases is leases taken from the store, LeasedUnits their units.
	Leases, LeasedUnits int64
	// Fallbacks is decisions sent to the store with their own cost because
	// a full lease was not available; FallbackUnits the units admitted so.
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

type entry struct {
	refill chan struct{} // one refiller at a time; waiting honours ctx

	mu      sync.Mutex // guards the fields below
	tokens  int64
	expires time.Time
	dead    bool // removed by Sweep; look the key up again
}

// Limiter is a gcra.Store that leases units from another Store.
type Limiter struct {
	store   gcra.Store
	cfg     Config
	entries sync.Map // key → *entry

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
	return &Limiter{store: store, cfg: cfg}, nil
}

func (l *Limiter) entry(key string) *entry {
	if e, ok := l.entries.Load(key); ok {
		return e.(*entry)
	}
	e, _ := l.entries.LoadOrStore(key, &entry{refill: make(chan struct{}, 1)})
	return e.(*entry)
}

// take serves cost units from e's lease if it holds them unexpired at now,
// writing off expired units first, and reports whether it served. e.mu must
// be held.
func (l *Limiter) take(e *entry, now time.Time, cost int64) bool {
	if e.tokens > 0 && !now.Before(e.expires) {
		l.stranded.Add(e.tokens)
		e.tokens = 0
	}
	if e.tokens < cost {
		return false
	}
	e.tokens -= cost
	l.served.Add(1)
	return true
}

// Decide answers a single request from the key's lease when it can, takes a
// new lease of Size units when the lease is spent or expired, and falls back
// to a request of the decision's own cost when a full lease is not
// available. Other decisions go to the store unchanged. Remaining, for a
// decision served from a lease, is the units this Limiter still holds for
// the key.
func (l *Limiter) Decide(ctx context.Context, reqs []gcra.Request) (gcra.Decision, error) {
	if len(reqs) != 1 || reqs[0].Limit.Burst < l.cfg.MinBurst || reqs[0].Cost > l.cfg.Size {
		l.passthrough.Add(1)
		d, err := l.store.Decide(ctx, reqs)
		if err == nil && !d.Allowed {
			l.denied.Add(1)
		}
		return d, err
	}
	if err := gcra.ValidateRequests(reqs); err != nil {
		return gcra.Decision{}, err
	}
	req := reqs[0]
	for {
		e := l.entry(req.Key)
		// Fast path: units in hand.
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			continue
		}
		if l.take(e, l.cfg.Clock(), req.Cost) {
			rem := e.tokens
			e.mu.Unlock()
			return gcra.Decision{Result: gcra.Result{Allowed: true, Remaining: rem}}, nil
		}
		e.mu.Unlock()

		// Slow path: one refiller per key; the others wait for it.
		select {
		case e.refill <- struct{}{}:
		case <-ctx.Done():
			return gcra.Decision{}, ctx.Err()
		}
		d, retry, err := l.refill(ctx, e, req)
		<-e.refill
		if retry {
			continue
		}
		return d, err
	}
}

// refill runs with e.refill held: it serves from a lease another refiller
// just took, or takes a new lease, or falls back to a request of the
// decision's own cost. retry is true when e died meanwhile.
func (l *Limiter) refill(ctx context.Context, e *entry, req gcra.Request) (d gcra.Decision, retry bool, err error) {
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return gcra.Decision{}, true, nil
	}
	if l.take(e, l.cfg.Clock(), req.Cost) {
		rem := e.tokens
		e.mu.Unlock()
		return gcra.Decision{Result: gcra.Result{Allowed: true, Remaining: rem}}, false, nil
	}
	e.mu.Unlock()

	lease := req
	lease.Cost = l.cfg.Size
	d, err = l.store.Decide(ctx, []gcra.Request{lease})
	if err != nil {
		return gcra.Decision{}, false, err
	}
	if d.Allowed {
		now := l.cfg.Clock()
		l.leases.Add(1)
		l.leasedUnits.Add(l.cfg.Size)
		l.served.Add(1)
		e.mu.Lock()
		if e.tokens > 0 && !now.Before(e.expires) {
			l.stranded.Add(e.tokens)
			e.tokens = 0
		}
		e.tokens += l.cfg.Size - req.Cost
		e.expires = now.Add(l.cfg.TTL)
		d.Remaining = e.tokens
		e.mu.Unlock()
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
	} else {
		l.denied.Add(1)
	}
	return d, false, nil
}

// Sweep writes off the units of expired leases as stranded and forgets keys
// that hold nothing. It returns the number of keys forgotten. Keys being
// refilled are left for the next sweep.
func (l *Limiter) Sweep() int {
	now := l.cfg.Clock()
	n := 0
	l.entries.Range(func(k, v any) bool {
		e := v.(*entry)
		select {
		case e.refill <- struct{}{}:
		default:
			return true // busy
		}
		e.mu.Lock()
		if e.tokens > 0 && !now.Before(e.expires) {
			l.stranded.Add(e.tokens)
			e.tokens = 0
		}
		if e.tokens == 0 {
			e.dead = true
			l.entries.Delete(k)
			n++
		}
		e.mu.Unlock()
		<-e.refill
		return true
	})
	return n
}

// Run sweeps once per TTL until ctx is done, then returns nil.
func (l *Limiter) Run(ctx context.Context) error {
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

// Stats returns the counters. Units of leases that expired but were not yet
// swept or touched are still in Held. Under concurrent decisions the fields
// are read one by one, not as one snapshot.
func (l *Limiter) Stats() Stats {
	var held int64
	l.entries.Range(func(_, v any) bool {
		e := v.(*entry)
		e.mu.Lock()
		held += e.tokens
		e.mu.Unlock()
		return true
	})
	s := Stats{
		Served:        l.served.Load(),
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
