package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/internal/coalesce"
)

// Config configures a Store: MaxBatch caps the decisions sent in one
// pipeline (a call carrying more is sent on its own, unmerged; default
// 128), Flushers is how many pipelines may be in flight at once (default
// 4), Timeout bounds a merged pipeline for callers whose context has no
// deadline (default 1s). It is the natural-batching configuration of
// internal/coalesce, which does the merging. Start from DefaultConfig.
type Config = coalesce.Config

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return coalesce.DefaultConfig() }

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
	s := &Store{bs: bs}
	co, err := coalesce.New(s.send, cfg)
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
