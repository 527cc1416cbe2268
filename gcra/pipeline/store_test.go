package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/pipeline"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
)

func newRedis(tb testing.TB) (*redistest.Server, *redis.Client, *redisstore.Store) {
	tb.Helper()
	srv := redistest.Start(tb)
	opt := redistest.ClientOptions(srv.Addr)
	opt.PoolSize = 64
	c := redis.NewClient(opt)
	tb.Cleanup(func() { _ = c.Close() })
	rs, err := redisstore.New(c)
	if err != nil {
		tb.Fatal(err)
	}
	return srv, c, rs
}

func newPipeline(tb testing.TB, bs gcra.BatchStore, mod func(*pipeline.Config)) *pipeline.Store {
	tb.Helper()
	cfg := pipeline.DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	p, err := pipeline.New(bs, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mod   func(*pipeline.Config)
		field string
	}{
		{"default", func(*pipeline.Config) {}, ""},
		{"batch", func(c *pipeline.Config) { c.MaxBatch = 0 }, "MaxBatch"},
		{"flushers", func(c *pipeline.Config) { c.Flushers = 0 }, "Flushers"},
		{"timeout", func(c *pipeline.Config) { c.Timeout = 0 }, "Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := pipeline.DefaultConfig()
			tc.mod(&cfg)
			err := cfg.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !contains(err.Error(), tc.field) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.field)
			}
		})
	}
	if _, err := pipeline.New(nil, pipeline.DefaultConfig()); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// script is what caller g sends at step i: a decision on its own key
// with its own limit, sometimes composite, sometimes a DecideMany with a
// shadow decision, so every shape rides in merged pipelines.
func script(prefix string, g, i int) [][]gcra.Request {
	lim := gcra.Limit{T: int64(1_000_000 * (g + 1)), Burst: int64(g%5 + 1)}
	own := gcra.Request{Key: fmt.Sprintf("%s:{g%d}:k", prefix, g), Limit: lim, Cost: 1}
	switch i % 3 {
	case 0:
		return [][]gcra.Request{{own}}
	case 1:
		wide := gcra.Request{Key: fmt.Sprintf("%s:{g%d}:t", prefix, g), Limit: gcra.Limit{T: 1_000_000, Burst: int64(g%3 + 2)}, Cost: 1}
		return [][]gcra.Request{{wide, own}}
	default:
		shadow := gcra.Request{Key: fmt.Sprintf("%s:{g%d}:s", prefix, g), Limit: gcra.Limit{T: 1_000_000, Burst: int64(g%4 + 1)}, Cost: 1}
		return [][]gcra.Request{{own}, {shadow}}
	}
}

// widest records the largest batch its store was sent.
type widest struct {
	gcra.BatchStore
	max atomic.Int64
}

func (w *widest) DecideMany(ctx context.Context, batch [][]gcra.Request) []gcra.Answer {
	for n := int64(len(batch)); ; {
		m := w.max.Load()
		if n <= m || w.max.CompareAndSwap(m, n) {
			break
		}
	}
	return w.BatchStore.DecideMany(ctx, batch)
}

func run(ctx context.Context, st gcra.BatchStore, b [][]gcra.Request) []gcra.Answer {
	if len(b) == 1 {
		d, err := st.Decide(ctx, b[0])
		return []gcra.Answer{{Decision: d, Err: err}}
	}
	return st.DecideMany(ctx, b)
}

// TestAnswersReachTheirCallers runs 64 goroutines, each on its own keys
// and limits, through a pipeline Store, and the same calls directly on a
// second key space: each caller's sequence of results must be the
// direct one (limits are a second or more per unit, so the few
// milliseconds between the two runs change nothing).
func TestAnswersReachTheirCallers(t *testing.T) {
	_, _, rs := newRedis(t)
	seen := &widest{BatchStore: rs}
	p := newPipeline(t, seen, func(c *pipeline.Config) { c.MaxBatch = 16; c.Flushers = 2 })
	const goroutines, steps = 64, 12
	ctx := context.Background()
	got := make([][]gcra.Answer, goroutines)
	want := make([][]gcra.Answer, goroutines)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range steps {
				got[g] = append(got[g], run(ctx, p, script("via", g, i))...)
			}
		}()
	}
	close(start)
	wg.Wait()
	for g := range goroutines {
		for i := range steps {
			want[g] = append(want[g], run(ctx, rs, script("direct", g, i))...)
		}
	}
	if w := seen.max.Load(); w < 2 || w > 16 {
		t.Errorf("widest pipeline carried %d decisions, want 2..16 (merged, capped)", w)
	}
	for g := range goroutines {
		if len(got[g]) != len(want[g]) {
			t.Fatalf("goroutine %d: %d answers, want %d", g, len(got[g]), len(want[g]))
		}
		for j := range got[g] {
			a, b := got[g][j], want[g][j]
			if a.Err != nil || b.Err != nil {
				t.Fatalf("goroutine %d answer %d: errors %v / %v", g, j, a.Err, b.Err)
			}
			if a.Allowed != b.Allowed || a.Remaining != b.Remaining || a.Limiting != b.Limiting {
				t.Errorf("goroutine %d answer %d: via pipeline %+v, direct %+v", g, j, a.Decision, b.Decision)
			}
		}
	}
}

