package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/allot-dev/allot/gcra"
)

// Config configures a Store. Start from DefaultConfig.
type Config struct {
	// MaxBatch caps the decisions sent in one pipeline. A call carrying
	// more decisions than this is sent on its own, unmerged. Default 128.
	MaxBatch int
	// Flushers is how many pipelines may be in flight at once; callers
	// arriving while all are busy queue for the next one. Default 4.
	Flushers int
	// Timeout bounds a pipeline for callers whose context has no deadline
	// (see the package documentation). Default 1s.
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
		return fmt.Errorf("pipeline config: MaxBatch: %d: must be at least 1", c.MaxBatch)
	case c.Flushers < 1:
		return fmt.Errorf("pipeline config: Flushers: %d: must be at least 1", c.Flushers)
	case c.Timeout <= 0:
		return fmt.Errorf("pipeline config: Timeout: %v: must be positive", c.Timeout)
	}
	return nil
}

// Store merges concurrent decisions into pipelines of an underlying
// gcra.BatchStore. Build it with New; it is a gcra.BatchStore itself.
type Store struct {
	bs  gcra.BatchStore
	cfg Config

	mu       sync.Mutex
	queue    []*call // waiting for a flush, oldest first
	inflight int     // flush slots held (running or handed to a waiter)
}

var _ gcra.BatchStore = (*Store)(nil)

