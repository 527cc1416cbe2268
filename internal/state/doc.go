// Package state is allot's durable state in etcd: the policy document
// (versioned, with history and rollback), tenant budgets set through the
// admin API, and the grants the coordinator writes for each region. It holds
// the key layout and the codecs that the coordinator (the writer) and the
// regional pods (the watchers) share.
//
// Layout under a prefix (default /allot/v1/):
//
//	policy/current              the current policy version (JSON record)
//	policy/history/<version>    every version ever applied, 20-digit zero-padded
//	budgets/<tenant>            a tenant's budget (tenant path-escaped)
//	grants/<region>/<tenant>    a region's grant for a tenant
//
// Invariants (I8): a write is validated before anything is sent; it is one
// etcd transaction; a write that loses a race to another writer changes
// nothing and returns ErrConflict; every policy version is kept and any can
// be restored exactly.
//
// Concurrency: a Store is safe for concurrent use; it holds no state but its
// client. Clock: times in records are informational, taken from the writer.
package state
