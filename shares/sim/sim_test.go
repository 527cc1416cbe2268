package sim

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

func run(t *testing.T, s *Spec, m shares.Mode, seed uint64) *Result {
	t.Helper()
	r, err := Run(s, m, seed)
	if err != nil {
		t.Fatalf("Run(%s, %s, %d): %v", s.Name, m, seed, err)
	}
	return r
}

func TestDeterministic(t *testing.T) {
	// Retries and jitter exercise every random stream; a minute suffices.
	short := func() *Spec {
		s := retryStorm()
		s.Duration = 60 * time.Second
		s.Traffic = shift(1.2*RefRate, 30*time.Second)
		s.Events = []time.Duration{30 * time.Second}
		return s
	}
	s := short()
	a := run(t, s, shares.ModeRebalanced, 7)
	b := run(t, short(), shares.ModeRebalanced, 7)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with seed 7 differ")
	}
	c := run(t, s, shares.ModeRebalanced, 8)
	if c.Offered == a.Offered && c.Admitted == a.Admitted {
		t.Errorf("seeds 7 and 8 gave the same counts (%d offered, %d admitted): the seed is ignored", a.Offered, a.Admitted)
	}
	// Without retries the fresh arrivals depend on the seed alone, so every
	// mode sees the same traffic and the same ideal.
	plain := skewShift()
	plain.Duration = 30 * time.Second
	plain.Events = nil
	st := run(t, plain, shares.ModeStatic, 7)
	fu := run(t, plain, shares.ModeFull, 7)
	if st.Offered != fu.Offered || st.Ideal != fu.Ideal {
		t.Errorf("static and full saw different traffic: offered %d vs %d, ideal %d vs %d", st.Offered, fu.Offered, st.Ideal, fu.Ideal)
	}
}

// The acceptance test: skew-shift with report, renewal and grant
// delays of up to one interval.
func TestSkewShift(t *testing.T) {
	s := skewShift()
	if s.Network.Report.Max != s.Interval || s.Network.Grant.Max != s.Interval {
		t.Fatalf("skew-shift delays %v/%v, want up to one interval %v", s.Network.Report, s.Network.Grant, s.Interval)
	}
	rb := run(t, s, shares.ModeRebalanced, 1)
	st := run(t, s, shares.ModeStatic, 1)
	fu := run(t, s, shares.ModeFull, 1)
	t.Logf("rebalanced: util %.3f, over %v, conv %v, writes %d", rb.Utilisation, rb.OverAdmission, rb.Convergence, rb.Writes)
	t.Logf("static: util %.3f; full: util %.3f, over %v", st.Utilisation, fu.Utilisation, fu.OverAdmission)

	if rb.Utilisation < 0.97 {
		t.Errorf("rebalanced admitted %d = %.1f%% of ideal %d, want ≥ 97%%", rb.Admitted, 100*rb.Utilisation, rb.Ideal)
	}
	if pct := rb.OverAdmissionPct(); pct > 1 {
		t.Errorf("rebalanced over-admission %.0f units = %.2f%% of R·t, want ≤ 1%% (aim 0)", rb.OverAdmission.Units, pct)
	}
	if rb.OverAdmission.Units != 0 {
		t.Logf("rebalanced over-admission is %+v (within 1%% of R·t, but the aim is 0)", rb.OverAdmission)
	}
	if st.Utilisation >= 0.9 {
		t.Errorf("static admitted %.1f%% of ideal, want visibly less (< 90%%)", 100*st.Utilisation)
	}
	if fu.OverAdmission.Units <= 0 || fu.Utilisation <= 1 || fu.PeakRateSum < 2*fu.Rate {
		t.Errorf("full over-admission %v, utilisation %.3f, peak Σ enforced %.0f: want visibly over", fu.OverAdmission, fu.Utilisation, fu.PeakRateSum)
	}
}

