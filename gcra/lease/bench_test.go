package lease_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

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
