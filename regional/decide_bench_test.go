package regional

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// decideBenchPolicy: a tenant budget, a per-user limit (a request naming a
// user is a composite of two) and a per-machine limit, all generous enough
// that no benchmark is denied.
const decideBenchPolicy = `version: 1
regions: [us-east, eu-west]
default_tier: bench
limits:
  - name: tenant
    descriptors: [tenant]
    rate: budget
  - name: user
    descriptors: [tenant, user]
    rate: 1000000/s
    burst: 1000000
  - name: login
    descriptors: [tenant, route]
    match: {route: /login}
    rate: 1/m
    burst: 1
tiers:
  bench:
    budget: {rate: 1000000/s, burst: 1000000, mode: pinned, home: us-east}
`

// decideLeasedPolicy: the tenant budget leased 1,000 units at a time.
const decideLeasedPolicy = `version: 1
regions: [us-east, eu-west]
default_tier: bench
limits:
  - name: tenant
    descriptors: [tenant]
    rate: budget
    lease: 1000
tiers:
  bench:
    budget: {rate: 1000000/s, burst: 1000000, mode: pinned, home: us-east}
`

// benchDecidePod starts a pod over an in-memory store (no network between
// the pod and its store; no coalescing, so only the decide path is timed)
// with policy, and waits until it enforces it.
func benchDecidePod(b *testing.B, policy string) *pod {
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	p := startPod(b, ms, func(c *Config) { c.Coalesce = false; c.StoreTimeout = time.Second })
	p.applyPolicy(b, policy, "bench-0", benchBudget)
	return p
}

// BenchmarkDecide times Service.Decide in process over an in-memory store:
// the pod's own CPU cost per decision (descriptor checks, policy lookup,
// key building, plan, store call through the breaker, counters, metrics),
// with -benchmem its allocations. Tenants rotate over 1,024; descriptor maps
// are built before timing (a transport builds them). Cases: one budget
// limit; a composite of the budget and a per-user limit; the budget served
// from leases of 1,000 units.
func BenchmarkDecide(b *testing.B) {
	plain := benchDecidePod(b, decideBenchPolicy)
	leased := benchDecidePod(b, decideLeasedPolicy)
	const tenants = 1024
	budget := make([]map[string]string, tenants)
	user := make([]map[string]string, tenants)
	for i := range tenants {
		t := "bench-" + strconv.Itoa(i)
		budget[i] = map[string]string{"tenant": t}
		user[i] = map[string]string{"tenant": t, "user": strconv.Itoa(i % 97)}
	}
	cases := []struct {
		name string
		p    *pod
		ds   []map[string]string
	}{
		{"budget", plain, budget},
		{"tenant+user", plain, user},
		{"leased", leased, budget},
	}
	for _, c := range cases {
		s := c.p.s
		b.Run(c.name+"/serial", func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if d, err := s.Decide(ctx, c.ds[i%tenants], 1); err != nil || !d.Allowed || d.Fallback {
					b.Fatalf("Decide = %+v, %v", d, err)
				}
				i++
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			var seq atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				i := int(seq.Add(389))
				for pb.Next() {
					if d, err := s.Decide(ctx, c.ds[i%tenants], 1); err != nil || !d.Allowed || d.Fallback {
						b.Errorf("Decide = %+v, %v", d, err)
						return
					}
					i++
				}
			})
		})
	}
}

