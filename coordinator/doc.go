// Package coordinator is allot's coordinator: one leader, elected through
// etcd, turns the traffic regional pods report into grants every rebalance
// interval and answers each pod's report with its lease and its region's
// grants that changed since the epoch the pod applied (shares.Leader; the
// rules are in docs/protocol.md). A report that says a tenant's rate stepped
// is rebalanced as it arrives, and every change is pushed to the pods of its
// region that watch (Coordinator.Watch). Nothing per grant is written to
// etcd.
// Followers answer reports with the leader's address. It also serves the
// admin API (budgets, policy, shares, status) over HTTP JSON and gRPC, one
// implementation behind both, and a status page (package
// coordinator/statuspage, handed a snapshot after each rebalance and doing
// its work outside the coordinator's lock).
//
// Leadership is tied to an etcd session (concurrency.Session, TTL
// Config.SessionTTL): the leader acts only while its session lives and
// resigns on shutdown. Each leadership records its term in etcd (one write,
// fenced on the election key); a term — and a new one whenever the policy's
// region set changes — learns for Lease + SessionTTL before it grants,
// unless no earlier term was ever recorded.
//
// Reports are authenticated (Config.Reports: a region token or a verified
// client certificate) and validated by shares.Leader. A region's
// acknowledged epoch is the smallest epoch applied by its pods whose leases
// may still run; when an acknowledgement unblocks a grow that waited for a
// shrink, the report handler signals the leader loop (without blocking),
// which grows (shares.Leader.Grow) before the next tick.
//
// Tenants: every tenant with a budget record or a policy entry, and those
// whose traffic pods reported within Config.TenantIdleTimeout (the others
// are forgotten, their grants dropped), at most Config.MaxTenants in all.
//
// Clocks: leases and rebalances run on Config.Now (the leader's clock);
// pods count their leases on their own monotonic clocks from when they sent
// the report, so they always stop first.
//
// State: the policy and the budget records are mirrored from etcd
// (state.PolicyMirror, state.BudgetMirror) for the whole run; the leader
// rebalances from those copies, a new policy as it arrives, and reads etcd
// only for elections, terms and the roster.
//
// Concurrency: Coordinator methods are safe for concurrent use; Run owns
// every goroutine the coordinator starts and waits for them.
package coordinator
