// Package shares splits each tenant's global rate budget (R units per
// second, burst B) across regions, so that the world admits what one global
// limiter would (I5) and never more (I4). It is pure: time is passed in, it
// does no I/O, starts no goroutines, keeps no globals and logs nothing.
//
// # Roles
//
// The coordinator's leader holds a [Leader]: one term, which runs an
// [Allocator]. Every pod sends a [PodReport] (offered and admitted units per
// tenant, the term and epoch of the grants it holds); [Leader.Report]
// answers with an [Answer]: a lease and the region's grants that changed
// since that epoch (all of them for a pod of another term), the cold floor
// and the pod's fail-open share. [Leader.Rebalance] (every interval),
// [Leader.Grow] (when acknowledgements make room), a report's steps (tenants
// whose rate a pod's [Tracker] saw move, rebalanced as the report arrives)
// and [Leader.FlushSteps] change grants; [Leader.Push] hands the changes to
// pods that did not report. Each pod keeps a [Pod], which says what it
// enforces for a tenant. The protocol and
// why it keeps the budget is docs/protocol.md; package protocheck checks it
// under seeded faults.
//
// # Modes
//
//   - rebalanced (default): shares follow smoothed offered demand.
//   - static: fixed weights (equal by default) over the part of R above the floors.
//   - full: every region gets all of R and B; over-admits up to N times. For
//     comparison only: it is deliberately unsafe and skips the rules below.
//   - pinned: the home region gets R (and B) less the other regions' floors,
//     which default to zero; nothing is ever granted, the floors are the split.
//
// # Floors
//
// A fraction of R (default 10%, 0 for pinned) is reserved as floors, split
// equally among the regions; the floor burst is ⌊Floor·B/n⌋, at least 1 when
// the floor rate is positive. Floors are never granted elsewhere. A region
// with no grant, or whose lease lapsed, enforces its floor ([Floor]).
//
// # Demand
//
// Demand is offered units (admitted plus denied) per second: admitted units
// alone are capped by the share and never show growth. A region's offered
// rate x is capped at DemandCap·R (default 2R) so that clients retrying on
// 429 (which inflate offered load by up to 1/(1 − p_reject)) cannot claim an
// unbounded share. Each report then updates two EWMAs, d ← d + α(x − d),
// with α per Interval (for a report covering k Intervals, α_k = 1 − (1 − α)^k):
//
//   - d, for headroom: α = AlphaUp (default 0.6) when x > d, AlphaDown
//     (default 0.3) otherwise. 90% of a rising step after 3 intervals
//     (0.4³ = 0.064), of a falling one after 7 (0.7⁷ = 0.082): a region's
//     room to grow outlives a lull.
//   - d_fast, for overload: α = AlphaUp both ways, and a region that denied
//     under 1% of what it was offered has shown its whole demand, so a fall
//     is taken at once. Above R shares are zero-sum: one region's slow
//     decay would be another's slow growth.
//
// Tenants absent from a report offered nothing and decay as if reported at 0.
//
// # Allocation
//
// With A = R less the floors of regions whose lease lapsed, f_i the floors
// and d_i the demand of live regions:
//
//   - Σd_fast ≥ A (overloaded): r_i = f_i + (A − Σf)·(d_fast,i − f_i)⁺ / Σ(d_fast,j − f_j)⁺,
//     what one central limiter would admit (equal admit probability).
//   - Σ max(f_i, (1+h)d_i) ≤ A (underloaded): each gets w_i = max(f_i, (1+h)d_i)
//     (Headroom h, default 0.15), then the spare is spread half equally and
//     half in proportion to demand, so every region has room to grow.
//   - in between: r_i = f_i + (A − Σf)·(w_i − f_i)/Σ(w_j − f_j).
//
// A tenant with no demand and no grant writes nothing. Each rate moves at
// most Slew·R per rebalance (default 0.5R), and only changes beyond
// Deadband·R (default 2%) are written, so noise writes nothing; smaller
// shrinks are written only to make room for a grow, or when the grants
// exceed R (the budget shrank); smaller grows only while at least half a
// deadband of R lies idle (a deferred grow completing after the shrinks it
// waited for were acknowledged). Only changed grants are returned.
//
// # Bursts
//
// Each region gets its floor burst plus a share of B − Σ floor bursts in
// proportion to its rate above its floor, rounded down, the remainder
// handed out by largest remainder; every region holding a positive rate gets
// at least one unit, and Σ b_i ≤ B. Budget.Validate rejects a B below the
// number of regions that may hold a grant. Any split of B loses some bursts
// against one central bucket.
//
// # Safety: shrink before grow (I4)
//
// For each tenant and region the leader tracks the ceiling: the largest rate
// (and burst) the region may still be enforcing: its newest grant, any older
// grant it has not acknowledged replacing (grants are applied in epoch order,
// and a report carries the highest epoch applied), and its floor. A grow is
// written only into capacity outside every ceiling, so Σ ceilings stays
// ≤ R (and ≤ B). Ceilings may overstate (a new leader's persisted ones, or
// after R shrank); while they sum above R nothing grows, not even within its
// own ceiling, since the region may not really be enforcing it. So shrinks are written first, and the matching grows
// follow once the shrunk regions acknowledge the new epoch, or their lease
// surely expired. A grow that did not fit is remembered (its target, and
// the epochs whose acknowledgement retires a grant in its way); Grow
// completes it between rebalances by the same rule, so it is as safe as a
// rebalance at that instant.
//
// Leases: a region counts its lease from when it sent its report, minus a
// drift margin; the leader counts from when it answered, so the region
// always stops first. When a region's lease surely ended (leader clock),
// the leader revokes its grants: it raises the region's minimum epoch above
// every epoch issued, so the region, enforcing floors since its lease ended,
// enforces only newer grants when it comes back (Renewal.MinEpoch), and
// persists floor grants where the revoked ones exceeded the floor (so a new
// leader knows). Only then is its capacity granted elsewhere.
//
// The leader keeps up to two older grants per tenant and region with the
// epoch whose acknowledgement retires each; beyond that the oldest merge,
// which only overstates the ceiling. Full mode skips all of this: it is the
// unsafe comparison.
//
// Failover: each Change carries its Ceiling (the largest of the grant and
// every older grant still possibly in force when it was written) and the
// region's MinEpoch. [Allocator.Restore] is the rule a new leader resumes
// by: every region may be enforcing the persisted Ceiling of each tenant
// until it reports Applied ≥ the persisted epoch; every region is leased
// until now + Lease (the old leader answered before now); minimum epochs
// resume at the largest persisted per region (so a region revoked by the old
// leader cannot resume a stale grant), epochs continue 2³² above the
// largest persisted (above any the old leader issued but failed to persist,
// whose MinEpoch a region may already have heard), and demand estimates start at the persisted rates so the first
// rebalances keep the old split. A new leader therefore never re-grants
// capacity its predecessor's unacknowledged grants may hold, and a leader
// change with regions still leased changes nothing they enforce.
//
// # Using it
//
// Persist the Changes a Rebalance returns (with Ceiling and MinEpoch) in the
// order returned, before answering reports with a MinEpoch they carry
// ([Allocator.MinEpoch]), and deliver each region its grants in epoch order
// (an etcd watch does). A region with several pods reports the smallest
// epoch any of them applied. Call Rebalance soon after reports arrive: a
// grow waits for the acknowledgement of the shrink that makes room for it,
// so the latency of a shift is about report, rebalance and delivery, twice.
// Shorten the second half with the event-driven grow: when a report (or
// [Allocator.Ack], for a leader that folds its pods' usage only once per
// rebalance) acknowledges an epoch that a deferred grow waits for,
// [Allocator.Growable] turns true, and [Allocator.Grow] writes those grows
// at once, touching only the tenants concerned; persist its Changes like
// Rebalance's. A region that applied a shrink should report soon after
// (bounded, e.g. one extra report per interval), so that its
// acknowledgement does not wait for its next periodic report.
// A grant or floor of rate 0 admits nothing; a regional limiter should
// treat such a key as spent, not as resting. Floors are computed from the
// budget each side knows: while a tenant's budget changes, the bound is the
// larger of the old and the new (R, B) until the regions know the new budget
// and have acknowledged the shrinks it causes.
//
// # Changing a live GCRA key
//
// A region enforcing a changed grant changes (T, B) on live keys. The
// conversion that keeps that from minting units lives in gcra.Convert, and is
// applied by gcra.Decide and by the Lua scripts whenever a key's stored (T,
// B) differs from the limit it is decided under: every key carries the limit
// it was written under, so the conversion needs no coordination with this
// package, and a grant may change at any instant between two decisions.
//
// # Concurrency and clocks
//
// Allocator and Region are not safe for concurrent use: their owner
// serialises calls. The leader's clock is authoritative for the allocator
// (report intake, leases, revocation); a region's monotonic clock for its
// own lease. Times passed in must not go backwards.
package shares