// TestErrorsPropagate: a malformed decision fails alone; a decision Redis
// rejects (the key holds a list) carries its error to its own caller only;
// a dead Redis fails everyone.
func TestErrorsPropagate(t *testing.T) {
	srv, c, rs := newRedis(t)
	p := newPipeline(t, rs, nil)
	ctx := context.Background()
	if err := c.RPush(ctx, "list", "x").Err(); err != nil {
		t.Fatal(err)
	}
	lim := gcra.Limit{T: 1000, Burst: 10}
	if _, err := p.Decide(ctx, nil); !errors.Is(err, gcra.ErrNoRequests) {
		t.Fatalf("Decide(nil) = %v, want ErrNoRequests", err)
	}
	a := p.DecideMany(ctx, [][]gcra.Request{
		{{Key: "ok", Limit: lim, Cost: 1}},
		{{Key: "list", Limit: lim, Cost: 1}},
		{{Key: "", Limit: lim, Cost: 1}},
	})
	if a[0].Err != nil || !a[0].Allowed {
		t.Errorf("answer 0 = %+v, want allowed", a[0])
	}
	if !errors.Is(a[1].Err, redisstore.ErrRejected) {
		t.Errorf("answer 1 error = %v, want ErrRejected", a[1].Err)
	}
	if !errors.Is(a[2].Err, gcra.ErrKey) {
		t.Errorf("answer 2 error = %v, want ErrKey", a[2].Err)
	}
	// Merged under load: the rejected decision's error stays its own.
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d", g)
			if g%4 == 0 {
				key = "list"
			}
			for range 20 {
				_, err := p.Decide(ctx, []gcra.Request{{Key: key, Limit: lim, Cost: 1}})
				if (key == "list") != errors.Is(err, redisstore.ErrRejected) {
					wrong.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Fatalf("%d answers carried the wrong error", n)
	}
	srv.Kill()
	if _, err := p.Decide(ctx, []gcra.Request{{Key: "ok", Limit: lim, Cost: 1}}); !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("Decide with Redis dead = %v, want ErrUnavailable", err)
	}
	for _, a := range p.DecideMany(ctx, [][]gcra.Request{{{Key: "a", Limit: lim, Cost: 1}}, {{Key: "b", Limit: lim, Cost: 1}}}) {
		if !errors.Is(a.Err, redisstore.ErrUnavailable) {
			t.Fatalf("DecideMany with Redis dead: %v, want ErrUnavailable", a.Err)
		}
	}
}

// TestCancelledCallerReturns: with the only flush slot stuck on a paused
// Redis, a queued caller whose context is cancelled returns its error at
// once, and the store keeps working once Redis is back.
func TestCancelledCallerReturns(t *testing.T) {
	srv, _, rs := newRedis(t)
	p := newPipeline(t, rs, func(c *pipeline.Config) { c.Flushers = 1 })
	lim := gcra.Limit{T: 1000, Burst: 10}
	req := []gcra.Request{{Key: "k", Limit: lim, Cost: 1}}
	if _, err := p.Decide(context.Background(), req); err != nil { // script loaded
		t.Fatal(err)
	}
	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	stuck := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := p.Decide(ctx, req)
		stuck <- err
	}()
	// Wait until the stuck call holds the only slot: a call with an
	// already-short deadline then times out in the queue, not in Redis.
	wait.Until(t, 5*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		_, err := p.Decide(ctx, req)
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("probe: %w", err)
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := p.Decide(ctx, req)
		res <- err
	}()
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled caller got %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("cancelled caller did not return")
	}
	srv.Resume(t)
	resumed = true
	if err := <-stuck; err != nil {
		t.Fatalf("stuck call after resume: %v", err)
	}
	if _, err := p.Decide(context.Background(), req); err != nil {
		t.Fatalf("after resume: %v", err)
	}
}

// TestI2ThroughPipeline: many goroutines on one key, through merged
// pipelines, admit no more than B + elapsed/T + 1.
func TestI2ThroughPipeline(t *testing.T) {
	_, c, rs := newRedis(t)
	p := newPipeline(t, rs, func(c *pipeline.Config) { c.MaxBatch = 8 })
	lim := gcra.Limit{T: 2000, Burst: 20} // 500/s
	req := []gcra.Request{{Key: "hot", Limit: lim, Cost: 1}}
	ctx := context.Background()
	t0, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var admitted, decided atomic.Int64
	var wg sync.WaitGroup
	for range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 60 {
				d, err := p.Decide(ctx, req)
				if err != nil {
					t.Error(err)
					return
				}
				decided.Add(1)
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t1, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	elapsed := t1.Sub(t0).Microseconds()
	bound := lim.Burst + elapsed/lim.T + 1
	if n := admitted.Load(); n > bound || n == 0 {
		t.Fatalf("admitted %d of %d in %dµs, want 1..%d", n, decided.Load(), elapsed, bound)
	}
	t.Logf("admitted %d of %d in %dµs (bound %d)", admitted.Load(), decided.Load(), elapsed, bound)
}
