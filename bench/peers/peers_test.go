package peers

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
)

// decider is one limiter under test: one decision on key.
type decider func(ctx context.Context, key string) (bool, error)

// BenchmarkPeers runs allot's Redis store and redis_rate (Allow) on the
// same redis-server, through the same go-redis client, in the same run,
// alternating, with the same limit (10^6/s, burst 10^6: every decision is
// allowed and writes its key) over the same 1024 keys. The parallel cases
// also report the p50 and p99 latency of one decision.
func BenchmarkPeers(b *testing.B) {
	srv := redistest.Start(b)
	opt := redistest.ClientOptions(srv.Addr)
	opt.PoolSize = 64
	c := redis.NewClient(opt)
	defer c.Close()
	st, err := redisstore.New(c)
	if err != nil {
		b.Fatal(err)
	}
	rr := redis_rate.NewLimiter(c)
	allotLimit := gcra.Limit{T: 1, Burst: 1_000_000}
	rrLimit := redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "allot:v1:{t" + strconv.Itoa(i) + "}:tenant"
	}
	peers := []struct {
		name   string
		decide decider
	}{
		{"allot", func(ctx context.Context, key string) (bool, error) {
			d, err := st.Decide(ctx, []gcra.Request{{Key: key, Limit: allotLimit, Cost: 1}})
			return d.Allowed, err
		}},
		{"redis_rate", func(ctx context.Context, key string) (bool, error) {
			r, err := rr.Allow(ctx, key, rrLimit)
			if err != nil {
				return false, err
			}
			return r.Allowed == 1, nil
		}},
	}
	ctx := context.Background()
	for _, p := range peers {
		// Warm the script caches.
		if _, err := p.decide(ctx, keys[0]); err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
	}
	for _, p := range peers {
		b.Run("mode=serial/peer="+p.name, func(b *testing.B) {
			defer redistest.ReportScriptCost(b, c)()
			i := 0
			for b.Loop() {
				ok, err := p.decide(ctx, keys[i&1023])
				if err != nil || !ok {
					b.Fatalf("decision = %v, %v", ok, err)
				}
				i++
			}
		})
	}
	for _, p := range peers {
		b.Run("mode=parallel16/peer="+p.name, func(b *testing.B) {
			defer redistest.ReportScriptCost(b, c)()
			var (
				seq     atomic.Int64
				mu      sync.Mutex
				latency []time.Duration
			)
			b.SetParallelism(8) // 8 × GOMAXPROCS (2 here) = 16 goroutines
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(131))
				var mine []time.Duration
				for pb.Next() {
					t0 := time.Now()
					ok, err := p.decide(ctx, keys[i&1023])
					mine = append(mine, time.Since(t0))
					if err != nil || !ok {
						b.Errorf("decision = %v, %v", ok, err)
						return
					}
					i++
				}
				mu.Lock()
				latency = append(latency, mine...)
				mu.Unlock()
			})
			if len(latency) > 0 {
				slices.Sort(latency)
				q := func(f float64) float64 {
					return float64(latency[int(f*float64(len(latency)-1))].Microseconds())
				}
				b.ReportMetric(q(0.50), "p50-µs")
				b.ReportMetric(q(0.99), "p99-µs")
			}
		})
	}
}
