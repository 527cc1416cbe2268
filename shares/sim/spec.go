package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/allot-dev/allot/shares"
)

// epoch is simulated time zero as a wall-clock instant (any fixed instant
// works; this one keeps Unix microseconds well inside GCRA's range).
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Jitter is a delay drawn uniformly from [Min, Max].
type Jitter struct {
	Min, Max time.Duration
}

func (j Jitter) validate(field string) error {
	if j.Min < 0 || j.Max < j.Min {
		return bad(field, "want 0 ≤ Min ≤ Max, got [%v, %v]", j.Min, j.Max)
	}
	return nil
}

// bad returns an ErrInvalidSpec naming field.
func bad(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidSpec, field, fmt.Sprintf(format, args...))
}

// Network is how messages between the pods and the leader travel.
type Network struct {
	// Report is the delay of a pod's report to the leader.
	Report Jitter
	// Renewal is the delay of the leader's answer to a report: the lease
	// renewal and the region's grants that changed since the epoch the pod
	// applied (grants travel on the report path; nothing goes through
	// etcd).
	Renewal Jitter
	// LossReports is the probability that a report is lost.
	LossReports float64
}

// Partition cuts Region off from the coordinator during [From, To): the
// reports of its pods and the leader's answers are lost in both directions.
// Its pods fall back to their floors once their leases lapse, and catch up
// with the answer to their first report after To.
type Partition struct {
	Region   string
	From, To time.Duration
}

// Failover kills the leader at At; a new leader starts a new term Gap later
// (reports that arrive in between are lost and no rebalance runs). The new
// term learns for Lease + SessionTTL: it renews no lease and grants nothing
// until every lease of an older term has surely ended, so pods fall back to
// their floors once the old leases lapse.
type Failover struct {
	At, Gap time.Duration
	// SessionTTL is the election session TTL the scenario assumes (it
	// bounds how long a deposed leader may still answer). 0: Gap (a
	// crashed leader's session expires after its TTL, and the next leader
	// is elected then).
	SessionTTL time.Duration
}

func (f Failover) sessionTTL() time.Duration {
	if f.SessionTTL > 0 {
		return f.SessionTTL
	}
	return f.Gap
}

// Spec is one scenario: regions and their pods, one tenant's budget, traffic
// per region, network and faults. Run it with Run in one of its Modes.
type Spec struct {
	Name        string
	Description string
	// Regions are the region names, in a fixed order.
	Regions []string
	// Pods is the number of pods per region (0: DefaultPods). A region's
	// traffic is spread uniformly over its pods, which all decide against
	// the region's one key, each with the limit it enforces.
	Pods int
	// Budget is the tenant's budget; Run overrides its Mode.
	Budget shares.Budget
	// Tokens, when set, gives the tenant a second global budget (its
	// named budget "tokens", shares.BudgetID), shared on its own: every
	// request also costs PerRequest tokens, and is admitted only when both
	// budgets admit it (as by one composite decision), here and in the
	// central limiter it is compared with.
	Tokens *Tokens
	// Users, when set, spreads the tenant's requests over a population of
	// users, each with a global per-user limit shared key by key (see
	// Users).
	Users *Users
	// Modes are the modes the scenario is run in, the first being the one
	// that is plotted in detail.
	Modes []shares.Mode
	// Interval is the report (per pod) and rebalance interval P.
	Interval time.Duration
	// Lease is the lease L.
	Lease time.Duration
	// Drift is the drift margin a pod subtracts from its lease.
	Drift time.Duration
	// Duration is how long the run simulates.
	Duration time.Duration
	// Warmup is excluded from admitted, ideal, utilisation and error (the
	// cold start of the pods, which enforce nothing until the first answer
	// that carries grants); over-admission and I4 are checked over the
	// whole run.
	Warmup time.Duration
	// Traffic is the fresh demand per region (by name); a region without
	// an entry offers nothing.
	Traffic map[string]Traffic
	// Retry, when set, makes denied clients retry.
	Retry *Retry
	// Network is the message delays and losses.
	Network Network
	// Partitions and Failovers are the faults.
	Partitions []Partition
	Failovers  []Failover
	// Events are the instants after which convergence is measured (demand
	// shifts, faults). With none, it is measured from the start.
	Events []time.Duration
	// TickOnly makes the leader act only at its rebalance ticks: no grow
	// as soon as a report acknowledges the shrink it waits for
	// (shares.Leader.Grow). For comparison.
	TickOnly bool
	// NoSteps: pods do not report a tenant whose rate stepped early (see
	// shares.Tracker); NoNudges: the leader does not nudge the pods of a
	// region whose grants changed to report. For comparison.
	NoSteps, NoNudges bool
	// NoRoster: a new term's leader has no roster of the pods older terms
	// leased, so it learns for the whole Lease + SessionTTL.
	NoRoster bool
	// PeriodicReports makes pods report only on their period: no prompt
	// report after applying a shrink. For comparison.
	PeriodicReports bool
}

// Tokens is a scenario's second budget (Spec.Tokens).
type Tokens struct {
	Budget     shares.Budget // Run overrides its Mode, as the tenant budget's
	PerRequest int64
}

// Sentinel errors.
var (
	// ErrUnknownScenario is returned by Lookup for a name with no scenario.
	ErrUnknownScenario = errors.New("sim: unknown scenario")
	// ErrInvalidSpec is wrapped by every error of Spec.Validate; the
	// message names the field.
	ErrInvalidSpec = errors.New("sim: invalid spec")
)

