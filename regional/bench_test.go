package regional

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// latencies collects per-call latencies across goroutines.
type latencies struct {
	mu  sync.Mutex
	d   []time.Duration
	cpu time.Duration // the process's CPU time when the measurement began
}

// processCPU is this process's user + system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// start marks the beginning of the measurement: call after ResetTimer.
func (l *latencies) start(b *testing.B) { l.cpu = processCPU(b) }

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	slices.Sort(l.d)
	if len(l.d) == 0 {
		return
	}
	b.ReportMetric(float64(l.d[len(l.d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(l.d[len(l.d)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	if l.cpu > 0 {
		// Client and pod together (one process); Redis is apart.
		b.ReportMetric(float64((processCPU(b)-l.cpu).Microseconds())/float64(b.N), "cpu-µs/decision")
	}
}

// BenchmarkEndToEnd decides through a regional pod's public APIs (gRPC
// Limiter and HTTP /v1/decide) against a local Redis, at fixed concurrency:
// throughput and client-side p50/p99. Tenants rotate over 1,024 so keys
// spread; every decision is allowed (the dearer path: it writes its key).
func BenchmarkEndToEnd(b *testing.B) {
	rs := redistest.Start(b)
	opts := redistest.ClientOptions(rs.Addr)
	opts.PoolSize = 128
	rc := redis.NewClient(opts)
	b.Cleanup(func() { _ = rc.Close() })
	store, err := redisstore.New(rc)
	if err != nil {
		b.Fatal(err)
	}
	p := startPod(b, store, func(c *Config) { c.StoreTimeout = time.Second })
	p.applyPolicy(b, benchPolicy, "bench-0", benchBudget)
	lim := allotv1.NewLimiterClient(p.conn)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	transports := map[string]func(i int) error{
		"grpc": func(i int) error {
			r, err := lim.Decide(context.Background(), &allotv1.DecideRequest{Descriptors: map[string]string{"tenant": fmt.Sprintf("bench-%d", i%1024)}, Cost: 1})
			if err == nil && !r.GetAllowed() {
				err = fmt.Errorf("denied")
			}
			return err
		},
		"http": func(i int) error {
			resp, err := hc.Post(p.http.URL+"/v1/decide", "application/json",
				strings.NewReader(fmt.Sprintf(`{"descriptors":{"tenant":"bench-%d"},"cost":1}`, i%1024)))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		},
	}
	// grpc-batch64: DecideBatch RPCs of 64 decisions; one op is one
	// decision, the latencies are those of whole batches.
	const batch = 64
	b.Run(fmt.Sprintf("transport=grpc-batch%d/concurrency=%d", batch, 4), func(b *testing.B) {
		var lat latencies
		var next atomic.Int64
		b.SetParallelism(2)
		b.ResetTimer()
		lat.start(b)
		b.RunParallel(func(pb *testing.PB) {
			req := &allotv1.DecideBatchRequest{}
			for more := true; more; {
				req.Requests = req.Requests[:0]
				for len(req.Requests) < batch {
					if more = pb.Next(); !more {
						break
					}
					i := next.Add(1)
					req.Requests = append(req.Requests, &allotv1.DecideRequest{Descriptors: map[string]string{"tenant": fmt.Sprintf("bench-%d", i%1024)}, Cost: 1})
				}
				if len(req.Requests) == 0 {
					break
				}
				start := time.Now()
				r, err := lim.DecideBatch(context.Background(), req)
				if err != nil {
					b.Error(err)
					return
				}
				for _, d := range r.GetResponses() {
					if !d.GetAllowed() {
						b.Error("denied")
						return
					}
				}
				lat.add(time.Since(start))
			}
		})
		lat.report(b)
	})
	ac, err := client.New(client.Config{Target: p.conn.Target(), Insecure: true, Timeout: 10 * time.Second, Coalesce: true, MaxBatch: client.DefaultMaxBatch})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ac.Close() })
	transports["client"] = func(i int) error {
		d, err := ac.Decide(context.Background(), map[string]string{"tenant": fmt.Sprintf("bench-%d", i%1024)}, 1)
		if err == nil && !d.Allowed {
			err = fmt.Errorf("denied")
		}
		return err
	}
	for _, name := range []string{"grpc", "client", "http"} {
		call := transports[name]
		for _, conc := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("transport=%s/concurrency=%d", name, conc), func(b *testing.B) {
				var lat latencies
				var mu sync.Mutex
				next := 0
				b.SetParallelism(max(1, conc/2)) // GOMAXPROCS 2 here
				b.ResetTimer()
				lat.start(b)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						mu.Lock()
						i := next
						next++
						mu.Unlock()
						start := time.Now()
						if err := call(i); err != nil {
							b.Error(err)
							return
						}
						lat.add(time.Since(start))
					}
				})
				lat.report(b)
			})
		}
	}
}

// benchPolicy gives every tenant a budget no benchmark exhausts.
const benchPolicy = `version: 1
regions: [us-east, eu-west]
default_tier: bench
limits:
  - name: tenant
    descriptors: [tenant]
    rate: budget
tiers:
  bench:
    budget: {rate: 1000000/s, burst: 1000000, mode: pinned, home: us-east}
`
