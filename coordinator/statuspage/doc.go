// Package statuspage is the coordinator's status page (GET / on its HTTP
// server): who leads, the regions' reports, a chart over time of what each
// region offered, admitted and was granted for the busiest tenants (hand-drawn
// SVG), and the tenants' grants.
//
// The coordinator hands the page a Snapshot after each rebalance: plain
// values copied from the leader while the coordinator holds its lock (the
// busiest tenants, their rates and grants per region), so that the page's
// own work — choosing the charted tenants, keeping their series, drawing
// and rendering — runs outside that lock, under the page's own, and never
// delays a pod's report. At each request the page asks its Source for the
// status header and the grants table.
//
// Concurrency: a Page is safe for concurrent use; Commit is called by one
// goroutine at a time (the coordinator's leader loop). It starts no
// goroutines. Clock: the snapshots' At (the leader's clock) places samples
// on the chart.
package statuspage
