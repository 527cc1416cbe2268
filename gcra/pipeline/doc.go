// Package pipeline merges concurrent decisions into pipelines: a Store
// wraps a gcra.BatchStore (package gcra/redisstore) and sends the Decide and
// DecideMany calls that arrive together as one DecideMany, so one process
// spends one round trip on many decisions instead of one each.
//
// # Natural batching, no timer
//
// There is no batch window. A caller that finds a flush slot free (fewer
// than Config.Flushers exchanges in flight) sends at once, with whatever is
// queued, so at low load latency is that of the store itself. Callers that
// arrive while every slot is busy queue; when an exchange ends, the caller
// that ran it hands its slot to the oldest waiter, which sends the queue
// (up to Config.MaxBatch decisions) as the next pipeline. The busier the
// store, the larger the batches.
//
// # Invariants
//
// Each decision is decided exactly as the underlying store would decide it
// (the store's scripts run one by one in Redis; a pipeline changes only how
// they travel), so the GCRA invariants hold through a Store unchanged. Every
// caller receives the answers to its own decisions, in order, or an error.
// A queued decision whose caller's context ended before a flush took it
// is not sent.
//
// # Contexts and deadlines
//
// A caller whose context ends while it waits in the queue returns ctx's
// error at once. A lone call (nothing else queued) is sent under the
// caller's own context. A merged exchange is not any one caller's: its
// context carries the values of the first caller's context, none of the
// callers' cancellations, and the latest deadline among the callers (a
// caller without a deadline counts as now + Config.Timeout). A caller whose
// context ends while its decisions are already in flight still returns its
// context's error at once, unless it is the caller running that exchange:
// that one returns when the exchange ends, at the latest at that deadline.
//
// # Concurrency
//
// A Store is safe for concurrent use and starts no goroutine: every
// exchange is run by one of the callers. The clock is the underlying
// store's (Redis TIME); this package reads the pod's clock only to set
// deadlines.
package pipeline
