package gcra

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// SettleMicros is the settle step of reserve-then-settle on one key: a
// decision charged reserved units under l, and the caller now knows the
// actual cost. The key is first restated under l (Convert: a grant that
// changed since is undone without minting), then:
//
//   - actual < reserved: the unused units are refunded: the TAT moves back
//     by (reserved − actual)·T, but never before now, so the key never ends
//     above full (a key that refilled meanwhile gets back only what it
//     lacks; a missing key, already full, gets nothing). No unit is minted.
//   - actual > reserved: the excess is charged as debt: the TAT moves on by
//     (actual − reserved)·T from max(TAT, now), past the burst if need be;
//     later requests wait until it is paid (a denial's RetryAfter says how
//     long).
//   - actual == reserved: nothing changes.
//
// It returns the key's new state and whether it must be written. It does
// not validate: l valid, 0 ≤ reserved ≤ l.Burst, actual ≥ 0 and (actual −
// reserved)·l.T ≤ MaxWindow (CheckActual). The settle script is its exact
// twin.
func SettleMicros(s State, now int64, l Limit, reserved, actual int64) (State, bool) {
	if actual == reserved {
		return s, false
	}
	converted := s.Exists() && (s.T != l.T || s.Burst != l.Burst)
	s = Convert(s, now, l)
	if actual < reserved {
		if !s.Exists() || s.TAT <= now {
			return s, converted // full already
		}
		tat := s.TAT - (reserved-actual)*l.T
		if tat < now {
			tat = now
		}
		return State{TAT: tat, T: l.T, Burst: l.Burst}, true
	}
	tat := now
	if s.Exists() && s.TAT > now {
		tat = s.TAT
	}
	return State{TAT: tat + (actual-reserved)*l.T, T: l.T, Burst: l.Burst}, true
}

// CheckActual reports whether actual can settle a reservation of reserved
// units under l: a whole number ≥ 0 whose debt, if any, fits a key's window.
func (l Limit) CheckActual(reserved, actual int64) error {
	if actual < 0 {
		return fmt.Errorf("%w: got %d", ErrActual, actual)
	}
	if actual > reserved && l.T > 0 && actual-reserved > maxWindowMicros/l.T {
		return fmt.Errorf("%w: %d units over the %d reserved owe more than a key can hold under this limit (at most %d over)",
			ErrActual, actual-reserved, reserved, maxWindowMicros/l.T)
	}
	return nil
}

// Reservation is what one admitted decision charged, kept by a Settler
// until it is settled or expires: each request's key, the limit and the
// cost it was charged.
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
	// Reserve keeps r for ttl. It is called after r's decision was
	// allowed; a reservation that could not be kept only means the
	// decision cannot be settled (its charge stands).
	Reserve(ctx context.Context, r Reservation, ttl time.Duration) error
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
	return SettleMicros(s, now, l, 0, cost)
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
