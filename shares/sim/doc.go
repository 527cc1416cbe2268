// Package sim is the deterministic multi-region simulator of allot: it runs
// the real shares engine (a leader's [shares.Allocator] and each region's
// [shares.Region]) against synthetic traffic on a simulated clock, and
// measures how close the world comes to one global limiter.
//
// # The model
//
// N regions each enforce, for one tenant, what their shares.Region says is
// effective (the grant while the lease is valid, else the floor) with the
// pure GCRA twin ([gcra.DecideMicros]) on one key per region; the twin's
// no-mint conversion handles every change of the grant. Each region draws
// fresh arrivals (cost 1) from its own [Traffic] (a rate [Profile]: constant,
// step, ramp, diurnal, flash crowd, on/off; Poisson or evenly spaced with
// jitter), and clients may retry denials ([Retry]). Every interval P a region
// sends a Report (offered and admitted units, the highest epoch applied);
// the leader answers with a Renewal after a delay; every P the leader
// rebalances and the changed grants are persisted (as etcd would) and reach
// each region after a delay, in the order written. Faults: a region cut off
// from coordinator and etcd ([Partition]: reports and renewals lost, grants
// delivered once it heals, as a resumed watch would), a leader failover
// ([Failover]: the Allocator discarded, a new one Restored from the persisted
// Changes after a gap), and lost reports.
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
// Writes count the Changes the leaders returned. I4 is checked directly: the
// largest sum over regions of the enforced rate (and burst) at one instant.
// See [Result] and [Row].
//
// # Determinism, clocks and concurrency
//
// A run is a discrete-event loop over one binary heap ordered by (time,
// sequence): no goroutines, no wall clock, and seeded PCG streams (one per
// region's fresh traffic, one for the network, one for retries), so the same
// seed gives identical results, and every mode of a scenario sees the same
// fresh arrivals. Simulated time is authoritative; it starts at a fixed
// instant. Run is safe to call from several goroutines on distinct Specs (a
// Spec is only read).
package sim
