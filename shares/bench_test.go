package shares_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

const benchTenants = 100_000

var benchRegions = []string{"us-east", "eu-west", "ap-south", "sa-east", "af-south"}

// benchSetup returns an allocator holding benchTenants active tenants across
// five regions, converged on random skewed demand (about a third of them
// above R), the budgets, and one report per region.
func benchSetup(b *testing.B) (*shares.Allocator, map[string]shares.Budget, []shares.Report, time.Time) {
	b.Helper()
	cfg := shares.DefaultConfig(benchRegions...)
	a, err := shares.NewAllocator(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	budgets := make(map[string]shares.Budget, benchTenants)
	reports := make([]shares.Report, len(benchRegions))
	for i, r := range benchRegions {
		reports[i] = shares.Report{Region: r, Interval: cfg.Interval, Usage: make(map[string]shares.Usage, benchTenants)}
	}
	for k := range benchTenants {
		name := fmt.Sprintf("tenant-%06d", k)
		rate := float64(10 + rng.IntN(5000))
		budgets[name] = shares.Budget{Rate: rate, Burst: int64(5 + rng.IntN(500))}
		load := rate * (0.3 + 1.2*rng.Float64())
		for i := range benchRegions {
			off := load * rng.Float64() * 2 / float64(len(benchRegions)) * cfg.Interval.Seconds()
			reports[i].Usage[name] = shares.Usage{Offered: off, Admitted: off * 0.9}
		}
	}
	now := time.Unix(1_700_000_000, 0)
	for range 6 { // converge, acknowledging every epoch
		now = now.Add(cfg.Interval)
		for i := range reports {
			reports[i].Applied = 1 << 62
			if _, err := a.Report(now, reports[i]); err != nil {
				b.Fatal(err)
			}
		}
		a.Rebalance(now, budgets)
	}
	return a, budgets, reports, now
}

// BenchmarkRebalance is one rebalance of 100,000 active tenants × 5 regions
// in the steady state (demand reported, few grants change).
func BenchmarkRebalance(b *testing.B) {
	a, budgets, _, now := benchSetup(b)
	b.ReportAllocs()
	b.ResetTimer()
	writes := 0
	for i := range b.N {
		writes += len(a.Rebalance(now.Add(time.Duration(i)*time.Microsecond), budgets))
	}
	b.ReportMetric(float64(writes)/float64(b.N), "changes/op")
}

// BenchmarkRebalanceShift is one rebalance of 100,000 tenants × 5 regions
// right after every tenant's demand moved between regions (so that most
// grants change), report intake excluded.
func BenchmarkRebalanceShift(b *testing.B) {
	a, budgets, reports, now := benchSetup(b)
	// Two demand patterns to alternate: the reports as they are, and the
	// same rotated by one region.
	rotated := make([]shares.Report, len(reports))
	for i := range reports {
		rotated[i] = reports[(i+1)%len(reports)]
		rotated[i].Region = reports[i].Region
	}
	b.ReportAllocs()
	b.ResetTimer()
	writes := 0
	for i := range b.N {
		b.StopTimer()
		set := reports
		if i%2 == 0 {
			set = rotated
		}
		now = now.Add(2 * time.Second)
		for j := range set {
			set[j].Applied = 1 << 62
			if _, err := a.Report(now, set[j]); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		writes += len(a.Rebalance(now, budgets))
	}
	b.ReportMetric(float64(writes)/float64(b.N), "changes/op")
}

// BenchmarkReport is one region's report of 100,000 tenants.
func BenchmarkReport(b *testing.B) {
	a, _, reports, now := benchSetup(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := a.Report(now.Add(time.Duration(i)*time.Microsecond), reports[i%len(reports)]); err != nil {
			b.Fatal(err)
		}
	}
}
