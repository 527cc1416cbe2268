// Package memstore is the in-memory GCRA store: the same decisions as the
// Redis scripts (it runs the pure twin, gcra.DecideMicros and
// gcra.DecideAllMicros), held in a sharded map. `allot dev` uses it, and the
// regional service uses it as the local fallback when Redis fails.
//
// # Invariants
//
// Decisions equal the twin's at the clock's instant. Keys live as long as
// they would in Redis: a key written at now with state s expires after
// gcra.Expiry(s, now) (its TAT rounded up to a millisecond, plus one), and an
// expired key is a missing key. Expired keys are dropped lazily when read
// and by Sweep, which the owner calls or runs on a ticker with Run. A
// composite decision locks every shard it touches (in shard order), so it is
// all or nothing like the composite script.
//
// # Concurrency
//
// A Store is safe for concurrent use. It starts no goroutine; Run is the
// only loop, owned by its caller and stopped by its context.
//
// # Clock
//
// The injected Config.Clock is authoritative, read once per decision. It
// may move backwards; decisions stay as the twin defines them.
package memstore
