package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
)

// BenchmarkDecide: one Decide over gRPC on loopback against a real regional
// service (in-memory store), serial and with parallel callers. Each
// iteration uses its own tenant so that most decisions are admissions.
func BenchmarkDecide(b *testing.B) {
	l := startLimiter(b)
	cfg := client.DefaultConfig()
	cfg.Target, cfg.Insecure, cfg.Timeout = l.Addr, true, 5*time.Second
	c, err := client.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, err := c.Decide(ctx, map[string]string{"tenant": "s" + strconv.Itoa(i%1000)}, 1); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := c.Decide(ctx, map[string]string{"tenant": "p" + strconv.Itoa(i%1000)}, 1); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}

// BenchmarkMiddleware: what the middleware itself adds to a request
// (extraction, headers, context), with a Decider that answers at once.
func BenchmarkMiddleware(b *testing.B) {
	d := client.DeciderFunc(func(context.Context, map[string]string, int64) (client.Decision, error) {
		return client.Decision{Allowed: true, Remaining: 9, ResetAfter: time.Second, Limit: "tenant", Quota: 10, Window: time.Second}, nil
	})
	h := client.Middleware(d, client.WithDescriptors(client.FromHeader("X-Tenant", "tenant")))(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-Tenant", "t42")
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
	}
}