// discardWriter is an http.ResponseWriter that keeps only its header map,
// cleared for each request: the HTTP benchmark times the handler, not a
// recorder.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// BenchmarkHandlers times each transport's handler in process, without the
// network or the codec: allot.v1.Limiter/Decide and Envoy's
// ShouldRateLimit on decoded requests, and POST /v1/decide through the HTTP
// handler (routing, JSON decoding and encoding) into a writer that discards.
// One budget limit, tenants rotating over 1,024; with -benchmem, what each
// transport adds to BenchmarkDecide/budget. The HTTP case's request body
// reader (2 allocations) is the benchmark's own.
func BenchmarkHandlers(b *testing.B) {
	p := benchDecidePod(b, decideBenchPolicy)
	const tenants = 1024
	lim, rls, h := limiterAPI{s: p.s}, rlsAPI{s: p.s}, p.s.Handler(nil, "")
	grpcReqs := make([]*allotv1.DecideRequest, tenants)
	rlsReqs := make([]*rlsv3.RateLimitRequest, tenants)
	bodies := make([][]byte, tenants)
	for i := range tenants {
		t := "bench-" + strconv.Itoa(i)
		grpcReqs[i] = &allotv1.DecideRequest{Descriptors: map[string]string{"tenant": t}, Cost: 1}
		rlsReqs[i] = &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: t}}},
		}}
		bodies[i] = []byte(`{"descriptors":{"tenant":"` + t + `"},"cost":1}`)
	}
	ctx := context.Background()
	b.Run("grpc", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if r, err := lim.Decide(ctx, grpcReqs[i%tenants]); err != nil || !r.GetAllowed() {
				b.Fatalf("Decide = %v, %v", r, err)
			}
			i++
		}
	})
	b.Run("rls", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if r, err := rls.ShouldRateLimit(ctx, rlsReqs[i%tenants]); err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				b.Fatalf("ShouldRateLimit = %v, %v", r, err)
			}
			i++
		}
	})
	b.Run("http", func(b *testing.B) {
		req := httptest.NewRequest("POST", "/v1/decide", nil)
		w := &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			req.Body = io.NopCloser(bytes.NewReader(bodies[i%tenants]))
			clear(w.h)
			w.code = 0
			h.ServeHTTP(w, req)
			if w.code != http.StatusOK {
				b.Fatalf("POST /v1/decide = %d", w.code)
			}
			i++
		}
	})
}

// BenchmarkPool sizes go-redis's connection pool for a pod: Service.Decide
// in process over a real redis-server on loopback, 64 concurrent callers
// (GOMAXPROCS 2 × SetParallelism 32), tenants rotating over 1,024, with the
// store calls coalesced into pipelines (the default) or not, for several
// PoolSize values (20 is go-redis's default here: 10 per GOMAXPROCS). It
// reports decisions/s, client p50/p99 and conns, the connections the pool
// opened.
func BenchmarkPool(b *testing.B) {
	rs := redistest.Start(b)
	const tenants = 1024
	ds := make([]map[string]string, tenants)
	for i := range tenants {
		ds[i] = map[string]string{"tenant": "bench-" + strconv.Itoa(i)}
	}
	type podKey struct {
		coalesce bool
		pool     int
	}
	pods := map[podKey]*pod{}
	clients := map[podKey]*redis.Client{}
	podFor := func(k podKey) (*pod, *redis.Client) {
		if p, ok := pods[k]; ok {
			return p, clients[k]
		}
		opts := redistest.ClientOptions(rs.Addr)
		opts.PoolSize = k.pool
		rc := redis.NewClient(opts)
		b.Cleanup(func() { _ = rc.Close() })
		store, err := redisstore.New(rc)
		if err != nil {
			b.Fatal(err)
		}
		p := startPod(b, store, func(c *Config) { c.Coalesce = k.coalesce; c.StoreTimeout = time.Second })
		p.applyPolicy(b, decideBenchPolicy, "bench-0", benchBudget)
		pods[k], clients[k] = p, rc
		return p, rc
	}
	for _, coalesce := range []bool{true, false} {
		for _, pool := range []int{4, 8, 20, 64} {
			k := podKey{coalesce, pool}
			b.Run(fmt.Sprintf("coalesce=%v/pool=%d", coalesce, pool), func(b *testing.B) {
				p, rc := podFor(k)
				var lat latencies
				var seq atomic.Int64
				b.SetParallelism(32)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					for pb.Next() {
						i := int(seq.Add(1))
						start := time.Now()
						if d, err := p.s.Decide(ctx, ds[i%tenants], 1); err != nil || !d.Allowed || d.Fallback {
							b.Errorf("Decide = %+v, %v", d, err)
							return
						}
						lat.add(time.Since(start))
					}
				})
				b.StopTimer()
				lat.report(b)
				b.ReportMetric(float64(rc.PoolStats().TotalConns), "conns")
			})
		}
	}
}
