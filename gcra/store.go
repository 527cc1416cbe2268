package gcra

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors for malformed requests to a Store.
var (
	ErrNoRequests   = errors.New("gcra: a decision needs at least one request")
	ErrKey          = errors.New("gcra: key must not be empty")
	ErrDuplicateKey = errors.New("gcra: a key appears twice in one decision")
)

// Request is one limit of a decision: the key holding its state, the limit
// enforced on it and the cost charged to it.
type Request struct {
	Key   string
	Limit Limit
	Cost  int64
}

// Decision is a store's answer to one decision: the combined result and the
// index (into the requests) of the limiting one, as in Outcome.
type Decision struct {
	Result
	Limiting int
}

// Store decides requests against stored state. One request is a plain GCRA
// decision; several are a composite decision, all or nothing (see
// DecideAllMicros): every key is charged only when every limit allows.
// Implementations are safe for concurrent use.
type Store interface {
	Decide(ctx context.Context, reqs []Request) (Decision, error)
}

// Answer is one decision of a batch: its Decision, or the error that
// replaced it.
type Answer struct {
	Decision
	Err error
}

// BatchStore is a Store that can also decide many independent decisions in
// one exchange (a Redis pipeline). DecideMany returns one Answer per element
// of batch, in order; each element is decided as Decide would.
type BatchStore interface {
	Store
	DecideMany(ctx context.Context, batch [][]Request) []Answer
}

// ValidateRequests checks a decision before any store sees it: at least one
// request, no empty or repeated key, every limit and cost valid. Errors for
// one request are an *ItemError naming its index.
func ValidateRequests(reqs []Request) error {
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
		if err := r.Limit.CheckCost(r.Cost); err != nil {
			return &ItemError{Index: i, Err: err}
		}
	}
	if len(reqs) <= 16 {
		for i := 1; i < len(reqs); i++ {
			for j := 0; j < i; j++ {
				if reqs[i].Key == reqs[j].Key {
					return &ItemError{Index: i, Err: fmt.Errorf("%w: %q", ErrDuplicateKey, reqs[i].Key)}
				}
			}
		}
		return nil
	}
	seen := make(map[string]struct{}, len(reqs))
	for i := range reqs {
		if _, dup := seen[reqs[i].Key]; dup {
			return &ItemError{Index: i, Err: fmt.Errorf("%w: %q", ErrDuplicateKey, reqs[i].Key)}
		}
		seen[reqs[i].Key] = struct{}{}
	}
	return nil
}
