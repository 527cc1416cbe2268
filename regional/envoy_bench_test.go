package regional

import (
	"context"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/policy/envoyconf"
)

const envoyBenchConfig = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: client
    value: web
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 1000000}
`

// BenchmarkEnvoyRLS times ShouldRateLimit answered from an
// envoyproxy/ratelimit configuration, in process over the in-memory store
// (the pod's CPU per request: matching, keys, the store call through the
// breaker, counters, the answer): one descriptor (a bare key, values
// rotating over 1,024) and two (that and a nested one), every descriptor
// allowed.
func BenchmarkEnvoyRLS(b *testing.B) {
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Region, cfg.Store, cfg.Registerer, cfg.Coalesce, cfg.StoreTimeout = "us-east", ms, prometheus.NewRegistry(), false, time.Second
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	f, err := envoyconf.ParseFile("bench.yaml", []byte(envoyBenchConfig))
	if err != nil {
		b.Fatal(err)
	}
	c, err := envoyconf.Build([]*envoyconf.File{f}, false)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.SetEnvoyConfig(c, EnvoyOptions{}); err != nil {
		b.Fatal(err)
	}
	rls := rlsAPI{s: s}
	const values = 1024
	for _, n := range []int{1, 2} {
		b.Run("descriptors="+strconv.Itoa(n), func(b *testing.B) {
			reqs := make([]*rlsv3.RateLimitRequest, values)
			for i := range reqs {
				r := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)}},
				}}}
				if n == 2 {
					r.Descriptors = append(r.Descriptors, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
						{Key: "client", Value: "web"}, {Key: "path", Value: "/api/" + strconv.Itoa(i%16)},
					}})
				}
				reqs[i] = r
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if r, err := rls.ShouldRateLimit(ctx, reqs[i%values]); err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Fatalf("ShouldRateLimit = %v, %v", r, err)
				}
				i++
			}
		})
	}
}
