// Package coalesce merges concurrent calls into batches by natural
// batching: the machinery behind gcra/pipeline (decisions merged into one
// Redis pipeline) and the client's batching (decisions merged into one
// DecideBatch RPC).
//
// There is no batch window. A caller that finds a flush slot free (fewer
// than Config.Flushers exchanges in flight) sends at once with whatever is
// queued, so at low load a call costs what the exchange costs. Callers that
// arrive while every slot is busy queue; when an exchange ends, its caller
// hands the slot to the oldest waiter, which sends the queue (up to
// Config.MaxBatch items) as the next exchange. The busier the backend, the
// larger the batches.
//
// A Coalescer starts no goroutine: every exchange is run by one of its
// callers. A caller whose context ends while it waits returns ctx's error at
// once; a queued call whose context ended before a flush took it is not
// sent. A lone call is sent under its caller's own context; a merged
// exchange carries the values of the first caller's context, none of the
// callers' cancellations, and the latest of their deadlines (a caller
// without one counts as now + Config.Timeout).
package coalesce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Config configures a Coalescer. Start from DefaultConfig.
type Config struct {
	// MaxBatch caps the items sent in one exchange. A call carrying more
	// items than this is sent on its own, unmerged. Default 128.
	MaxBatch int
	// Flushers is how many exchanges may be in flight at once; callers
	// arriving while all are busy queue for the next one. Default 4.
	Flushers int
	// Timeout bounds a merged exchange for callers whose context has no
	// deadline. Default 1s.
	Timeout time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{MaxBatch: 128, Flushers: 4, Timeout: time.Second}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.MaxBatch < 1:
		return fmt.Errorf("coalesce config: MaxBatch: %d: must be at least 1", c.MaxBatch)
	case c.Flushers < 1:
		return fmt.Errorf("coalesce config: Flushers: %d: must be at least 1", c.Flushers)
	case c.Timeout <= 0:
		return fmt.Errorf("coalesce config: Timeout: %v: must be positive", c.Timeout)
	}
	return nil
}

// SendFunc sends items in one exchange and returns exactly one answer per
// item, in order (a failure of the whole exchange is an answer per item
// carrying the error).
type SendFunc[Q, A any] func(ctx context.Context, items []Q) []A

// Coalescer merges concurrent Do calls into exchanges run by send.
type Coalescer[Q, A any] struct {
	send SendFunc[Q, A]
	cfg  Config

	mu       sync.Mutex
	queue    []*call[Q, A] // waiting for a flush, oldest first
	inflight int           // flush slots held (running or handed to a waiter)
	free     []*call[Q, A] // answered calls, for reuse
}

