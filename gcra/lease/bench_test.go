package lease_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/lease"
	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
)

// BenchmarkLeased: decisions through leases of 10 units, over Redis and over
// the in-memory store, GOMAXPROCS goroutines over 64 keys.
func BenchmarkLeased(b *testing.B) {
	srv := redistest.Start(b)
	opt := redistest.ClientOptions(srv.Addr)
	c := redis.NewClient(opt)
	defer c.Close()
	rs, err := redisstore.New(c)
	if err != nil {
		b.Fatal(err)
	}
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	l := gcra.Limit{T: 1, Burst: 1_000_000}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "allot:v1:{t" + strconv.Itoa(i) + "}:tenant"
	}
	for _, tc := range []struct {
		name  string
		store gcra.Store
	}{{"redis", rs}, {"memstore", ms}} {
		b.Run(tc.name, func(b *testing.B) {
			p, err := lease.New(tc.store, lease.DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1))
				reqs := make([]gcra.Request, 1)
				for pb.Next() {
					reqs[0] = gcra.Request{Key: keys[i&63], Limit: l, Cost: 1}
					if _, err := p.Decide(context.Background(), reqs); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
			s := p.Stats()
			b.ReportMetric(float64(s.ServedUnits)/float64(max(s.Leases, 1)), "decisions/lease")
		})
	}
}

// BenchmarkServed isolates the decision served from units already leased:
// leases of 2^20 units that live an hour, so that a refill (one store call)
// comes once per 2^20 decisions of a key and ns/op is the served path's
// cost. Serial and GOMAXPROCS goroutines, over one key (every goroutine on
// the same lease) and over 64 keys; clock=exact reads the monotonic clock
// per decision (no Run), clock=coarse runs Run, whose coarse clock the
// decisions read.
func BenchmarkServed(b *testing.B) {
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	l := gcra.Limit{T: 1, Burst: 1 << 30}
	for _, nkeys := range []int{1, 64} {
		keys := make([]string, nkeys)
		for i := range keys {
			keys[i] = "allot:v1:{t" + strconv.Itoa(i) + "}:tenant"
		}
		for _, clock := range []string{"exact", "coarse"} {
			// newLimiter returns a Limiter whose every key holds a lease,
			// with Run going for clock=coarse until the benchmark ends.
			newLimiter := func(b *testing.B) *lease.Limiter {
				cfg := lease.DefaultConfig()
				cfg.Size, cfg.MinBurst, cfg.TTL = 1<<20, 1<<20, time.Hour
				p, err := lease.New(ms, cfg)
				if err != nil {
					b.Fatal(err)
				}
				if clock == "coarse" {
					ctx, cancel := context.WithCancel(context.Background())
					done := make(chan error)
					go func() { done <- p.Run(ctx) }()
					b.Cleanup(func() {
						cancel()
						if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
							b.Error(err)
						}
					})
				}
				for _, k := range keys {
					if _, err := p.Decide(context.Background(), []gcra.Request{{Key: k, Limit: l, Cost: 1}}); err != nil {
						b.Fatal(err)
					}
				}
				return p
			}
			report := func(b *testing.B, p *lease.Limiter) {
				s := p.Stats()
				b.ReportMetric(float64(s.Served)/float64(max(s.Leases, 1)), "decisions/lease")
			}
			suffix := "/keys=" + strconv.Itoa(nkeys) + "/clock=" + clock
			b.Run("serial"+suffix, func(b *testing.B) {
				p := newLimiter(b)
				ctx := context.Background()
				reqs := make([]gcra.Request, 1)
				i := 0
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					reqs[0] = gcra.Request{Key: keys[i&(nkeys-1)], Limit: l, Cost: 1}
					if d, err := p.Decide(ctx, reqs); err != nil || !d.Allowed {
						b.Fatalf("Decide = %+v, %v", d, err)
					}
					i++
				}
				b.StopTimer()
				report(b, p)
			})
			b.Run("parallel"+suffix, func(b *testing.B) {
				p := newLimiter(b)
				var seq atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := int(seq.Add(17))
					ctx := context.Background()
					reqs := make([]gcra.Request, 1)
					for pb.Next() {
						reqs[0] = gcra.Request{Key: keys[i&(nkeys-1)], Limit: l, Cost: 1}
						if d, err := p.Decide(ctx, reqs); err != nil || !d.Allowed {
							b.Errorf("Decide = %+v, %v", d, err)
							return
						}
						i++
					}
				})
				b.StopTimer()
				report(b, p)
			})
		}
	}
}