// I4 for the safe modes in every scenario: at no instant do the regions
// together enforce more than R (or bursts above B), and no window admits
// more than B + R·W. (Full mode is the unsafe comparison: TestSkewShift.)
func TestBudgetSafeEveryScenario(t *testing.T) {
	for _, s := range Scenarios() {
		for _, m := range s.Modes {
			if m == shares.ModeFull {
				continue
			}
			t.Run(s.Name+"/"+string(m), func(t *testing.T) {
				t.Parallel()
				r := run(t, s, m, 3)
				if r.PeakRateSum > r.Rate*(1+1e-9) || r.PeakBurstSum > r.Burst {
					t.Errorf("I4: peak Σ enforced (rate %.3f, burst %d), want ≤ (%g, %d)", r.PeakRateSum, r.PeakBurstSum, r.Rate, r.Burst)
				}
				if r.OverAdmission.Units > 0 {
					t.Errorf("over-admission %+v, want 0", r.OverAdmission)
				}
				if r.Admitted > r.Offered || r.Ideal > r.Offered {
					t.Errorf("admitted %d, ideal %d of %d offered", r.Admitted, r.Ideal, r.Offered)
				}
			})
		}
	}
}

func TestPartition(t *testing.T) {
	s := partitionDuringShift()
	rb := run(t, s, shares.ModeRebalanced, 1)
	fu := run(t, s, shares.ModeFull, 1)
	t.Logf("rebalanced: util %.3f, over %v, conv %v, lost %d", rb.Utilisation, rb.OverAdmission, rb.Convergence, rb.LostReports)
	if rb.OverAdmission.Units != 0 {
		t.Errorf("rebalanced over-admission %+v during a partition, want 0 (world ≤ B + R·W)", rb.OverAdmission)
	}
	if rb.LostReports == 0 {
		t.Error("no report was lost: the partition did not happen")
	}
	// The cut-off region falls back to its floor once its lease lapses.
	i := slices.Index(rb.Regions, USEast)
	floor, _ := shares.Floor(s.Budget, s.Regions, USEast)
	lapsed := false
	for _, smp := range rb.Series {
		if smp.At > 92*time.Second && smp.At < 110*time.Second {
			g := smp.Regions[i]
			if !g.Leased && math.Abs(g.Grant-floor) < 1e-9 {
				lapsed = true
			}
		}
	}
	if !lapsed {
		t.Errorf("us-east never fell back to its floor %.1f/s while cut off", floor)
	}
	if rb.Utilisation < 0.85 {
		t.Errorf("rebalanced utilisation %.3f during a partition, want ≥ 0.85", rb.Utilisation)
	}
	if fu.OverAdmission.Units <= 0 {
		t.Errorf("full over-admission %+v, want > 0", fu.OverAdmission)
	}
}

func TestFailover(t *testing.T) {
	s := leaderFailover()
	rb := run(t, s, shares.ModeRebalanced, 1)
	base := run(t, skewShift(), shares.ModeRebalanced, 1)
	t.Logf("failover: util %.3f, over %v, conv %v, lost %d; without: util %.3f", rb.Utilisation, rb.OverAdmission, rb.Convergence, rb.LostReports, base.Utilisation)
	if rb.OverAdmission.Units != 0 {
		t.Errorf("rebalanced over-admission %+v across a failover, want 0", rb.OverAdmission)
	}
	if rb.LostReports == 0 {
		t.Error("no report was lost: the leader was never gone")
	}
	// A failover shortly before a shift may delay convergence by its gap,
	// not more: admission stays within 3 points of the same run without it.
	if rb.Utilisation < base.Utilisation-0.03 {
		t.Errorf("failover utilisation %.3f, without failover %.3f: want within 0.03", rb.Utilisation, base.Utilisation)
	}
	// The regions keep enforcing their grants through the gap: nobody
	// falls back to a floor.
	for _, smp := range rb.Series {
		if smp.At < 88*time.Second || smp.At > 100*time.Second {
			continue
		}
		for i, g := range smp.Regions {
			if !g.Leased {
				t.Errorf("%s at %v: lease lapsed during the failover", rb.Regions[i], smp.At)
			}
		}
	}
}

func TestScenarioCatalogue(t *testing.T) {
	names := Names()
	for _, want := range []string{"skew-shift", "underload", "flash-crowd", "partition", "failover", "bursts", "retry-storm", "pinned"} {
		if !slices.Contains(names, want) {
			t.Errorf("Names() = %v, missing %q", names, want)
		}
	}
	for _, s := range Scenarios() {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		got, err := Lookup(s.Name)
		if err != nil || got.Name != s.Name {
			t.Errorf("Lookup(%q) = %v, %v", s.Name, got, err)
		}
	}
	if _, err := Lookup("nope"); !errors.Is(err, ErrUnknownScenario) || !strings.Contains(err.Error(), "skew-shift") {
		t.Errorf("Lookup(nope) = %v, want ErrUnknownScenario listing the names", err)
	}
}

