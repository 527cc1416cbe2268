// Package membership tells a regional pod how many pods of its region are
// alive, through hashicorp/memberlist gossip (SWIM: random probes, indirect
// probes through other members, suspicion before declaring a member dead).
//
// The live pod count feeds the open fallback rate (grant / live pods) and
// lease sizing in package regional: a pod that leaves gracefully is dropped
// from every count within a gossip round or two; a pod that dies without
// leaving is suspected after a failed probe and declared dead when its
// suspicion times out, a few seconds with the defaults (Config documents the
// formula).
//
// # Invariants
//
//   - LivePods is at least 1: a pod always counts itself, also before Run
//     has started and after it has returned.
//   - Only pods of the same region are counted. The region is memberlist's
//     cluster label, prefixed to every packet and stream (and authenticated
//     when a SecretKey is set), so a pod of another region that is pointed at
//     this region's seeds is refused at the transport and never appears in
//     Members; its join attempts fail and are counted.
//   - Suspect members still count as live (memberlist's own rule). For the
//     fallback this errs towards a smaller per-pod share, never a larger one.
//   - New copies its Config; the caller's value is never changed, and the
//     memberlist configuration is built fresh for every Run.
//   - memberlist's global go-metrics sink is left alone (it discards by
//     default); this package exports its own metrics through the Registerer
//     it is given.
//
// # Concurrency
//
// Run owns every goroutine memberlist starts: it creates the memberlist,
// joins, and when its context ends it leaves (broadcasting the departure,
// bounded by LeaveTimeout), shuts memberlist down and returns only after
// memberlist's transport has stopped. Run may be called once. LivePods,
// Members, Addr and Ready are safe for concurrent use at any time and never
// block on the network.
//
// # Clocks
//
// memberlist's probe and suspicion timers run on the pod's local clock; no
// clock is shared between pods and nothing here is ordered by time across
// pods.
package membership
