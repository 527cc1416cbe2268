package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/client"
)

// Ask a region's limiter directly. The limiter here is a real regional
// service on loopback whose policy gives each tenant 5/s with a burst of 3.
func ExampleNew() {
	addr, stop := startExampleLimiter()
	defer stop()

	cfg := client.DefaultConfig()
	cfg.Target = addr   // in a cluster: "dns:///allot-regional.allot.svc:9090"
	cfg.Insecure = true // loopback; in production set cfg.TLS
	// The default, 20ms, suits a service with a warm connection; this
	// example dials cold on whatever machine runs it.
	cfg.Timeout = 5 * time.Second
	c, err := client.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	ctx := context.Background()
	for range 4 {
		d, err := c.Decide(ctx, map[string]string{"tenant": "t42"}, 1)
		switch {
		case errors.Is(err, client.ErrUnavailable):
			fmt.Println("limiter unavailable: fail open or closed")
		case err != nil:
			fmt.Println(err)
		default:
			fmt.Printf("allowed=%v remaining=%d retry_after=%v policy=%s:%d/%v\n",
				d.Allowed, d.Remaining, d.RetryAfter, d.Limit, d.Quota, d.Window)
		}
	}
	_, err = c.Decide(ctx, map[string]string{"user": "7"}, 1)
	fmt.Println("no tenant is invalid:", errors.Is(err, client.ErrInvalid))
	// Output:
	// allowed=true remaining=2 retry_after=0s policy=tenant:5/1s
	// allowed=true remaining=1 retry_after=0s policy=tenant:5/1s
	// allowed=true remaining=0 retry_after=0s policy=tenant:5/1s
	// allowed=false remaining=0 retry_after=200ms policy=tenant:5/1s
	// no tenant is invalid: true
}

// Rate-limit an HTTP API per tenant: the 4th request within the burst is
// answered 429 with Retry-After and the RateLimit fields, before the
// handler runs.
func ExampleMiddleware() {
	addr, stop := startExampleLimiter()
	defer stop()
	cfg := client.DefaultConfig()
	cfg.Target, cfg.Insecure, cfg.Timeout = addr, true, 5*time.Second
	c, err := client.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	var unavailable atomic.Int64
	limited := client.Middleware(c,
		client.WithDescriptors(client.FromHeader("X-Tenant", "tenant")),
		client.WithFailureMode(client.FailOpen),
		client.WithOnError(func(_ *http.Request, err error) {
			if errors.Is(err, client.ErrUnavailable) {
				unavailable.Add(1) // export as a metric; alert when it grows
			}
		}),
	)(api)
	srv := httptest.NewServer(limited)
	defer srv.Close()

	for range 4 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/things", nil)
		req.Header.Set("X-Tenant", "t42")
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("%s | RateLimit: %s | RateLimit-Policy: %s | Retry-After: %q\n",
			resp.Status, resp.Header.Get("RateLimit"), resp.Header.Get("RateLimit-Policy"), resp.Header.Get("Retry-After"))
	}
	// Output:
	// 200 OK | RateLimit: "tenant";r=2;t=1 | RateLimit-Policy: "tenant";q=5;w=1 | Retry-After: ""
	// 200 OK | RateLimit: "tenant";r=1;t=1 | RateLimit-Policy: "tenant";q=5;w=1 | Retry-After: ""
	// 200 OK | RateLimit: "tenant";r=0;t=1 | RateLimit-Policy: "tenant";q=5;w=1 | Retry-After: ""
	// 429 Too Many Requests | RateLimit: "tenant";r=0;t=1 | RateLimit-Policy: "tenant";q=5;w=1 | Retry-After: "1"
}

// Fail closed when the limiter cannot be reached: 503 with Retry-After,
// never 429 (the caller did not exceed anything).
func ExampleWithFailureMode() {
	cfg := client.DefaultConfig()
	cfg.Target, cfg.Insecure = "127.0.0.1:1", true // nothing listens here
	c, err := client.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	login := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "welcome") })
	h := client.Middleware(c,
		client.WithDescriptors(client.FromHeader("X-Tenant", "tenant")),
		client.WithFailureMode(client.FailClosed),
		client.WithOnError(func(_ *http.Request, err error) {
			fmt.Println("limiter unavailable:", errors.Is(err, client.ErrUnavailable))
		}),
	)(login)

	req := httptest.NewRequest(http.MethodPost, "/login", nil)
	req.Header.Set("X-Tenant", "t42")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Println(rec.Code, "Retry-After:", rec.Header().Get("Retry-After"))
	// Output:
	// limiter unavailable: true
	// 503 Retry-After: 1
}

// A Decider of your own: here a fake that denies everything, for testing
// how your handlers and clients cope with a 429.
func ExampleDeciderFunc() {
	deny := client.DeciderFunc(func(context.Context, map[string]string, int64) (client.Decision, error) {
		return client.Decision{Limit: "tenant", Quota: 1000, Window: time.Second, RetryAfter: 1500 * time.Millisecond}, nil
	})
	h := client.Middleware(deny, client.WithDescriptors(client.FromHeader("X-Tenant", "tenant")))(http.NotFoundHandler())

	req := httptest.NewRequest(http.MethodGet, "/v1/things", nil)
	req.Header.Set("X-Tenant", "t42")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Println(rec.Code)
	for _, k := range []string{"Retry-After", "RateLimit", "RateLimit-Policy", "Cache-Control"} {
		fmt.Printf("%s: %s\n", k, rec.Header().Get(k))
	}
	// Output:
	// 429
	// Retry-After: 2
	// RateLimit: "tenant";r=0;t=2
	// RateLimit-Policy: "tenant";q=1000;w=1
	// Cache-Control: no-store
}

// Descriptors from several headers: the tenant and the user, each
// required, and the cost (tokens, bytes...) from X-Units when present.
func ExampleMerge() {
	extract := client.Merge(
		client.FromHeader("X-Tenant", "tenant"),
		client.FromHeader("X-User", "user"),
		client.CostFromHeader("X-Units"),
	)
	req := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	req.Header.Set("X-Tenant", "t42")
	req.Header.Set("X-User", "7")
	req.Header.Set("X-Units", "12")
	d, cost, err := extract(req)
	fmt.Println(d, cost, err)
	// Output:
	// map[tenant:t42 user:7] 12 <nil>
}
