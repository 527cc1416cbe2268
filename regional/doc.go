// Package regional is the limiter service of one region: `allot regional`,
// several pods per region, answering decide(descriptors, cost) from the
// region's Redis with the region's grants.
//
// The decide path: descriptors → the policy's matching limits → one key per
// limit (package gcra/keys, hash tag on the tenant) → an effective (T, B):
// a budget limit enforces what the leader told this pod (shares.Pod: its
// grant while its lease is valid, the grant's floor once it lapsed, the cold
// floor for a tenant it holds no grant of while leased, nothing before the
// first answer; see docs/protocol.md), a regional limit its full rate. Enforced limits are
// decided all or nothing in one store round trip; shadow limits ride in the
// same round trip (a pipeline) but only count would-denials; limits with a
// lease size are reserved from local leases first (package gcra/lease) and
// committed only when the others admit, given back to the lease otherwise,
// so that a decision any limit denies charges none of them (I3). Their
// units leased, served and stranded are counted per limit in
// allot_lease_units_total.
//
// Failures (I9): every store call has a timeout (Config.StoreTimeout, a few
// ms) and goes through a circuit breaker. When the store fails, each limit
// does as its on_failure says: open limits are decided together on a local
// in-memory GCRA whose buckets start empty (Redis may have spent the burst):
// a budget limit at 1/d of what the pod enforces, d the fail-open share the
// leader handed it (none without a lease: the limit denies), another limit
// at its rate divided by the larger of the gossip and the leader's pod
// counts, never above the policy's fallback_rate; closed limits deny with a
// retry-after.
// Every such decision is counted in allot_fallback_decisions_total and
// logged at a bounded rate.
//
// State: policy and budgets are mirrored from etcd (resynced after
// compaction or a lost watch); the region's grants, the lease, the cold
// floor and the fail-open share come in the leader's answers to this pod's
// reports (the changes since the epoch it applied, or all of them for a pod
// of another term), and in what the leader pushes on the pod's watch
// stream as it changes them (the same, without a lease). The lease is counted on this pod's monotonic clock from
// when the report was sent, minus Config.Drift. A change of the policy or a
// budget lowers the floors of the grants held, never raises them.
//
// Reporting: offered and admitted units per tenant are counted with atomics
// (no lock on the hot path), handed to a shares.Tracker every StepCheck, and
// sent to the leader every ReportInterval and at once on start. Early
// reports go between (docs/protocol.md, "Early reports"): a tenant whose
// offered rate stepped, or one counted for the first time, at most every
// 100 ms; an acknowledgement within 20 ms of an answer or push that lowers a
// tenant's rate or burst, since the leader may hold a grow elsewhere until
// it; and, after a report failed (its counts are dropped), another after
// 250 ms and then every 500 ms until one is answered. At most
// Config.MaxTenants tenants are counted at once; tenants idle for three
// reports are forgotten.
//
// Clocks: GCRA time is the store's (Redis TIME); Config.Now (the pod's
// clock) only times leases and reports.
//
// Concurrency: Decide and the handlers are safe for concurrent use; Run owns
// every goroutine the service starts and waits for them.
package regional
