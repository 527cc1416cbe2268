package gcra

import (
	"context"
	"fmt"
)

// RestateMicros restates a key under l at now without deciding anything:
// the state a decision at now would start from (Convert), and whether it
// must be written, which it must only when the key exists under another
// limit. It charges nothing and mints nothing, so restating a key early
// is never less safe than the next decision on it: a pod that starts
// enforcing a new limit on a key restates it at once, and from then on
// the key refills at the new limit's rate, not at the old one's until its
// next decision. The restate script is its twin.
func RestateMicros(s State, now int64, l Limit) (State, bool) {
	if !s.Exists() || s.T <= 0 || (s.T == l.T && s.Burst == l.Burst) {
		return s, false
	}
	return Convert(s, now, l), true
}

// Restater is a Store that can restate keys under new limits (see
// RestateMicros), all in one step.
type Restater interface {
	Store
	// Restate restates each request's key under its limit at the store's
	// instant. Costs are ignored. A key that is missing, or already under
	// its limit, is left alone.
	Restate(ctx context.Context, reqs []Request) error
}

// ValidateRestates checks a restate before any store sees it: at least one
// request, no empty or repeated key, every limit valid (costs are not
// read).
func ValidateRestates(reqs []Request) error {
	if len(reqs) == 0 {
		return ErrNoRequests
	}
	for i := range reqs {
		r := &reqs[i]
		if r.Key == "" {
			return &ItemError{Index: i, Err: ErrKey}
		}
		if err := r.Limit.Validate(); err != nil {
			return &ItemError{Index: i, Err: err}
		}
		for j := 0; j < i; j++ {
			if reqs[j].Key == r.Key {
				return &ItemError{Index: i, Err: fmt.Errorf("%w: %q", ErrDuplicateKey, r.Key)}
			}
		}
	}
	return nil
}
