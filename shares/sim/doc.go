// Package sim is the deterministic multi-region simulator of allot: it runs
// the real control-plane protocol (v2: a [shares.Leader] per leadership term,
// and a [shares.Pod] per regional pod) against synthetic traffic on a
// simulated clock, and measures how close the world comes to one global
// limiter.
//
// # The model
//
// N regions of [Spec.Pods] pods each (two by default) serve one tenant. A
// region has one GCRA key (its Redis), decided with the pure twin
// ([gcra.DecideMicros]); each fresh arrival (cost 1) goes to one of the
// region's pods uniformly at random, and the pod decides it against the
// region's key with the limit it enforces (shares.Pod.Effective: its grant
// while its lease is valid, its floor after, nothing before its first
// grants), so the region's Redis path enforces at most the largest rate its
// pods enforce; the twin's no-mint conversion handles every change of
// limit. Each region draws arrivals from its own [Traffic] (a rate
// [Profile]: constant, step, ramp, diurnal, flash crowd, on/off; Poisson or
// evenly spaced with jitter), and clients may retry denials ([Retry]). Every
// interval P each pod, on its own phase, sends a PodReport (its offered and
// admitted units, the term and epoch it applied); the leader answers after a
// delay with a lease and the region's grants changed since that epoch (a
// full sync for a pod of another term); a pod that applied a shrink reports
// again at once (at most once per P). Every P the leader rebalances, and it
// grows as soon as a report acknowledges the shrink a grow waits for.
// Nothing is written to etcd. Faults: a region cut off from the coordinator
// ([Partition]: its pods' reports and their answers lost), a leader failover
// ([Failover]: the leader dies; after a gap a new term starts, which learns
// for Lease + the session TTL, renewing nothing and granting nothing, so
// pods fall back to their floors once the old term's leases lapse), and lost
// reports. The first term is taken to have started one learning period
// before the run: the scenarios measure a running system, not the cold
// start of its coordinator.
//
// # The measures
//
// The ideal is one central GCRA with (R, B) over the merged arrivals of all
// regions, retries included as they arrived. Over-admission is the worst, over
// W ∈ {1, 10, 60 s} and every window of length W, of admitted − (B + R·W),
// floored at 0 (a central limiter scores 0 by construction). Utilisation is
// admitted ÷ ideal after the warm-up. Convergence after an event is the time
// until the world's and every region's admitted rate (3-s centred mean) stay
// within 5% of R of the ideal split d_i·min(1, R/D) for 5 s. Region error is
// the mean |admitted_i − d_i·min(1, R/D)| over steady seconds, in % of R.
// Grant changes count the Changes the leaders made (they reach pods in
// report answers). I4 is checked directly: the largest sum over regions of
// the largest rate (and burst) any pod of the region enforces, at one
// instant (no Redis fails in the scenarios, so no fail-open rate is in
// force).
// See [Result] and [Row].
//
// # Determinism, clocks and concurrency
//
// A run is a discrete-event loop over one binary heap ordered by (time,
// sequence): no goroutines, no wall clock, and seeded PCG streams (one per
// region's fresh traffic, one for the network, one for retries, one for the
// load balancers that pick a pod), so the same
// seed gives identical results, and every mode of a scenario sees the same
// fresh arrivals. Simulated time is authoritative; it starts at a fixed
// instant. Run is safe to call from several goroutines on distinct Specs (a
// Spec is only read).
package sim
