package pipeline_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/gcra"
)

// BenchmarkCoalesce compares a redisstore.Store called directly with the
// same store behind a pipeline Store, at 1, 16 and 64 concurrent callers,
// each deciding one key per call on one local redis-server. ns/op is per
// decision; decisions/s, p50-µs and p99-µs are per-call figures.
func BenchmarkCoalesce(b *testing.B) {
	_, _, rs := newRedis(b)
	p := newPipeline(b, rs, nil)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "allot:v1:{t" + strconv.Itoa(i) + "}:user"
	}
	lim := gcra.Limit{T: 1, Burst: 1_000_000}
	for _, st := range []struct {
		name string
		s    gcra.Store
	}{{"direct", rs}, {"pipeline", p}} {
		for _, conc := range []int{1, 16, 64} {
			b.Run("store="+st.name+"/callers="+strconv.Itoa(conc), func(b *testing.B) {
				benchStore(b, st.s, conc, keys, lim)
			})
		}
	}
}

func benchStore(b *testing.B, s gcra.Store, conc int, keys []string, lim gcra.Limit) {
	ctx := context.Background()
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				t := time.Now()
				if _, err := s.Decide(ctx, []gcra.Request{{Key: keys[i&1023], Limit: lim, Cost: 1}}); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/el.Seconds(), "decisions/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
