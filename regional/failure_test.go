package regional

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
)

// Kill Redis: fail-open limits keep admitting at the fallback rate (from an
// empty bucket: no burst) and fail-closed ones deny, each answering within the timeout (p99 measured
// here), all counted; the breaker closes again when Redis returns.
func TestRedisKilled(t *testing.T) {
	rs := redistest.Start(t)
	opts := redistest.ClientOptions(rs.Addr)
	opts.MaxRetries = -1
	rc := redis.NewClient(opts)
	t.Cleanup(func() { _ = rc.Close() })
	store, err := redisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	p := startPod(t, store, func(c *Config) {
		c.StoreTimeout = 5 * time.Millisecond // the default
		c.BreakerOpen = 300 * time.Millisecond
	})
	ctx := context.Background()
	// Healthy: decisions come from Redis (retry while a loaded machine
	// still misses the 5 ms timeout now and then).
	wait.Until(t, 10*time.Second, func() error {
		d, err := p.s.Decide(ctx, map[string]string{"tenant": "warm"}, 1)
		if err != nil || d.Fallback {
			return errors.New("not from Redis yet")
		}
		return nil
	})

	// The tenant limit's fail-open share is the leader's: one pod, all of
	// the region's 5/s burst 3, lowered to the fallback_rate 2/s.
	waitShare(t, p, 1)

	// Fallback decisions before the kill (a loaded machine's timeouts in
	// the warm-up above) are not the outage's.
	fallbacks := func() float64 {
		var n float64
		for _, reason := range []string{"timeout", "unavailable", "breaker_open", "error"} {
			n += testutil.ToFloat64(p.s.m.fallback.WithLabelValues("tenant", "us-east", reason))
		}
		return n
	}
	before := fallbacks()
	rs.Kill()
	var took []time.Duration
	rate := newRateCheck(t, 500*time.Millisecond) // 2/s
	decide := func() bool {
		t.Helper()
		start := time.Now()
		d, err := p.s.Decide(ctx, map[string]string{"tenant": "t2"}, 1)
		took = append(took, time.Since(start))
		if err != nil || !d.Fallback || d.Closed {
			t.Fatalf("decision with Redis dead = %+v, %v; want a fail-open fallback decision", d, err)
		}
		return d.Allowed
	}
	for range 40 {
		rate.add(decide())
		start := time.Now()
		dl, err := p.s.Decide(ctx, map[string]string{"tenant": "t2", "route": "/login"}, 1)
		took = append(took, time.Since(start))
		if err != nil || dl.Allowed || !dl.Fallback || dl.Limit != "login" {
			t.Fatalf("login with Redis dead = %+v, %v; want denied (fails closed)", dl, err)
		}
	}
	// Over HTTP a closed limit's denial is a 503, not a 429: the caller
	// did not exceed its allowance.
	req, _ := http.NewRequest("GET", p.http.URL+"/v1/forward-auth", nil)
	req.Header.Set("X-Allot-Tenant", "t2")
	req.Header.Set("X-Allot-Route", "/login")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("forward-auth of a closed limit with Redis dead = %d %v, want 503 with Retry-After", resp.StatusCode, resp.Header)
	}
	// Decisions do not wait on the dead Redis: the breaker answers them in
	// microseconds. (The bound is on p90, not the maximum: on two cores
	// shared with the race detector and other tests, one decision in 80
	// was measured at 11 ms of scheduling alone.)
	slices.Sort(took)
	p90 := took[len(took)*90/100]
	t.Logf("decisions with Redis dead: p50 %v, p90 %v, max %v", took[len(took)/2], p90, took[len(took)-1])
	if p90 > 10*time.Millisecond {
		t.Errorf("p90 of decisions with Redis dead = %v, want under 10ms", p90)
	}
	// Open: the fallback starts empty (Redis may have spent the burst of 3
	// just before it died) and admits 2/s from the first decision: the 40
	// quick decisions admit no burst, and then one unit comes every 500 ms
	// (rate checks both at every decision).
	rate.until(2, decide)
	if counted := fallbacks() - before; counted != float64(rate.decisions) {
		t.Errorf("fallback decisions counted for tenant = %v, want %d", counted, rate.decisions)
	}

	rs.Restart(t)
	wait.Until(t, 10*time.Second, func() error {
		d, err := p.s.Decide(ctx, map[string]string{"tenant": "t3"}, 1)
		if err != nil || d.Fallback {
			return errors.New("still in fallback")
		}
		return nil
	})
}