// New returns a Coalescer sending through send. cfg is copied.
func New[Q, A any](send SendFunc[Q, A], cfg Config) (*Coalescer[Q, A], error) {
	if send == nil {
		return nil, errors.New("coalesce: SendFunc is nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Coalescer[Q, A]{send: send, cfg: cfg}, nil
}

// MaxBatch is the configured cap on one exchange's items.
func (co *Coalescer[Q, A]) MaxBatch() int { return co.cfg.MaxBatch }

// Queued is how many calls wait for a flush now.
func (co *Coalescer[Q, A]) Queued() int {
	co.mu.Lock()
	defer co.mu.Unlock()
	return len(co.queue)
}

// call is one caller's items waiting for, or riding in, a flush. Its fields
// below ctx are guarded by Coalescer.mu, except answers, which is written
// once before done is set and read only after.
type call[Q, A any] struct {
	ctx   context.Context
	items []Q

	wake    chan struct{} // cap 1: "look at your state again"
	queued  bool          // in Coalescer.queue
	token   bool          // holds a flush slot handed over by a finished flush
	done    bool          // answers are set
	answers []A
}

// Do sends items in the next exchange (at once if a flush slot is free) and
// returns their answers, in order, or ctx's error if ctx ends first. Items
// beyond MaxBatch are sent on their own. The answers slice is the caller's.
func (co *Coalescer[Q, A]) Do(ctx context.Context, items []Q) ([]A, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(items) > co.cfg.MaxBatch {
		return co.send(ctx, items), nil
	}
	co.mu.Lock()
	c := co.newCallLocked(ctx, items)
	co.queue = append(co.queue, c)
	c.queued = true
	if co.inflight < co.cfg.Flushers {
		co.inflight++
		// take may be empty: every queued context, this caller's
		// included, may have ended since the check above.
		if take := co.takeLocked(); len(take) == 0 {
			co.releaseLocked()
			co.mu.Unlock()
		} else {
			co.mu.Unlock()
			co.flush(take)
		}
	} else {
		co.mu.Unlock()
	}
	for {
		co.mu.Lock()
		if c.done {
			co.dropTokenLocked(c)
			a := c.answers
			co.recycleLocked(c)
			co.mu.Unlock()
			return a, nil
		}
		if c.token {
			c.token = false
			take := co.takeLocked()
			if len(take) == 0 {
				co.releaseLocked()
				co.mu.Unlock()
			} else {
				co.mu.Unlock()
				co.flush(take)
			}
			continue
		}
		co.mu.Unlock()
		select {
		case <-c.wake:
		case <-ctx.Done():
			co.mu.Lock()
			if c.queued {
				co.removeLocked(c)
			}
			co.dropTokenLocked(c)
			if c.done {
				a := c.answers
				co.recycleLocked(c)
				co.mu.Unlock()
				return a, nil
			}
			// Possibly in flight: a flush may still write to c, so it is
			// not reused.
			co.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// newCallLocked returns a fresh or reused call.
func (co *Coalescer[Q, A]) newCallLocked(ctx context.Context, items []Q) *call[Q, A] {
	var c *call[Q, A]
	if n := len(co.free); n > 0 {
		c = co.free[n-1]
		co.free[n-1] = nil
		co.free = co.free[:n-1]
	} else {
		c = &call[Q, A]{wake: make(chan struct{}, 1)}
	}
	c.ctx, c.items = ctx, items
	return c
}

// recycleLocked keeps an answered call for reuse. No flush refers to it any
// more: finish marked it done, and it is out of the queue.
func (co *Coalescer[Q, A]) recycleLocked(c *call[Q, A]) {
	if len(co.free) >= 4*co.cfg.MaxBatch {
		return
	}
	select { // drain a nudge that arrived after the caller last looked
	case <-c.wake:
	default:
	}
	*c = call[Q, A]{wake: c.wake}
	co.free = append(co.free, c)
}

// takeLocked pops the oldest queued calls, up to MaxBatch items in all.
// Calls whose context already ended are dropped (they return by
// themselves).
func (co *Coalescer[Q, A]) takeLocked() []*call[Q, A] {
	n, i := 0, 0
	var take []*call[Q, A]
	for ; i < len(co.queue); i++ {
		c := co.queue[i]
		if c.ctx.Err() != nil {
			c.queued = false
			continue
		}
		if n+len(c.items) > co.cfg.MaxBatch && n > 0 {
			break
		}
		c.queued = false
		take = append(take, c)
		n += len(c.items)
	}
	rest := copy(co.queue, co.queue[i:])
	clear(co.queue[rest:])
	co.queue = co.queue[:rest]
	return take
}

// dropTokenLocked passes on a flush slot c was handed but will not use (it
// was answered by another flush, or its context ended).
func (co *Coalescer[Q, A]) dropTokenLocked(c *call[Q, A]) {
	if c.token {
		c.token = false
		co.releaseLocked()
	}
}

// removeLocked takes c out of the queue.
func (co *Coalescer[Q, A]) removeLocked(c *call[Q, A]) {
	for i, q := range co.queue {
		if q == c {
			copy(co.queue[i:], co.queue[i+1:])
			co.queue[len(co.queue)-1] = nil
			co.queue = co.queue[:len(co.queue)-1]
			break
		}
	}
	c.queued = false
}

// releaseLocked gives up a flush slot: to the oldest waiter not already
// holding one, which then flushes the next batch, or back to the pool.
func (co *Coalescer[Q, A]) releaseLocked() {
	for _, c := range co.queue {
		if !c.token {
			c.token = true
			wake(c)
			return
		}
	}
	co.inflight--
}

// wake nudges c to look at its state again; a nudge already pending is
// enough, since c reads its state under the lock after every one.
func wake[Q, A any](c *call[Q, A]) {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// flush sends take in one exchange, hands every caller its answers, then
// releases the slot it held.
func (co *Coalescer[Q, A]) flush(take []*call[Q, A]) {
	if len(take) == 1 {
		// One lone call: no merge, so the caller's own context is the
		// exchange's.
		co.finish(take, co.send(take[0].ctx, take[0].items))
		return
	}
	n := 0
	for _, c := range take {
		n += len(c.items)
	}
	items := make([]Q, 0, n)
	for _, c := range take {
		items = append(items, c.items...)
	}
	ctx, cancel := co.context(take)
	answers := co.send(ctx, items)
	cancel()
	co.finish(take, answers)
}

// context is the exchange's context for a merged batch: the first caller's
// values, none of the callers' cancellation, the latest of their deadlines.
func (co *Coalescer[Q, A]) context(take []*call[Q, A]) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range take {
		d, ok := c.ctx.Deadline()
		if !ok {
			d = time.Now().Add(co.cfg.Timeout)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(take[0].ctx), latest)
}

// finish hands each call its slice of answers and releases the flush slot.
func (co *Coalescer[Q, A]) finish(take []*call[Q, A], answers []A) {
	co.mu.Lock()
	off := 0
	for _, c := range take {
		c.answers = answers[off : off+len(c.items) : off+len(c.items)]
		off += len(c.items)
		c.done = true
		wake(c)
	}
	co.releaseLocked()
	co.mu.Unlock()
}
