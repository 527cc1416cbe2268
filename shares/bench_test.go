package shares_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

const benchTenants = 100_000

var benchRegions = []string{"us-east", "eu-west", "ap-south", "sa-east", "af-south"}

// cpuTime is the CPU time this process has used (all threads, GC included).
// The benchmarks report it per op beside the wall time, which on a machine
// shared with other work overstates the cost.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchWorld is an allocator holding benchTenants active tenants across five
// regions (about a third of them above R), and report sets to feed it: the
// base demand with ±3% noise, and the same demand rotated by one region.
type benchWorld struct {
	a       *shares.Allocator
	cfg     shares.Config
	budgets map[string]shares.Budget
	noisy   [][]shares.Report // variants of the base demand
	rotated []shares.Report
	now     time.Time
}

func newBenchWorld(b *testing.B) *benchWorld {
	b.Helper()
	cfg := shares.DefaultConfig(benchRegions...)
	a, err := shares.NewAllocator(cfg)
	if err != nil {
		b.Fatal(err)
	}
	w := &benchWorld{a: a, cfg: cfg, budgets: make(map[string]shares.Budget, benchTenants), now: time.Unix(1_700_000_000, 0)}
	rng := rand.New(rand.NewPCG(1, 2))
	newSet := func() []shares.Report {
		set := make([]shares.Report, len(benchRegions))
		for i, r := range benchRegions {
			set[i] = shares.Report{Region: r, Interval: cfg.Interval, Usage: make(map[string]shares.Usage, benchTenants)}
		}
		return set
	}
	w.noisy = [][]shares.Report{newSet(), newSet(), newSet()}
	w.rotated = newSet()
	n := len(benchRegions)
	for k := range benchTenants {
		name := fmt.Sprintf("tenant-%06d", k)
		rate := float64(10 + rng.IntN(5000))
		w.budgets[name] = shares.Budget{Rate: rate, Burst: int64(5 + rng.IntN(500))}
		load := rate * (0.3 + 1.2*rng.Float64())
		for i := range n {
			base := load * rng.Float64() * 2 / float64(n) * cfg.Interval.Seconds()
			for _, set := range w.noisy {
				off := base * (0.97 + 0.06*rng.Float64())
				set[i].Usage[name] = shares.Usage{Offered: off, Admitted: off * 0.9}
			}
			w.rotated[(i+1)%n].Usage[name] = shares.Usage{Offered: base, Admitted: base * 0.9}
		}
	}
	for r := range 8 { // converge
		w.round(b, w.noisy[r%len(w.noisy)])
	}
	return w
}

// feed has every region report set, acknowledging every grant written.
func (w *benchWorld) feed(b *testing.B, set []shares.Report) {
	w.now = w.now.Add(w.cfg.Interval)
	for i := range set {
		set[i].Applied = 1 << 62
		if _, err := w.a.Report(w.now, set[i]); err != nil {
			b.Fatal(err)
		}
	}
}

func (w *benchWorld) round(b *testing.B, set []shares.Report) int {
	w.feed(b, set)
	return len(w.a.Rebalance(w.now, w.budgets))
}

// benchRebalance times only the Rebalance after each feed of reports.
func benchRebalance(b *testing.B, w *benchWorld, set func(i int) []shares.Report) {
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	changes := 0
	for i := range b.N {
		b.StopTimer()
		w.feed(b, set(i))
		b.StartTimer()
		c0 := cpuTime(b)
		changes += len(w.a.Rebalance(w.now, w.budgets))
		cpu += cpuTime(b) - c0
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(changes)/float64(b.N), "changes/op")
}

// BenchmarkRebalance is one rebalance of 100,000 active tenants × 5 regions
// in the steady state: every tenant reported with ±3% noise, every grant
// acknowledged; the deadband keeps most grants unchanged.
func BenchmarkRebalance(b *testing.B) {
	w := newBenchWorld(b)
	benchRebalance(b, w, func(i int) []shares.Report { return w.noisy[i%len(w.noisy)] })
}

// BenchmarkRebalanceShift is one rebalance of 100,000 tenants × 5 regions
// right after every tenant's demand moved by one region, so that most grants
// change.
func BenchmarkRebalanceShift(b *testing.B) {
	w := newBenchWorld(b)
	benchRebalance(b, w, func(i int) []shares.Report {
		if i%2 == 0 {
			return w.rotated
		}
		return w.noisy[0]
	})
}

// BenchmarkReport is one region's report of 100,000 tenants.
func BenchmarkReport(b *testing.B) {
	w := newBenchWorld(b)
	set := w.noisy[0]
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime(b)
	for i := range b.N {
		w.now = w.now.Add(time.Millisecond)
		if _, err := w.a.Report(w.now, set[i%len(set)]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkTrackerScale is a pod's Tracker under N active tenants: every
// 50 ms each tenant's counts since the last look are added (what the
// reporter does with its counters), and every 2 s a periodic report takes
// them all. One op is one second of that: 20 looks and half a report. It
// reports the CPU per tenant-second (ns-per-tenant-s) and the heap per
// tenant once every tenant is tracked (heap-B/tenant).
func BenchmarkTrackerScale(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("tenant-%07d", i)
			}
			now := time.Unix(1_800_000_000, 0)
			var before, after runtimeMem
			before.read()
			tr, err := shares.NewTracker(now, shares.TrackerConfig{})
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			look := func() {
				now = now.Add(50 * time.Millisecond)
				for _, t := range names {
					x := float64(rng.IntN(10))
					tr.Add(now, t, x, x)
				}
			}
			for range 40 { // two seconds, so every tenant was reported once
				look()
			}
			tr.TakeSteps(now)
			tr.TakeAll(now)
			after.read()
			heap := float64(after.heap-before.heap) / float64(n)
			b.ResetTimer()
			start := cpuTime(b)
			for i := range b.N {
				for range 20 {
					look()
				}
				if i%2 == 1 {
					tr.TakeSteps(now)
					tr.TakeAll(now)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N)/float64(n), "ns-per-tenant-s")
			b.ReportMetric(heap, "heap-B/tenant")
			if tr.Tenants() != n {
				b.Fatalf("the tracker holds %d tenants, want %d", tr.Tenants(), n)
			}
		})
	}
}

// runtimeMem reads the live heap after a collection.
type runtimeMem struct{ heap uint64 }

func (m *runtimeMem) read() {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.heap = ms.HeapAlloc
}
