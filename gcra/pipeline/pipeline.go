package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/internal/coalesce"
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
	bs gcra.BatchStore
	co *coalesce.Coalescer[[]gcra.Request, gcra.Answer]
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
	s := &Store{bs: bs}
	co, err := coalesce.New(s.send, coalesce.Config(cfg))
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	s.co = co
	return s, nil
}

// send is one exchange: a lone decision uses the store's cheaper single
// call, anything more one pipeline.
func (s *Store) send(ctx context.Context, batch [][]gcra.Request) []gcra.Answer {
	if len(batch) == 1 {
		d, err := s.bs.Decide(ctx, batch[0])
		return []gcra.Answer{{Decision: d, Err: err}}
	}
	return s.bs.DecideMany(ctx, batch)
}

// Decide decides reqs as the underlying store would, in the next pipeline
// (at once if a flush slot is free). Invalid requests return the error of
// gcra.ValidateRequests without being queued.
func (s *Store) Decide(ctx context.Context, reqs []gcra.Request) (gcra.Decision, error) {
	if err := gcra.ValidateRequests(reqs); err != nil {
		return gcra.Decision{}, err
	}
	a, err := s.co.Do(ctx, [][]gcra.Request{reqs})
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
	if len(batch) > s.co.MaxBatch() {
		return s.bs.DecideMany(ctx, batch)
	}
	a, err := s.co.Do(ctx, batch)
	if err != nil {
		a = make([]gcra.Answer, len(batch))
		for i := range a {
			a[i].Err = err
		}
	}
	return a
}
