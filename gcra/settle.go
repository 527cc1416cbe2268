package gcra

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// SettleMicros is the settle step of reserve-then-settle on one key: a
// decision charged reserved units under l, leaving the key's TAT at r0, and
// the caller now knows the actual cost.
//
//   - actual < reserved: the unused units are refunded, but only what the
//     reservation still holds: the TAT moves back by (reserved − actual)·T
//     at most, by r0 − now at most (what time has given back since is not
//     given twice), and never before now (the key never ends above full). A
//     key written under another limit since (its grant changed), or already
//     full, gets nothing. No unit is minted: the key is never left with
//     more than it would hold had the decision cost actual.
//   - actual > reserved: the excess is charged as debt, after restating the
//     key under l (Convert): the TAT moves on by (actual − reserved)·T from
//     max(TAT, now), past the burst if need be, but never beyond now +
//     MaxWindow (debt past 71 years is forgotten); later requests wait
//     until it is paid (a denial's RetryAfter says how long).
//   - actual == reserved: nothing changes.
//
// It returns the key's new state and whether it must be written. It does
// not validate: l valid, 0 ≤ reserved ≤ l.Burst, actual ≥ 0 and (actual −
// reserved)·l.T ≤ MaxWindow (CheckActual). The settle script is its exact
// twin.
func SettleMicros(s State, now int64, l Limit, reserved, actual, r0 int64) (State, bool) {
	if actual == reserved {
		return s, false
	}
	if actual < reserved {
		if s.T != l.T || s.Burst != l.Burst || !s.Exists() || s.TAT <= now {
			return s, false
		}
		back := min((reserved-actual)*l.T, r0-now)
		if back <= 0 {
			return s, false
		}
		return State{TAT: max(s.TAT-back, now), T: l.T, Burst: l.Burst}, true
	}
	s = Convert(s, now, l)
	tat := now
	if s.Exists() && s.TAT > now {
		tat = s.TAT
	}
	tat = min(tat+(actual-reserved)*l.T, now+maxWindowMicros)
	return State{TAT: tat, T: l.T, Burst: l.Burst}, true
}

// CheckActual reports whether actual can settle a reservation of reserved
// units under l: a whole number ≥ 0 whose debt, if any, fits a key's window.
func (l Limit) CheckActual(reserved, actual int64) error {
	if actual < 0 || actual > maxWindowMicros {
		return fmt.Errorf("%w: got %d (at most %d)", ErrActual, actual, maxWindowMicros)
	}
	if actual > reserved && l.T > 0 && actual-reserved > maxWindowMicros/l.T {
		return fmt.Errorf("%w: %d units over the %d reserved owe more than a key can hold under this limit (at most %d over)",
			ErrActual, actual-reserved, reserved, maxWindowMicros/l.T)
	}
	return nil
}

// Reservation is a decision to keep, when admitted, until it is settled or
// expires: each request's key, the limit and the cost it is charged.
type Reservation struct {
	// Key is where the store keeps the reservation: it must share the
	// requests' Redis Cluster slot (keys.SettleKey).
	Key  string
	Reqs []Request
}

// Settled says what a settle did: units refunded or charged as debt per
// key (each key by the same number of units), relative to the reservation.
type Settled struct {
	Reserved, Actual int64
}

// Sentinel errors of settling.
var (
	// ErrNoReservation: no reservation under the key: it never existed,
	// expired, or was settled already. Nothing changed.
	ErrNoReservation = errors.New("gcra: no such reservation: unknown, expired or already settled")
	// ErrActual: the actual cost is negative, or its debt is beyond what a
	// key can hold.
	ErrActual = errors.New("gcra: actual cost must be a whole number of units ≥ 0, and its debt fit a key")
)

// Settler is a Store that can keep a decision's charges and settle them
// later with the actual cost (reserve, then settle).
type Settler interface {
	Store
	// DecideReserve decides r.Reqs all or nothing, as Decide does, and
	// when they are allowed keeps the reservation for ttl, in the same
	// step: what each key was charged and its TAT right after (which
	// bounds a refund).
	DecideReserve(ctx context.Context, r Reservation, ttl time.Duration) (Decision, error)
	// Settle applies SettleMicros with actual to every key of the
	// reservation kept under key, and forgets it, atomically: a second
	// settle of one reservation gets ErrNoReservation and changes
	// nothing.
	Settle(ctx context.Context, key string, actual int64) (Settled, error)
}

// ChargeMicros charges cost units to a key for a cost already spent (a
// response's real cost, reported after it): SettleMicros of a reservation
// of nothing, so past the burst if need be, never denied. The charge
// script is its twin.
func ChargeMicros(s State, now int64, l Limit, cost int64) (State, bool) {
	return SettleMicros(s, now, l, 0, cost, 0)
}

// Charger is a Store that can charge a cost already spent to keys (see
// ChargeMicros), all in one step.
type Charger interface {
	Store
	Charge(ctx context.Context, reqs []Request) error
}

// ValidateCharges checks a charge before any store sees it: at least one
// request, no empty or repeated key, every limit valid, every cost ≥ 1 and
// its debt within a key's window (a cost may exceed the burst).
func ValidateCharges(reqs []Request) error {
	if len(reqs) == 0 {
		return ErrNoRequests
	}
	for i := range reqs {
		r := &reqs[i]
		switch {
		case r.Key == "":
			return &ItemError{Index: i, Err: ErrKey}
		case r.Cost < 1:
			return &ItemError{Index: i, Err: fmt.Errorf("%w: a charge of %d", ErrActual, r.Cost)}
		}
		if err := r.Limit.Validate(); err != nil {
			return &ItemError{Index: i, Err: err}
		}
		if err := r.Limit.CheckActual(0, r.Cost); err != nil {
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
