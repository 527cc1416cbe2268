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
	// Served is decisions answered from a local lease, and ServedUnits
	// their units.
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
	sem     chan struct{} // one holder: serialises refills, honours ctx
	tokens  int64
	expires time.Time
	dead    bool // removed by Sweep; look the key up again
}

// Limiter is a gcra.Store that leases units from another Store.
type Limiter struct {
	store gcra.Store
	cfg   Config

	mu      sync.Mutex
	entries map[string]*entry

	served, servedUnits, leases, leasedUnits atomic.Int64
	fallbacks, fallbackUnits, passthrough    atomic.Int64
	denied, stranded, held                   atomic.Int64
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
	return &Limiter{store: store, cfg: cfg, entries: make(map[string]*entry)}, nil
}

func (l *Limiter) entry(key string) *entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[key]
	if !ok {
		e = &entry{sem: make(chan struct{}, 1)}
		l.entries[key] = e
	}
	return e
}

// lock takes e's semaphore, or fails with ctx.
func (e *entry) lock(ctx context.Context) error {
	select {
	case e.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *entry) unlock() { <-e.sem }

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
		if err := e.lock(ctx); err != nil {
			return gcra.Decision{}, err
		}
		if e.dead {
			e.unlock()
			continue
		}
		d, err := l.decideLocked(ctx, e, req)
		e.unlock()
		return d, err
	}
}

func (l *Limiter) decideLocked(ctx context.Context, e *entry, req gcra.Request) (gcra.Decision, error) {
	now := l.cfg.Clock()
	if e.tokens > 0 && !now.Before(e.expires) {
		l.strand(e)
	}
	if e.tokens >= req.Cost {
		e.tokens -= req.Cost
		l.held.Add(-req.Cost)
		l.served.Add(1)
		l.servedUnits.Add(req.Cost)
		return gcra.Decision{Result: gcra.Result{Allowed: true, Remaining: e.tokens}}, nil
	}
	lease := req
	lease.Cost = l.cfg.Size
	d, err := l.store.Decide(ctx, []gcra.Request{lease})
	if err != nil {
		return gcra.Decision{}, err
	}
	if d.Allowed {
		l.leases.Add(1)
		l.leasedUnits.Add(l.cfg.Size)
		l.served.Add(1)
		l.servedUnits.Add(req.Cost)
		l.held.Add(l.cfg.Size - req.Cost)
		e.tokens += l.cfg.Size - req.Cost
		e.expires = now.Add(l.cfg.TTL)
		d.Remaining = e.tokens
		return d, nil
	}
	// A full lease is not available: ask for just this decision's units.
	l.fallbacks.Add(1)
	d, err = l.store.Decide(ctx, []gcra.Request{req})
	if err != nil {
		return gcra.Decision{}, err
	}
	if d.Allowed {
		l.fallbackUnits.Add(req.Cost)
	} else {
		l.denied.Add(1)
	}
	return d, nil
}

// strand writes off e's unused units (e locked).
func (l *Limiter) strand(e *entry) {
	l.stranded.Add(e.tokens)
	l.held.Add(-e.tokens)
	e.tokens = 0
}

// Sweep writes off the units of expired leases as stranded and forgets keys
// that hold nothing. It returns the number of keys forgotten. Keys busy with
// a decision are left for the next sweep.
func (l *Limiter) Sweep() int {
	now := l.cfg.Clock()
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, e := range l.entries {
		select {
		case e.sem <- struct{}{}:
		default:
			continue // busy
		}
		if e.tokens > 0 && !now.Before(e.expires) {
			l.strand(e)
		}
		if e.tokens == 0 {
			e.dead = true
			delete(l.entries, k)
			n++
		}
		e.unlock()
	}
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
// swept or touched are still in Held.
func (l *Limiter) Stats() Stats {
	return Stats{
		Served:        l.served.Load(),
		ServedUnits:   l.servedUnits.Load(),
		Leases:        l.leases.Load(),
		LeasedUnits:   l.leasedUnits.Load(),
		Fallbacks:     l.fallbacks.Load(),
		FallbackUnits: l.fallbackUnits.Load(),
		Passthrough:   l.passthrough.Load(),
		Denied:        l.denied.Load(),
		Stranded:      l.stranded.Load(),
		Held:          l.held.Load(),
	}
}
