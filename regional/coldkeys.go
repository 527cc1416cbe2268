package regional

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/gcra"
)

// coldKeys remembers the keys a pod decided under a cold floor (a budget
// it held no grant of: a new tenant's first requests), per budget ID, so
// that when the budget's grant arrives the keys are restated under it at
// once (gcra.RestateMicros) rather than at their next decision. A key
// spent under the cold floor (a burst of one at a tenth of the budget's
// rate, split between regions) otherwise refills at the floor's rate until
// its next decision, and that decision, restated then, waits out the
// floor's slow refill: the key's first request under its grant was denied
// though the grant had room. Restating at once charges nothing and mints
// nothing: it is the state the next decision would start from had it come
// when the grant did.
//
// It holds at most maxColdBudgets budgets of at most maxColdKeys keys each;
// past that, keys are not remembered (they restate at their next decision,
// as before). Entries leave when their grant arrives, or when they are
// older than coldKeyTTL (the grant never came: the leader refused the
// tenant, or the pod's reports fail), within a third of it more.
type coldKeys struct {
	pending atomic.Int64 // len(m): the view's apply skips its look-up at 0
	mu      sync.Mutex
	m       map[string]*coldBudget // budget ID → keys decided under its cold floor
	due     []*coldBudget          // granted, to restate
	wake    chan struct{}          // signalled (buffered 1) when due grows
}

// coldBudget is one budget's keys decided under its cold floor.
type coldBudget struct {
	id    string
	at    time.Time // when the first key was remembered
	shard int
	keys  []coldKey
}

// coldKey is a key and what its limit is worked out from when its grant
// arrives.
type coldKey struct {
	key string
	te  *tenantEntry
	lc  *limitCache
	// keyShare: the key's limit is a per-value global limit, whose share
	// ID is the budget ID (else the budget is lc.share).
	keyShare bool
}

const (
	maxColdBudgets = 10_000
	maxColdKeys    = 8
	coldKeyTTL     = 30 * time.Second
)

func newColdKeys() *coldKeys {
	return &coldKeys{m: map[string]*coldBudget{}, wake: make(chan struct{}, 1)}
}

// remember records that key was decided at now under the cold floor of
// budget id.
func (c *coldKeys) remember(now time.Time, id string, shard int, k coldKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.m[id]
	if b == nil {
		if len(c.m) >= maxColdBudgets {
			return
		}
		b = &coldBudget{id: id, at: now, shard: shard}
		c.m[id] = b
		c.pending.Store(int64(len(c.m)))
	}
	if len(b.keys) >= maxColdKeys {
		return
	}
	for _, have := range b.keys {
		if have.key == k.key {
			return
		}
	}
	b.keys = append(b.keys, k)
}

// granted notes, with the view's lock held, that budget id of shard
// received a grant: its keys become due. It reports whether any did.
func (c *coldKeys) granted(shard int, id string) bool {
	if c.pending.Load() == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.m[id]
	if b == nil || b.shard != shard {
		return false
	}
	delete(c.m, id)
	c.pending.Store(int64(len(c.m)))
	if len(c.due) >= maxColdBudgets {
		return false // (the restater is behind: these restate at their next decision)
	}
	c.due = append(c.due, b)
	return true
}

// signal wakes the restater (without blocking).
func (c *coldKeys) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take returns the budgets due, and forgets those remembered before
// now − coldKeyTTL.
func (c *coldKeys) take(now time.Time) []*coldBudget {
	c.mu.Lock()
	defer c.mu.Unlock()
	due := c.due
	c.due = nil
	for id, b := range c.m {
		if now.Sub(b.at) > coldKeyTTL {
			delete(c.m, id)
		}
	}
	c.pending.Store(int64(len(c.m)))
	return due
}

// restateCold restates, as their grants arrive, the keys decided under
// cold floors, until ctx ends.
func (s *Service) restateCold(ctx context.Context) error {
	if s.restater == nil {
		return nil
	}
	sweep := time.NewTicker(coldKeyTTL / 3)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sweep.C:
		case <-s.view.cold.wake:
		}
		for _, b := range s.view.cold.take(s.cfg.Now()) {
			s.restateBudget(ctx, b)
		}
	}
}

// restateBudget restates b's keys under what the pod enforces for b now,
// in one store call (one tenant's keys share a Redis Cluster slot).
func (s *Service) restateBudget(ctx context.Context, b *coldBudget) {
	now := s.cfg.Now()
	reqs := make([]gcra.Request, 0, len(b.keys))
	for _, k := range b.keys {
		var rate float64
		var burst int64
		var cold bool
		if k.keyShare {
			rate, burst, _, cold = s.view.effectiveKey(now, k.te, b.id, k.lc)
		} else {
			rate, burst, _, cold = s.view.effective(now, k.te, k.lc)
		}
		if cold {
			continue // (the grant went again: its next decision restates it)
		}
		lim, ok := gcra.Fit(rate, burst)
		if !ok {
			continue // this region may admit nothing of it: nothing to restate to
		}
		reqs = append(reqs, gcra.Request{Key: k.key, Limit: lim})
	}
	if len(reqs) == 0 {
		return
	}
	if err := s.guarded(ctx, func(ctx context.Context) error { return s.restater.Restate(ctx, reqs) }); err != nil {
		s.m.restates.WithLabelValues("failed").Add(float64(len(reqs)))
		s.log.Debug("restating keys decided under a cold floor failed: each restates at its next decision", "budget", b.id, "err", err)
		return
	}
	s.m.restates.WithLabelValues("restated").Add(float64(len(reqs)))
}
