package sim

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

// FuzzBudgetSafe runs the real protocol (Leader and two Pods per region) on
// random demand (levels, a shift, on/off), random message delays and losses,
// and a random partition and failover (a new term), and checks I4 at every
// instant and the B + R·W envelope.
func FuzzBudgetSafe(f *testing.F) {
	f.Add(uint64(1), uint16(700), uint16(200), uint16(100), uint16(2000), uint8(10), uint8(0), uint8(0))
	f.Add(uint64(2), uint16(1500), uint16(0), uint16(900), uint16(500), uint8(40), uint8(3), uint8(1))
	f.Add(uint64(3), uint16(50), uint16(50), uint16(50), uint16(4000), uint8(0), uint8(7), uint8(2))
	f.Fuzz(func(t *testing.T, seed uint64, a, b, c, delayMs uint16, lossPct, fault, mode uint8) {
		s := base("fuzz", "random")
		s.Duration = 40 * time.Second
		s.Warmup = 5 * time.Second
		lv := []float64{float64(a % 3000), float64(b % 3000), float64(c % 3000)}
		s.Traffic = map[string]Traffic{
			USEast:  poisson(Step(lv[0], lv[2], 20*time.Second)),
			EUWest:  poisson(OnOff(lv[1], 3*time.Second, 2*time.Second, 0)),
			APSouth: poisson(Step(lv[2], lv[0], 20*time.Second)),
		}
		d := time.Duration(delayMs%4000) * time.Millisecond
		s.Network = Network{
			Report: Jitter{Max: d}, Renewal: Jitter{Max: d},
			LossReports: float64(lossPct%60) / 100,
		}
		if fault&1 != 0 {
			s.Partitions = []Partition{{Region: s.Regions[int(seed%3)], From: 12 * time.Second, To: 30 * time.Second}}
		}
		if fault&2 != 0 {
			s.Failovers = []Failover{{At: 18 * time.Second, Gap: time.Duration(fault%8) * time.Second}}
		}
		if fault&4 != 0 {
			s.Retry = &Retry{Attempts: 2, Base: 100 * time.Millisecond, Jitter: 0.5, HonourRetryAfter: true}
		}
		m := []shares.Mode{shares.ModeRebalanced, shares.ModeStatic, shares.ModePinned}[mode%3]
		s.Modes = []shares.Mode{m}
		if m == shares.ModePinned {
			s.Budget.Home = EUWest
		}
		r, err := Run(s, m, seed)
		if err != nil {
			t.Fatal(err)
		}
		if r.PeakRateSum > r.Rate*(1+1e-9) || r.PeakBurstSum > r.Burst {
			t.Errorf("%s: I4: peak Σ enforced rate %.3f/s at %v, burst %d at %v; want ≤ %g/s, %d", m, r.PeakRateSum, r.PeakRateAt, r.PeakBurstSum, r.PeakBurstAt, r.Rate, r.Burst)
		}
		if r.OverAdmission.Units > 0 {
			t.Errorf("%s: over-admission %+v, want 0", m, r.OverAdmission)
		}
	})
}

func BenchmarkRunSkewShift(b *testing.B) {
	s := skewShift()
	var arrivals int64
	for i := 0; b.Loop(); i++ {
		r, err := Run(s, shares.ModeRebalanced, uint64(i))
		if err != nil {
			b.Fatal(err)
		}
		arrivals = r.Offered
	}
	b.ReportMetric(float64(arrivals), "arrivals/run")
}
