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
// Composite decisions, keys whose burst is below Config.MinBurst and costs
// above the lease size are not leased: they go to the store unchanged.
//
// Accounting: every leased unit is served, stranded or held.
//
// # Concurrency
//
// A Limiter is safe for concurrent use. Decisions served from a lease take
// only the key's mutex. One decision per key refills at a time; the others
// wait for it (waiting honours the context); other keys are not affected. It starts no goroutine; Run is a loop its owner
// runs and stops through the context.
//
// # Clock
//
// Config.Clock measures lease lifetimes. It should be monotonic (time.Now's
// readings are). The store keeps its own clock (Redis TIME for the Redis
// store).
package lease
