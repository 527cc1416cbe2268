package gcra

import (
	"fmt"
	"time"
)

// Item is one limit of a composite decision: a key's state, its limit and
// the cost charged to it.
type Item struct {
	State State
	Limit Limit
	Cost  int64
}

// Outcome is a composite decision: the result, the index of the limiting
// item (on a denial the one with the largest retry-after, otherwise the one
// with the fewest remaining units; the first on ties), and per item the state
// to store and whether it must be written.
type Outcome struct {
	Result
	Limiting int
	States   []State
	Write    []bool
}

// DecideAllMicros decides every item at now, all or nothing: every item's new
// TAT is computed first, and they are stored only when every item allows.
// A denial writes nothing but keys restated under a changed limit (which
// changes no available unit). The composite Lua script mirrors it exactly.
// Items must be valid (see DecideAll).
func DecideAllMicros(items []Item, now int64) Outcome {
	out := Outcome{
		Result:   Result{Allowed: true},
		States:   make([]State, len(items)),
		Write:    make([]bool, len(items)),
		Limiting: 0,
	}
	type part struct {
		s  State
		r  Result
		cv bool
	}
	parts := make([]part, len(items))
	first := true
	for i, it := range items {
		converted := it.State.Exists() && (it.State.T != it.Limit.T || it.State.Burst != it.Limit.Burst)
		ns, r, _ := DecideMicros(it.State, now, it.Limit, it.Cost)
		parts[i] = part{s: ns, r: r, cv: converted}
		if !r.Allowed {
			if out.Allowed || r.RetryAfter > out.RetryAfter {
				out.Limiting = i
				out.RetryAfter = r.RetryAfter
			}
			out.Allowed = false
		} else if out.Allowed && (first || r.Remaining < out.Remaining) {
			out.Limiting = i
		}
		if first || r.Remaining < out.Remaining {
			out.Remaining = r.Remaining
		}
		if first || r.ResetAfter > out.ResetAfter {
			out.ResetAfter = r.ResetAfter
		}
		first = false
	}
	for i, p := range parts {
		if out.Allowed {
			out.States[i], out.Write[i] = p.s, true
			continue
		}
		// Denied: keep the old TAT, restated under the new limit if it changed.
		out.States[i] = Convert(items[i].State, now, items[i].Limit)
		out.Write[i] = p.cv
	}
	return out
}

// DecideAll validates every item and decides them all at now, all or nothing.
func DecideAll(items []Item, now time.Time) (Outcome, error) {
	for i := range items {
		if err := items[i].Limit.Validate(); err != nil {
			return Outcome{}, &ItemError{Index: i, Err: err}
		}
		if err := items[i].Limit.CheckCost(items[i].Cost); err != nil {
			return Outcome{}, &ItemError{Index: i, Err: err}
		}
	}
	return DecideAllMicros(items, now.UnixMicro()), nil
}

// ItemError names the item of a composite decision that is invalid.
type ItemError struct {
	Index int
	Err   error
}

func (e *ItemError) Error() string { return fmt.Sprintf("limit %d: %v", e.Index, e.Err) }

// Unwrap returns the underlying sentinel.
func (e *ItemError) Unwrap() error { return e.Err }
