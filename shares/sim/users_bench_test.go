package sim

import (
	"testing"

	"github.com/allot-dev/allot/shares"
)

// BenchmarkUsersLeader measures the coordinator's cost in the users
// scenario (10,000 users with global per-user limits, thousands active):
// the leader's wall-clock time per periodic rebalance and per report, and
// the budget IDs it held, per run of the scenario.
//
//	go test -run '^$' -bench UsersLeader -benchtime 1x -count 3 ./shares/sim/
func BenchmarkUsersLeader(b *testing.B) {
	s, err := Lookup("users")
	if err != nil {
		b.Fatal(err)
	}
	var c Cost
	var ids, mean float64
	for i := range b.N {
		r, err := Run(s, shares.ModeRebalanced, uint64(i)+1)
		if err != nil {
			b.Fatal(err)
		}
		c.Rebalances += r.Cost.Rebalances
		c.RebalanceTime += r.Cost.RebalanceTime
		c.Reports += r.Cost.Reports
		c.ReportTime += r.Cost.ReportTime
		ids += float64(r.Users.PeakIDs)
		mean += r.Users.MeanIDs
	}
	n := float64(b.N)
	b.ReportMetric(float64(c.PerRebalance().Microseconds())/1000, "ms/rebalance")
	b.ReportMetric(float64(c.PerReport().Nanoseconds())/1000, "µs/report")
	b.ReportMetric(float64(c.Reports)/(n*s.Duration.Seconds()), "reports/s")
	b.ReportMetric(ids/n, "peak-ids")
	b.ReportMetric(mean/n, "mean-ids")
	if m := mean / n; m > 0 {
		b.ReportMetric(float64(c.PerRebalance().Nanoseconds())/m, "ns/id/rebalance")
	}
}
