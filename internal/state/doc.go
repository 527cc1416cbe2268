// Package state is allot's durable state in etcd: the policy document
// (versioned, with history and rollback), tenant budgets set through the
// admin API, and what coordinator leaders record (election, term, roster,
// the shard count). It holds the key layout and the codecs that the
// coordinator (the writer) and the regional pods (the watchers) share, and
// the mirrors that keep a reader's copy of the policy and the budgets in
// step with etcd.
//
// Layout under a prefix (default /allot/v1/):
//
//	policy/current              the current policy version (JSON record)
//	policy/history/<version>    every version ever applied, 20-digit zero-padded
//	budgets/<tenant>            a tenant's budget (tenant path-escaped)
//	shards/count                the coordinator shard count, written once
//	election/, term, roster/    coordinator shard 0's (shard i > 0: under shards/<i>/)
//
// No grant is ever written to etcd.
//
// Invariants (I8): a write is validated before anything is sent; it is one
// etcd transaction; a write that loses a race to another writer changes
// nothing and returns ErrConflict; every policy version is kept and any can
// be restored exactly.
//
// Mirrors: Mirror follows a prefix with raw key-values (reading everything
// again whenever its watch cannot continue); BudgetMirror and PolicyMirror
// decode on top of it and hand typed records to a handler in revision order.
// A record that fails to decode is reported (MirrorConfig.OnDecodeError and
// allot_state_decode_errors_total{kind}) and does not stop the others.
//
// Concurrency: a Store is safe for concurrent use; it holds no state but its
// client. A mirror's Run calls its handler from one goroutine, one call at a
// time, and returns once ctx ends. Clock: times in records are
// informational, taken from the writer.
package state
