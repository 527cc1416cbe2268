// Package coordinator is allot's coordinator: one leader, elected through
// etcd, turns the traffic regional pods report into grants every rebalance
// interval and writes them to etcd, fenced so that a deposed leader cannot
// write. Followers answer reports with the leader's address. It also serves
// the admin API (budgets, policy, shares, status) over HTTP JSON and gRPC,
// one implementation behind both, and a status page.
//
// Leadership is tied to an etcd session (concurrency.Session, TTL
// Config.SessionTTL): the leader acts only while its session lives, every
// grant write compares the election key's create revision, and it resigns
// on shutdown. A new leader resumes from the grants persisted in etcd
// (shares.Allocator.Restore).
//
// Pods report individually; the leader answers each at once with a lease
// and the region's minimum epoch, accumulates the pods' usage per region,
// and folds it into the allocator once per rebalance: a region's
// acknowledged epoch is the smallest applied epoch of its pods whose leases
// may still run. That epoch is also passed on at once (shares.Allocator.Ack):
// when it unblocks a grow that waited for a shrink's acknowledgement, the
// report handler signals the leader loop (without blocking), which writes
// those grows (shares.Allocator.Grow) before the next tick. The loop stays
// the only writer, and every write is fenced.
//
// Clocks: leases and rebalances run on Config.Now (the leader's clock);
// pods count their leases on their own monotonic clocks from when they sent
// the report, so they always stop first.
//
// Concurrency: Coordinator methods are safe for concurrent use; Run owns
// every goroutine the coordinator starts and waits for them.
package coordinator
