// Package lease serves most decisions of busy keys from local leases, as
// in the seed's LeasedLimiter: a pod takes L units of a key from the global
// GCRA in one store call and answers the next decisions from memory until
// the units run out or the lease's TTL passes.
//
// # Invariants
//
// A Limiter never admits more than the store counted: every unit it admits
// was charged by the store, either as part of a lease or as a request of its
// own. Its error runs the other way: units leased and then not used before
// the TTL are stranded (the global limit charged them, nobody used them).
// They are counted and exposed in Stats, so operators can size L. When a
// full lease is not available the Limiter falls back to a request of just
// the decision's cost, which limits that loss near the edge of the quota.
// Composite decisions, keys whose burst is below Config.MinBurst (or the
// lease size) and costs above the lease size are not leased: they go to the
// store unchanged. The lease size is Config.Size, or the size each call of
// DecideSized names, so that one Limiter, with one Run, serves keys leased
// in different sizes.
//
// Accounting: every leased unit is served, stranded or held.
//
// # Reservations
//
// A decision that is part of a larger one (a leased limit beside limits
// decided elsewhere) uses Reserve: the units it admits are the caller's
// until it commits them, when the whole decision admits, or cancels them,
// when another part denies. Cancel gives them back to the key's lease, so a
// denied decision consumes nothing of it; units the store admitted to a
// fallback request become a lease of the key, so the store's count is not
// lost either. A unit is served at most once (a cancelled unit is back in
// the lease for the next decision, never in two places) and no unit is
// added that the store did not count. Reserve counts, per Class (one per
// limit, say), the units leased, served (committed) and stranded, for
// metrics of stranded quota.
//
// # Concurrency
//
// A Limiter is safe for concurrent use. A decision served from a lease
// takes no lock and allocates nothing: one lookup of the key, one read of
// the clock, one compare-and-swap on a word that packs the units the key
// holds with the decisions served from them (so Stats stays exact without
// a counter shared by all keys). One decision per key refills at a time;
// the others wait for it (waiting honours the context); other keys are
// not affected. Sweeps and refills of a key exclude each other; only they
// write units off or add them. It starts no goroutine; Run is a loop its
// owner runs and stops through the context.
//
// # Clock
//
// Config.Clock measures lease lifetimes; by default the monotonic clock,
// read alone (time.Since, one clock read; time.Now makes two). With
// Config.Tick set and Run running, decisions served from a lease read a
// coarse clock instead, one atomic load, that Run advances every Tick and
// refills and sweeps advance whenever they read the clock. The coarse clock
// only ever lags the clock, so a lease never ends early; it may be served
// past its TTL by at most Tick plus the time the Go scheduler keeps Run's
// goroutine from running (on a machine that is not starved, the TTL is in
// effect TTL + Tick). Whatever the lag, units served late are units the
// store already admitted, at most Size − 1 per key; nothing is minted.
// Refills, expiry write-offs and sweeps always read the clock itself. The
// store keeps its own clock (Redis TIME for the Redis store).
package lease
