package coalesce

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/allot-dev/allot/internal/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"max batch", func(c *Config) { c.MaxBatch = 0 }, "MaxBatch"},
		{"flushers", func(c *Config) { c.Flushers = 0 }, "Flushers"},
		{"timeout", func(c *Config) { c.Timeout = 0 }, "Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			_, err := New(func(context.Context, []int) []int { return nil }, c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	if _, err := New[int, int](nil, DefaultConfig()); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// recorder is a send that answers each item with itself × 10, after a
// short pause so callers pile up, and records batch sizes.
type recorder struct {
	mu      sync.Mutex
	sizes   []int
	active  atomic.Int32
	maxSeen atomic.Int32
}

func (r *recorder) send(_ context.Context, items []int) []int {
	n := r.active.Add(1)
	for {
		m := r.maxSeen.Load()
		if n <= m || r.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	defer r.active.Add(-1)
	r.mu.Lock()
	r.sizes = append(r.sizes, len(items))
	r.mu.Unlock()
	<-time.After(200 * time.Microsecond) // the fake backend's round trip
	out := make([]int, len(items))
	for i, v := range items {
		out[i] = v * 10
	}
	return out
}

// TestAnswersReachTheirCallers: 64 goroutines × 200 calls of 1–3 items
// each get exactly their own answers in order, exchanges merge, never
// exceed MaxBatch, and no more than Flushers run at once (call objects are
// reused throughout, so a reuse bug would cross answers).
func TestAnswersReachTheirCallers(t *testing.T) {
	var r recorder
	cfg := DefaultConfig()
	cfg.MaxBatch, cfg.Flushers = 16, 2
	co, err := New(r.send, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 200 {
				items := make([]int, 1+(g+i)%3)
				for k := range items {
					items[k] = g*1_000_000 + i*10 + k
				}
				a, err := co.Do(context.Background(), items)
				if err != nil {
					t.Errorf("Do: %v", err)
					return
				}
				if len(a) != len(items) {
					t.Errorf("%d answers for %d items", len(a), len(items))
					return
				}
				for k := range items {
					if a[k] != items[k]*10 {
						t.Errorf("goroutine %d call %d item %d: answer %d, want %d", g, i, k, a[k], items[k]*10)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	merged, total := 0, 0
	for _, n := range r.sizes {
		if n > cfg.MaxBatch {
			t.Errorf("an exchange of %d items, MaxBatch %d", n, cfg.MaxBatch)
		}
		if n > 3 {
			merged++
		}
		total += n
	}
	if merged == 0 {
		t.Errorf("no exchange merged calls: sizes %v", r.sizes[:min(20, len(r.sizes))])
	}
	if got := r.maxSeen.Load(); got > int32(cfg.Flushers) {
		t.Errorf("%d exchanges in flight at once, Flushers %d", got, cfg.Flushers)
	}
	if want := 64 * (200*2 + 0); total < want-64*2 {
		t.Errorf("%d items sent, want about %d", total, want)
	}
	t.Logf("%d exchanges, %d merged, %d items", len(r.sizes), merged, total)
}

// TestLoneCallUsesItsOwnContext: with nothing else queued, the exchange
// sees the caller's context (its values and its deadline).
func TestLoneCallUsesItsOwnContext(t *testing.T) {
	type key struct{}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Hour)
	defer cancel()
	want, _ := ctx.Deadline()
	co, err := New(func(c context.Context, items []int) []int {
		if c.Value(key{}) != "v" {
			t.Error("exchange lost the caller's values")
		}
		if d, ok := c.Deadline(); !ok || !d.Equal(want) {
			t.Errorf("exchange deadline %v, want the caller's %v", d, want)
		}
		return items
	}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := co.Do(ctx, []int{1}); err != nil {
		t.Fatal(err)
	}
}

// TestCancelledWaiterReturns: a caller queued behind a stuck exchange
// returns its context's error at once, and is never sent.
func TestCancelledWaiterReturns(t *testing.T) {
	release := make(chan struct{})
	var sent sync.Map
	cfg := DefaultConfig()
	cfg.Flushers = 1
	co, err := New(func(_ context.Context, items []int) []int {
		for _, v := range items {
			sent.Store(v, true)
		}
		if items[0] == 1 {
			<-release
		}
		return items
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { _, err := co.Do(context.Background(), []int{1}); first <- err }()
	wait.Until(t, 5*time.Second, func() error {
		if _, ok := sent.Load(1); !ok {
			return errors.New("first exchange not started")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() { _, err := co.Do(ctx, []int{2}); second <- err }()
	cancel()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled waiter did not return")
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The slot is free again and the cancelled item was never sent.
	if a, err := co.Do(context.Background(), []int{3}); err != nil || a[0] != 3 {
		t.Fatalf("Do after = %v, %v", a, err)
	}
	if _, ok := sent.Load(2); ok {
		t.Error("a cancelled caller's item was sent")
	}
}

// TestOversizedCallAlone: a call above MaxBatch is sent alone, whole.
func TestOversizedCallAlone(t *testing.T) {
	var sizes []int
	cfg := DefaultConfig()
	cfg.MaxBatch = 4
	co, err := New(func(_ context.Context, items []int) []int { sizes = append(sizes, len(items)); return items }, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := co.Do(context.Background(), []int{1, 2, 3, 4, 5, 6})
	if err != nil || len(a) != 6 || len(sizes) != 1 || sizes[0] != 6 {
		t.Fatalf("Do = %v, %v; sizes %v", a, err, sizes)
	}
}

// TestMergedDeadlineIsTheLatest: a merged exchange ends at the latest of
// its callers' deadlines and ignores their cancellation.
func TestMergedDeadlineIsTheLatest(t *testing.T) {
	release := make(chan struct{})
	deadlines := make(chan time.Time, 4)
	cfg := DefaultConfig()
	cfg.Flushers = 1
	var started atomic.Bool
	co, err := New(func(ctx context.Context, items []int) []int {
		if items[0] == 0 {
			started.Store(true)
			<-release
			return items
		}
		d, _ := ctx.Deadline()
		deadlines <- d
		return items
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _, _ = co.Do(context.Background(), []int{0}); close(done) }()
	wait.Until(t, 5*time.Second, func() error {
		if !started.Load() {
			return errors.New("not started")
		}
		return nil
	})
	base := time.Now()
	ctxA, cancelA := context.WithDeadline(context.Background(), base.Add(time.Minute))
	defer cancelA()
	ctxB, cancelB := context.WithDeadline(context.Background(), base.Add(time.Hour))
	defer cancelB()
	var wg sync.WaitGroup
	var queued atomic.Int32
	for _, ctx := range []context.Context{ctxA, ctxB} {
		wg.Go(func() {
			queued.Add(1)
			if _, err := co.Do(ctx, []int{1}); err != nil {
				t.Error(err)
			}
		})
	}
	wait.Until(t, 5*time.Second, func() error {
		co.mu.Lock()
		n := len(co.queue)
		co.mu.Unlock()
		if n < 2 {
			return errors.New("callers not queued yet")
		}
		return nil
	})
	close(release)
	wg.Wait()
	<-done
	if d := <-deadlines; !d.Equal(base.Add(time.Hour)) {
		t.Errorf("merged exchange deadline %v after base, want 1h", d.Sub(base))
	}
}

// endingCtx is a context that is live for its first n calls of Err and has
// ended after: the deadline passing between Do's check and its flush.
type endingCtx struct {
	context.Context
	calls atomic.Int32
	n     int32
	done  chan struct{}
}

func (c *endingCtx) Err() error {
	if c.calls.Add(1) > c.n {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *endingCtx) Done() <-chan struct{} { return c.done }

// A caller whose context ends between Do's check and the flush it starts
// leaves nothing to send: Do returns the context's error, sends nothing,
// and the flush slot is free for the next caller (it panicked on an empty
// batch).
func TestContextEndsBeforeTheFlush(t *testing.T) {
	var sent atomic.Int32
	cfg := DefaultConfig()
	cfg.Flushers = 1
	co, err := New(func(_ context.Context, items []int) []int {
		sent.Add(int32(len(items)))
		return items
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	close(done)
	ctx := &endingCtx{Context: context.Background(), n: 1, done: done}
	if _, err := co.Do(ctx, []int{1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want the context's error", err)
	}
	if n := sent.Load(); n != 0 {
		t.Fatalf("%d items of an ended call were sent", n)
	}
	a, err := co.Do(context.Background(), []int{7})
	if err != nil || len(a) != 1 || a[0] != 7 {
		t.Fatalf("the next call got %v, %v: the flush slot was not released", a, err)
	}
}