func TestSpecValidate(t *testing.T) {
	cases := []struct {
		field string
		edit  func(*Spec)
	}{
		{"Name", func(s *Spec) { s.Name = "" }},
		{"Regions", func(s *Spec) { s.Regions = []string{"a", "a"} }},
		{"Budget", func(s *Spec) { s.Budget.Rate = 0 }},
		{"Modes", func(s *Spec) { s.Modes = nil }},
		{"Interval", func(s *Spec) { s.Interval = 0 }},
		{"Drift", func(s *Spec) { s.Drift = s.Lease }},
		{"Duration", func(s *Spec) { s.Duration = time.Millisecond }},
		{"Warmup", func(s *Spec) { s.Warmup = s.Duration }},
		{"Traffic", func(s *Spec) { s.Traffic["mars"] = Traffic{Profile: Constant(1)} }},
		{"Traffic", func(s *Spec) { s.Traffic[USEast] = Traffic{} }},
		{"Retry", func(s *Spec) { s.Retry = &Retry{} }},
		{"Network.Grant", func(s *Spec) { s.Network.Grant = Jitter{Min: time.Second, Max: 0} }},
		{"Network.LossReports", func(s *Spec) { s.Network.LossReports = 2 }},
		{"Partitions[0].Region", func(s *Spec) { s.Partitions = []Partition{{Region: "mars", From: 0, To: 1}} }},
		{"Partitions[0]", func(s *Spec) { s.Partitions = []Partition{{Region: USEast, From: 5, To: 1}} }},
		{"Failovers[0]", func(s *Spec) { s.Failovers = []Failover{{At: 0}} }},
		{"Events[1]", func(s *Spec) { s.Events = []time.Duration{time.Second, time.Second} }},
	}
	for _, c := range cases {
		s := skewShift()
		c.edit(s)
		err := s.Validate()
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), ": "+c.field) {
			t.Errorf("Validate() after breaking %s = %v, want an error naming it", c.field, err)
		}
		if _, rerr := Run(s, shares.ModeRebalanced, 1); rerr == nil {
			t.Errorf("Run accepted a spec with a bad %s", c.field)
		}
	}
}

// The event-driven levers (a grow written as soon as the report
// acknowledging its shrink arrives; a region reporting soon after it
// applies a shrink) shorten shrink-before-grow after a shift: more of the
// ideal is admitted, with no over-admission and I4 kept, and without many
// more writes. With both off the leader acts only on its ticks.
func TestEventDrivenShift(t *testing.T) {
	variants := []struct {
		name           string
		tickOnly, lazy bool
	}{
		{"ticks only", true, true},
		{"grow on ack", false, true},
		{"grow on ack, prompt reports", false, false},
	}
	util := make([]float64, len(variants))
	writes := make([]float64, len(variants))
	const seeds = 5
	for v, vr := range variants {
		for seed := uint64(1); seed <= seeds; seed++ {
			s := skewShift()
			s.TickOnly, s.PeriodicReports = vr.tickOnly, vr.lazy
			r := run(t, s, shares.ModeRebalanced, seed)
			if r.PeakRateSum > r.Rate*(1+1e-9) || r.PeakBurstSum > r.Burst || r.OverAdmission.Units > 0 {
				t.Errorf("%s, seed %d: peak Σ (%.3f, %d), over-admission %+v; want ≤ (R, B) and 0", vr.name, seed, r.PeakRateSum, r.PeakBurstSum, r.OverAdmission)
			}
			util[v] += r.Utilisation / seeds
			writes[v] += r.WritesPerMinute() / seeds
		}
		t.Logf("%-28s utilisation %.2f%%, writes %.1f/min", vr.name, 100*util[v], writes[v])
	}
	last := len(variants) - 1
	if util[last] < util[0]+0.002 {
		t.Errorf("event-driven utilisation %.2f%%, ticks only %.2f%%: want at least 0.2 points better", 100*util[last], 100*util[0])
	}
	if util[last] < 0.97 {
		t.Errorf("event-driven utilisation %.2f%% over seeds 1–%d, want ≥ 97%%", 100*util[last], seeds)
	}
	if writes[last] > 1.5*writes[0] {
		t.Errorf("event-driven writes %.1f/min, ticks only %.1f/min: want at most 1.5×", writes[last], writes[0])
	}
}
