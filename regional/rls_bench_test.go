package regional

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
)

// BenchmarkRLSDescriptors times ShouldRateLimit in process (no network
// between gateway and pod, no codec) for requests of 1, 2 and 4
// descriptors, alternately {tenant} and {tenant, user} (a budget limit, or
// a composite of the budget and a per-user limit), tenants rotating over
// 1,024, every descriptor allowed: over the in-memory store (the pod's CPU
// per request; no coalescing) and over a real redis-server on loopback (as
// deployed: coalescing on), where each store round trip is a network call.
func BenchmarkRLSDescriptors(b *testing.B) {
	const tenants = 1024
	pods := map[string]func(*testing.B) *pod{
		"memstore": func(b *testing.B) *pod { return benchDecidePod(b, decideBenchPolicy) },
		"redis": func(b *testing.B) *pod {
			rs := redistest.Start(b)
			rc := redis.NewClient(redistest.ClientOptions(rs.Addr))
			b.Cleanup(func() { _ = rc.Close() })
			store, err := redisstore.New(rc)
			if err != nil {
				b.Fatal(err)
			}
			p := startPod(b, store, func(c *Config) { c.StoreTimeout = time.Second })
			p.applyPolicy(b, decideBenchPolicy, "bench-0", benchBudget)
			return p
		},
	}
	// One pod per store for every case and -count run: a second pod on the
	// same etcd would start its tenants over, at the cold floor.
	started := map[string]*pod{}
	podOf := func(store string) *pod {
		if started[store] == nil {
			started[store] = pods[store](b)
		}
		return started[store]
	}
	for _, store := range []string{"memstore", "redis"} {
		for _, n := range []int{1, 2, 4} {
			b.Run(store+"/descriptors="+strconv.Itoa(n), func(b *testing.B) {
				rls := rlsAPI{s: podOf(store).s}
				reqs := make([]*rlsv3.RateLimitRequest, tenants)
				for i := range reqs {
					t := "bench-" + strconv.Itoa(i)
					r := &rlsv3.RateLimitRequest{Domain: "api"}
					for k := range n {
						e := []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: t}}
						if k%2 == 1 {
							e = append(e, &ratelimitv3.RateLimitDescriptor_Entry{Key: "user", Value: strconv.Itoa(k)})
						}
						r.Descriptors = append(r.Descriptors, &ratelimitv3.RateLimitDescriptor{Entries: e})
					}
					reqs[i] = r
				}
				ctx := context.Background()
				// Every tenant's first requests before timing: a new
				// tenant's first sight asks for its grant at once.
				wait.Until(b, 10*time.Second, func() error {
					for _, r := range reqs {
						if a, err := rls.ShouldRateLimit(ctx, r); err != nil || a.GetOverallCode() != rlsv3.RateLimitResponse_OK {
							return fmt.Errorf("ShouldRateLimit = %v, %w", a, err)
						}
					}
					return nil
				})
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if r, err := rls.ShouldRateLimit(ctx, reqs[i%tenants]); err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
						b.Fatalf("ShouldRateLimit = %v, %v", r, err)
					}
					i++
				}
			})
		}
	}
}
