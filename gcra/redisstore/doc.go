// Package redisstore is the Redis adapter of the GCRA core: a gcra.Store
// (and gcra.BatchStore) that runs the embedded Lua scripts of package gcra
// on a go-redis v9 UniversalClient, so a single node and a Redis Cluster
// both work.
//
// # One round trip per decision
//
// A decision of one request runs the single-key script, several the
// composite script; each is one EVALSHA (falling back to EVAL when the
// server has not cached the script). DecideMany sends many decisions in one
// pipeline. In a Cluster all keys of one composite decision must share a
// slot: build them with package gcra/keys, whose hash tag is the tenant.
//
// # Clock
//
// Time is Redis's: the scripts read TIME. Nothing in this package reads the
// pod's clock to decide (invariant I7), so clock skew between pods cannot
// grant extra units.
//
// # Errors and deadlines
//
// Every call honours its context's deadline, which is why New insists that
// the client was built with ContextTimeoutEnabled. Requests are validated
// before they reach Redis (errors from gcra.ValidateRequests). Failures of
// the call are *Error values classified by a sentinel, so a failure policy
// can branch with errors.Is: ErrTimeout (deadline passed or the server is
// stalled), ErrUnavailable (connection refused or lost, cluster down,
// loading, read-only replica), ErrRejected (Redis answered the script with
// an error: cross-slot keys, a key holding something else), ErrBadReply (a
// reply of the wrong shape, carrying a *ReplyError), and ErrCanceled.
//
// # Concurrency
//
// A Store is safe for concurrent use and holds no state besides the client
// and the two scripts; it starts no goroutine.
package redisstore