// Validate reports whether s can be run; errors name the field.
func (s *Spec) Validate() error {
	if s.Name == "" {
		return bad("Name", "empty")
	}
	if len(s.Regions) == 0 {
		return bad("Regions", "none")
	}
	seen := map[string]bool{}
	for i, r := range s.Regions {
		if r == "" || seen[r] {
			return bad(fmt.Sprintf("Regions[%d]", i), "empty or repeated %q", r)
		}
		seen[r] = true
	}
	if s.Pods < 0 || s.Pods > maxPods {
		return bad("Pods", "%d is outside [0, %d]", s.Pods, maxPods)
	}
	if len(s.Modes) == 0 {
		return bad("Modes", "none")
	}
	for i, m := range s.Modes {
		b := s.Budget
		b.Mode = m
		if m != shares.ModePinned {
			b.Home = ""
		}
		if err := b.Validate(s.Regions); err != nil {
			return fmt.Errorf("%w: Budget (as Modes[%d] %q): %w", ErrInvalidSpec, i, m, err)
		}
	}
	if tk := s.Tokens; tk != nil {
		if tk.PerRequest < 1 || tk.PerRequest > tk.Budget.Burst {
			return bad("Tokens.PerRequest", "%d is outside [1, Tokens.Budget.Burst]", tk.PerRequest)
		}
		b := tk.Budget
		b.Mode, b.Home = shares.ModeRebalanced, ""
		if err := b.Validate(s.Regions); err != nil {
			return fmt.Errorf("%w: Tokens.Budget: %w", ErrInvalidSpec, err)
		}
	}
	if u := s.Users; u != nil {
		if u.Count < 1 || u.Count > maxUsers {
			return bad("Users.Count", "%d is outside [1, %d]", u.Count, maxUsers)
		}
		if !(u.Zipf >= 0) || u.Zipf > 10 {
			return bad("Users.Zipf", "%v is outside [0, 10]", u.Zipf)
		}
		b := u.Budget
		b.Mode, b.Home = shares.ModeRebalanced, ""
		if err := b.Validate(s.Regions); err != nil {
			return fmt.Errorf("%w: Users.Budget: %w", ErrInvalidSpec, err)
		}
	}
	switch {
	case s.Interval <= 0:
		return bad("Interval", "%v is not positive", s.Interval)
	case s.Lease <= 0:
		return bad("Lease", "%v is not positive", s.Lease)
	case s.Drift < 0 || s.Drift >= s.Lease:
		return bad("Drift", "%v is outside [0, Lease)", s.Drift)
	case s.Duration < time.Second:
		return bad("Duration", "%v is under a second", s.Duration)
	case s.Warmup < 0 || s.Warmup >= s.Duration:
		return bad("Warmup", "%v is outside [0, Duration)", s.Warmup)
	}
	for name, tr := range s.Traffic {
		if !seen[name] {
			return bad(fmt.Sprintf("Traffic[%q]", name), "no such region")
		}
		if tr.Profile == nil {
			return bad(fmt.Sprintf("Traffic[%q].Profile", name), "nil")
		}
		if tr.Jitter < 0 || tr.Jitter > 0.9 {
			return bad(fmt.Sprintf("Traffic[%q].Jitter", name), "%v is outside [0, 0.9]", tr.Jitter)
		}
	}
	if r := s.Retry; r != nil {
		if r.Attempts < 1 || r.Base <= 0 || r.Max < 0 || r.Jitter < 0 || r.Jitter > 0.9 {
			return bad("Retry", "want Attempts ≥ 1, Base > 0, Max ≥ 0, Jitter in [0, 0.9], got %+v", *r)
		}
	}
	for _, f := range []struct {
		name string
		j    Jitter
	}{{"Network.Report", s.Network.Report}, {"Network.Renewal", s.Network.Renewal}} {
		if err := f.j.validate(f.name); err != nil {
			return err
		}
	}
	if p := s.Network.LossReports; p < 0 || p > 1 {
		return bad("Network.LossReports", "%v is outside [0, 1]", p)
	}
	for i, p := range s.Partitions {
		if !seen[p.Region] {
			return bad(fmt.Sprintf("Partitions[%d].Region", i), "no such region %q", p.Region)
		}
		if p.From < 0 || p.To <= p.From {
			return bad(fmt.Sprintf("Partitions[%d]", i), "want 0 ≤ From < To, got [%v, %v)", p.From, p.To)
		}
	}
	for i, f := range s.Failovers {
		if f.At <= 0 || f.Gap < 0 || f.SessionTTL < 0 {
			return bad(fmt.Sprintf("Failovers[%d]", i), "want At > 0, Gap ≥ 0 and SessionTTL ≥ 0, got %+v", f)
		}
	}
	for i, e := range s.Events {
		if e < 0 || e >= s.Duration || (i > 0 && e <= s.Events[i-1]) {
			return bad(fmt.Sprintf("Events[%d]", i), "%v is not increasing within the run", e)
		}
	}
	return nil
}

// maxPods bounds Spec.Pods (the leader tracks at most 256 pods a region).
const maxPods = 64

func (s *Spec) pods() int {
	if s.Pods == 0 {
		return DefaultPods
	}
	return s.Pods
}