// New returns a Store sending through bs. It returns an error if bs is nil
// or cfg is invalid; cfg is copied.
func New(bs gcra.BatchStore, cfg Config) (*Store, error) {
	if bs == nil {
		return nil, errors.New("pipeline: BatchStore is nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{bs: bs, cfg: cfg}, nil
}

// call is one caller's decisions waiting for, or riding in, a flush. Its
// fields below ctx are guarded by Store.mu, except answers, which is
// written once before done is set and read only after.
type call struct {
	ctx    context.Context
	batch  [][]gcra.Request
	single bool // from Decide: one decision

	wake    chan struct{} // cap 1: "look at your state again"
	queued  bool          // in Store.queue
	token   bool          // holds a flush slot handed over by a finished flush
	done    bool          // answers are set
	answers []gcra.Answer
}

// Decide decides reqs as the underlying store would, in the next pipeline
// (at once if a flush slot is free). Invalid requests return the error of
// gcra.ValidateRequests without being queued.
func (s *Store) Decide(ctx context.Context, reqs []gcra.Request) (gcra.Decision, error) {
	if err := gcra.ValidateRequests(reqs); err != nil {
		return gcra.Decision{}, err
	}
	a, err := s.do(ctx, [][]gcra.Request{reqs}, true)
	if err != nil {
		return gcra.Decision{}, err
	}
	return a[0].Decision, a[0].Err
}

// DecideMany decides every element of batch, in order, riding in one
// pipeline with whatever other calls are waiting. A batch larger than
// Config.MaxBatch is sent on its own. If ctx ends before the answers
// arrive, every answer carries ctx's error.
func (s *Store) DecideMany(ctx context.Context, batch [][]gcra.Request) []gcra.Answer {
	if len(batch) == 0 {
		return []gcra.Answer{}
	}
	if len(batch) > s.cfg.MaxBatch {
		return s.bs.DecideMany(ctx, batch)
	}
	a, err := s.do(ctx, batch, false)
	if err != nil {
		a = make([]gcra.Answer, len(batch))
		for i := range a {
			a[i].Err = err
		}
	}
	return a
}

// do queues batch and returns its answers, or ctx's error if ctx ends
// first.
func (s *Store) do(ctx context.Context, batch [][]gcra.Request, single bool) ([]gcra.Answer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &call{ctx: ctx, batch: batch, single: single, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	s.queue = append(s.queue, c)
	c.queued = true
	if s.inflight < s.cfg.Flushers {
		s.inflight++
		take := s.takeLocked()
		s.mu.Unlock()
		s.flush(take)
	} else {
		s.mu.Unlock()
	}
	for {
		s.mu.Lock()
		if c.done {
			s.dropTokenLocked(c)
			s.mu.Unlock()
			return c.answers, nil
		}
		if c.token {
			c.token = false
			take := s.takeLocked()
			if len(take) == 0 {
				s.releaseLocked()
				s.mu.Unlock()
			} else {
				s.mu.Unlock()
				s.flush(take)
			}
			continue
		}
		s.mu.Unlock()
		select {
		case <-c.wake:
		case <-ctx.Done():
			s.mu.Lock()
			if c.queued {
				s.removeLocked(c)
			}
			s.dropTokenLocked(c)
			if c.done {
				s.mu.Unlock()
				return c.answers, nil
			}
			s.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// takeLocked pops the oldest queued calls, up to MaxBatch decisions in all.
// Calls whose context already ended are dropped (they return by
// themselves).
func (s *Store) takeLocked() []*call {
	n, i := 0, 0
	var take []*call
	for ; i < len(s.queue); i++ {
		c := s.queue[i]
		if c.ctx.Err() != nil {
			c.queued = false
			continue
		}
		if n+len(c.batch) > s.cfg.MaxBatch && n > 0 {
			break
		}
		c.queued = false
		take = append(take, c)
		n += len(c.batch)
	}
	rest := copy(s.queue, s.queue[i:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	return take
}

// dropTokenLocked passes on a flush slot c was handed but will not use
// (it was answered by another flush, or its context ended).
func (s *Store) dropTokenLocked(c *call) {
	if c.token {
		c.token = false
		s.releaseLocked()
	}
}

// removeLocked takes c out of the queue.
func (s *Store) removeLocked(c *call) {
	for i, q := range s.queue {
		if q == c {
			copy(s.queue[i:], s.queue[i+1:])
			s.queue[len(s.queue)-1] = nil
			s.queue = s.queue[:len(s.queue)-1]
			break
		}
	}
	c.queued = false
}

// releaseLocked gives up a flush slot: to the oldest waiter not already
// holding one, which then flushes the next batch, or back to the pool.
func (s *Store) releaseLocked() {
	for _, c := range s.queue {
		if !c.token {
			c.token = true
			wake(c)
			return
		}
	}
	s.inflight--
}

// wake nudges c to look at its state again; a nudge already pending is
// enough, since c reads its state under the lock after every one.
func wake(c *call) {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// flush sends take in one exchange, hands every caller its answers, then
// releases the slot it held.
func (s *Store) flush(take []*call) {
	if len(take) == 1 && take[0].single {
		// One lone decision: no merge, so the caller's own context is the
		// exchange's and the cheaper single call is used.
		c := take[0]
		d, err := s.bs.Decide(c.ctx, c.batch[0])
		s.finish(take, []gcra.Answer{{Decision: d, Err: err}})
		return
	}
	if len(take) == 1 {
		c := take[0]
		s.finish(take, s.bs.DecideMany(c.ctx, c.batch))
		return
	}
	n := 0
	for _, c := range take {
		n += len(c.batch)
	}
	batch := make([][]gcra.Request, 0, n)
	for _, c := range take {
		batch = append(batch, c.batch...)
	}
	ctx, cancel := s.context(take)
	answers := s.bs.DecideMany(ctx, batch)
	cancel()
	s.finish(take, answers)
}

// context is the exchange's context for a merged batch: it carries the
// values of the first caller's context but none of the callers'
// cancellation, and ends at the latest of their deadlines (a caller without
// one counts as now + Config.Timeout), so no caller's end cuts the others
// short.
func (s *Store) context(take []*call) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range take {
		d, ok := c.ctx.Deadline()
		if !ok {
			d = time.Now().Add(s.cfg.Timeout)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(take[0].ctx), latest)
}

// finish hands each call its slice of answers and releases the flush slot.
func (s *Store) finish(take []*call, answers []gcra.Answer) {
	s.mu.Lock()
	off := 0
	for _, c := range take {
		c.answers = answers[off : off+len(c.batch) : off+len(c.batch)]
		off += len(c.batch)
		c.done = true
		wake(c)
	}
	s.releaseLocked()
	s.mu.Unlock()
}
