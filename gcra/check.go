package gcra

import "context"

// CheckMicros checks a key against l at now without charging it: the
// decision of a request of cost 0. It is allowed while the key is not past
// its limit (its TAT at most B·T ahead of now: a key charged past its burst,
// by ChargeMicros or SettleMicros, is denied until the debt is paid), with
// the units left and the wait until the key is full, or on a denial the
// wait until it is back within its limit. A key under another limit is
// read restated (Convert), as a decision would; nothing is written. The
// check script is its twin.
func CheckMicros(s State, now int64, l Limit) Result {
	_, r, _ := DecideMicros(s, now, l, 0)
	return r
}

// Checker is a Store that can check a key without charging it (see
// CheckMicros).
type Checker interface {
	Store
	Check(ctx context.Context, key string, l Limit) (Result, error)
}
