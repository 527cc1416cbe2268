package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
)

// BenchmarkRedis runs every Redis path against one redis-server started for
// the benchmark (loopback). Limits are generous so decisions are allowed and
// write, the dearer path. ns/op is per decision.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	opt := redistest.ClientOptions(srv.Addr)
	opt.PoolSize = 64
	c := redis.NewClient(opt)
	defer c.Close()
	st, err := redisstore.New(c)
	if err != nil {
		b.Fatal(err)
	}
	tenant := gcra.Limit{T: 1, Burst: 1_000_000}
	user := gcra.Limit{T: 1, Burst: 1_000_000}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "allot:v1:{t" + strconv.Itoa(i) + "}:user:user=" + strconv.Itoa(i)
	}
	ctx := context.Background()

	b.Run("single", func(b *testing.B) {
		defer redistest.ReportScriptCost(b, c)()
		i := 0
		for b.Loop() {
			if _, err := st.Decide(ctx, []gcra.Request{{Key: keys[i&1023], Limit: user, Cost: 1}}); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("single-parallel", func(b *testing.B) {
		defer redistest.ReportScriptCost(b, c)()
		var seq atomic.Int64
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(97))
			for pb.Next() {
				if _, err := st.Decide(ctx, []gcra.Request{{Key: keys[i&1023], Limit: user, Cost: 1}}); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
	b.Run("composite2", func(b *testing.B) {
		defer redistest.ReportScriptCost(b, c)()
		i := 0
		for b.Loop() {
			t := "allot:v1:{t" + strconv.Itoa(i&1023) + "}:tenant"
			if _, err := st.Decide(ctx, []gcra.Request{{Key: t, Limit: tenant, Cost: 1}, {Key: keys[i&1023], Limit: user, Cost: 1}}); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("pipelined64", func(b *testing.B) {
		defer redistest.ReportScriptCost(b, c)()
		batch := make([][]gcra.Request, 64)
		i := 0
		for b.Loop() {
			// One op is one decision: send a pipeline every 64 ops.
			batch[i&63] = []gcra.Request{{Key: keys[i&1023], Limit: user, Cost: 1}}
			if i&63 == 63 {
				for _, a := range st.DecideMany(ctx, batch) {
					if a.Err != nil {
						b.Fatal(a.Err)
					}
				}
			}
			i++
		}
	})
}
