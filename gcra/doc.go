// Package gcra is the Generic Cell Rate Algorithm: a rate limit held in one
// number per key.
//
// # The math
//
// A limit is a rate (Count units per Period) and a burst B (units admissible
// at once from idle). The emission interval is T = Period/Count, rounded up
// to a whole microsecond so that the enforced rate never exceeds the
// configured one. Each key stores its theoretical arrival time (TAT): the
// instant at which the key would be fully rested had requests arrived exactly
// at the allowed rate. A request of cost c at time now does:
//
//	tat      = max(TAT, now)
//	new_tat  = tat + c·T
//	allow_at = new_tat − B·T
//	allowed  ⇔ allow_at ≤ now
//
// When allowed, TAT becomes new_tat, remaining = ⌊(now − allow_at)/T⌋ and the
// key is fully rested again after reset_after = new_tat − now. When denied,
// nothing changes and the request conforms after retry_after = allow_at − now.
// A request with c > B can never conform: it is an error
// ([ErrCostExceedsBurst]), never a finite retry-after.
//
// This is equivalent to a token bucket of depth B refilled at 1/T, and admits
// at most B + ⌊Δ/T⌋ units in any window of length Δ.
//
// # Changing a live limit never mints units
//
// A key remembers the (T, B) it was written under. When a key is next decided
// under another limit (T', B'), its state is first converted so that the
// units available do not grow: with a = B − (tat − now)/T available under the
// old limit, the new available is a' = min(a, B') and
// TAT' = now + (B' − a')·T', rounded up to a whole microsecond. See
// [Convert]. Regional grants change (T, B) every few seconds; without this a
// shrinking grant would hand out units its old debt had already spent.
//
// # Integers and units
//
// All arithmetic is on int64 microseconds, mirrored exactly by the Lua
// scripts (where Lua's doubles are exact below 2^53). Validation keeps every
// intermediate value below 2^53: T ≥ 1 µs (rates above 1,000,000 units per
// second per key are rejected: count in larger units), and B·T ≤ [MaxWindow]
// (so rates below one unit per MaxWindow are rejected too, and
// [Rate.MaxBurst] is the largest burst of a rate). A share of a limit — a
// region's grant of a tenant's budget — is slower than the whole and may
// rest longer; [Fit] builds its limit, lowering the burst to fit, so that any
// share of a valid limit is a valid limit or admits nothing.
//
// # Lua scripts and stores
//
// SingleScript and CompositeScript return the embedded Lua that runs this
// math in Redis, reading Redis TIME; DecideMicros and DecideAllMicros are
// their exact twins (invariant I1, tested against a real redis-server). A
// key holds the string "tat:T:B" and expires with PX = Expiry. Store is the
// interface both stores implement (gcra/redisstore on Redis, gcra/memstore
// in memory); gcra/lease serves decisions from leased units over any Store.
//
// # Clocks
//
// This package is pure: time is passed in. The Redis store takes time from
// Redis TIME; the in-memory store from an injected clock.
package gcra
