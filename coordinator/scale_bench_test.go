package coordinator

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/allot-dev/allot/coordinator/statuspage"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
	"github.com/allot-dev/allot/shares"
)

// BenchmarkLeaderScale is the leader under synthetic reports: N tenants,
// 3 regions × 4 pods, every pod reporting every tenant each interval with
// ±10% noise around a steady split, then one rebalance. One op is one
// interval: 12 reports answered and one rebalance. It reports the rebalance
// alone (rebalance-ns); what the coordinator's rebalance adds for the status
// page's sample of the busiest tenants (status-ns), of which the snapshot
// taken under the coordinator's lock (status-locked-ns); the leader's heap per
// tenant-region after converging (the heap with the leader less the heap
// once it is dropped); the bytes of one report and of one steady answer on
// the wire; and the grant changes per interval at steady state. Nothing is
// written to etcd: the leader holds every grant in memory.
//
// The keys=N cases are the same load on N keys of one tenant's global
// per-user limit (shares.KeyBudgetID) instead of N tenants: keys carry no
// budget of their own, only the limit's default.
func BenchmarkLeaderScale(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) { benchLeaderScale(b, n, false) })
	}
	b.Run("keys=10000", func(b *testing.B) { benchLeaderScale(b, 10_000, true) })
}

func benchLeaderScale(b *testing.B, n int, keyed bool) {
	regions := []string{"us-east", "eu-west", "ap-south"}
	const podsPerRegion = 4
	now := time.Unix(1_800_000_000, 0)
	cfg := shares.LeaderConfig{Config: shares.DefaultConfig(regions...), Term: 1, First: true}
	l, err := shares.NewLeader(now, cfg)
	if err != nil {
		b.Fatal(err)
	}
	l.SetDefault(&shares.Budget{Rate: 100, Burst: 20})
	l.SetNamedDefault("user=", &shares.Budget{Rate: 100, Burst: 20})
	names := make([]string, n)
	budgets := make(map[string]shares.Budget, n)
	for i := range names {
		if keyed {
			names[i] = shares.KeyBudgetID("tenant-0000001", "user", fmt.Sprintf("user-%07d", i))
			continue
		}
		names[i] = fmt.Sprintf("tenant-%07d", i)
		budgets[names[i]] = shares.Budget{Rate: 100, Burst: 20}
	}
	l.SetBudgets(budgets)
	split := []float64{0.6, 0.3, 0.1}
	rng := rand.New(rand.NewPCG(1, 2))
	type pod struct {
		region, id string
		st         *shares.Pod
	}
	var pods []pod
	for _, r := range regions {
		for k := range podsPerRegion {
			pods = append(pods, pod{region: r, id: fmt.Sprintf("%s-%d", r, k), st: shares.NewPod(r, 0)})
		}
	}
	usage := make([]map[string]shares.Usage, len(pods))
	page := statuspage.New(nil, nil)
	var reportBytes, answerBytes int
	interval := func(measure bool) (changes int, rebalance, status, locked time.Duration) {
		now = now.Add(cfg.Interval)
		for i, p := range pods {
			u := usage[i]
			if u == nil {
				u = make(map[string]shares.Usage, n)
				usage[i] = u
			}
			ri := i / podsPerRegion
			for _, t := range names {
				x := 150 * split[ri] / podsPerRegion * cfg.Interval.Seconds() * (0.9 + 0.2*rng.Float64())
				u[t] = shares.Usage{Offered: x, Admitted: min(x, 100*split[ri]/podsPerRegion*cfg.Interval.Seconds())}
			}
			term, applied := p.st.State()
			a, err := l.Report(now, shares.PodReport{Region: p.region, Pod: p.id, Term: term, Applied: applied,
				Interval: cfg.Interval, Usage: u, LivePods: podsPerRegion})
			if err != nil {
				b.Fatal(err)
			}
			p.st.Answered(now, now, a, nil)
			if measure && i == 0 {
				req := &allotv1.ReportRequest{Region: p.region, Pod: p.id, IntervalMs: 2000, Term: term, AppliedEpoch: applied, LivePods: 4}
				for t, x := range u {
					req.Usage = append(req.Usage, &allotv1.TenantUsage{Tenant: t, Offered: x.Offered, Admitted: x.Admitted})
				}
				resp := &allotv1.ReportResponse{Accepted: true, LeaseMs: 10000, Term: a.Term, Epoch: a.Epoch}
				for _, e := range a.Entries {
					resp.Grants = append(resp.Grants, ToGrantPB(e))
				}
				reportBytes, answerBytes = proto.Size(req), proto.Size(resp)
			}
		}
		// As the coordinator's rebalance: the status page's snapshot of
		// the busiest tenants (under the coordinator's lock), then the
		// page's commit of it (outside).
		start := time.Now()
		ch := l.Rebalance(now)
		rebalance = time.Since(start)
		start = time.Now()
		snap := pageSnapshot(now, regions, false, l, page.Wanted())
		locked = time.Since(start)
		page.Commit(snap)
		status = time.Since(start)
		return len(ch), rebalance, status, locked
	}
	// Converge.
	for range 40 {
		interval(false)
	}
	b.ResetTimer()
	var changes int
	var reb, status, locked time.Duration
	for range b.N {
		c, d, st, lk := interval(true)
		changes += c
		reb += d
		status += st
		locked += lk
	}
	b.StopTimer()
	// The leader's heap: what the heap holds with it, less what it holds
	// once the leader is dropped (the pods, their grants and the usage
	// maps stay).
	heapNow := func() float64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapAlloc)
	}
	with := heapNow()
	runtime.KeepAlive(l) // live until here: the GC frees what is dead
	without := heapNow()
	runtime.KeepAlive(pods)
	runtime.KeepAlive(usage)
	runtime.KeepAlive(page)
	runtime.KeepAlive(budgets)
	heap := with - without
	b.ReportMetric(float64(reb.Nanoseconds())/float64(b.N), "rebalance-ns")
	b.ReportMetric(float64(status.Nanoseconds())/float64(b.N), "status-ns")
	b.ReportMetric(float64(locked.Nanoseconds())/float64(b.N), "status-locked-ns")
	b.ReportMetric(heap/float64(n*len(regions)), "heap-B/tenant-region")
	b.ReportMetric(float64(reportBytes), "B/report")
	b.ReportMetric(float64(answerBytes), "B/steady-answer")
	b.ReportMetric(float64(changes)/float64(b.N), "changes/interval")
}
