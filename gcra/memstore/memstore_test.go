package memstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/allot-dev/allot/gcra"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock in µs.
type fakeClock struct{ us atomic.Int64 }

func (c *fakeClock) Now() time.Time      { return time.UnixMicro(c.us.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.us.Add(d.Microseconds()) }
func (c *fakeClock) Set(us int64)        { c.us.Store(us) }
func newClock(us int64) *fakeClock       { c := &fakeClock{}; c.Set(us); return c }
func newStore(t *testing.T, c *fakeClock) *Store {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Clock = c.Now
	cfg.Shards = 4
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConfig(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"shards zero", func(c *Config) { c.Shards = 0 }, "Shards"},
		{"shards not a power of two", func(c *Config) { c.Shards = 6 }, "Shards"},
		{"no clock", func(c *Config) { c.Clock = nil }, "Clock"},
		{"no sweep", func(c *Config) { c.SweepInterval = 0 }, "SweepInterval"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			before := cfg
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("New = %v, want an error naming %s", err, tc.field)
			}
			if cfg.Shards != before.Shards || cfg.SweepInterval != before.SweepInterval {
				t.Fatal("New changed the caller's config")
			}
		})
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
}

// The store gives the twin's decisions, expiry included: over random
// sequences (limit changes, clock jumps both ways, idle gaps that outlive a
// key), Decide equals gcra.DecideMicros applied to a twin-side map that
// forgets a key after gcra.Expiry, as Redis does.
func TestMatchesTwin(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	clk := newClock(1_700_000_000_000_000)
	st := newStore(t, clk)
	type twinKey struct {
		s       gcra.State
		expires int64
	}
	twin := map[string]twinKey{}
	keys := []string{"a", "b", "c", "d", "e"}
	limits := []gcra.Limit{{T: 200_000, Burst: 3}, {T: 1000, Burst: 50}, {T: 7, Burst: 1}, {T: 100_000, Burst: 10}}
	for i := 0; i < 20_000; i++ {
		now := clk.us.Load()
		n := 1 + r.IntN(3)*r.IntN(2)
		perm := r.Perm(len(keys))[:n]
		reqs := make([]gcra.Request, n)
		items := make([]gcra.Item, n)
		for j, p := range perm {
			l := limits[r.IntN(len(limits))]
			cost := 1 + r.Int64N(l.Burst)
			reqs[j] = gcra.Request{Key: keys[p], Limit: l, Cost: cost}
			tk, ok := twin[keys[p]]
			if ok && now >= tk.expires {
				ok = false
			}
			if ok {
				items[j].State = tk.s
			}
			items[j].Limit, items[j].Cost = l, cost
		}
		out := gcra.DecideAllMicros(items, now)
		got, err := st.Decide(context.Background(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		if got.Result != out.Result || (n > 1 && got.Limiting != out.Limiting) {
			t.Fatalf("step %d at %d: Decide(%+v) = %+v, twin %+v", i, now, reqs, got, out)
		}
		for j, p := range perm {
			if out.Write[j] {
				twin[keys[p]] = twinKey{out.States[j], now + gcra.Expiry(out.States[j], now).Microseconds()}
			}
		}
		switch r.IntN(8) {
		case 0:
			clk.Add(time.Duration(r.Int64N(3_000_000)) * time.Microsecond) // long idle: keys expire
		case 1:
			clk.Add(-time.Duration(r.Int64N(2000)) * time.Microsecond)
		default:
			clk.Add(time.Duration(r.Int64N(100_000)) * time.Microsecond)
		}
	}
}

func TestCompositeAllOrNothing(t *testing.T) {
	clk := newClock(1_700_000_000_000_000)
	st := newStore(t, clk)
	ctx := context.Background()
	loose := gcra.Limit{T: 1000, Burst: 100}
	tight := gcra.Limit{T: 100_000, Burst: 1}
	if _, err := st.Decide(ctx, []gcra.Request{{Key: "t", Limit: tight, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	before, _ := st.Peek("t")
	d, err := st.Decide(ctx, []gcra.Request{{Key: "l", Limit: loose, Cost: 10}, {Key: "t", Limit: tight, Cost: 1}})
	if err != nil || d.Allowed || d.Limiting != 1 || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("composite = %+v, %v; want denied by key 1 with 100ms", d, err)
	}
	if _, ok := st.Peek("l"); ok {
		t.Fatal("a denied composite wrote key l")
	}
	if after, _ := st.Peek("t"); after != before {
		t.Fatalf("a denied composite changed key t: %+v → %+v", before, after)
	}
	if _, err := st.Decide(ctx, []gcra.Request{{Key: "l", Limit: loose, Cost: 1}, {Key: "l", Limit: loose, Cost: 1}}); !errors.Is(err, gcra.ErrDuplicateKey) {
		t.Fatalf("duplicate keys = %v, want ErrDuplicateKey", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := st.Decide(cctx, []gcra.Request{{Key: "l", Limit: loose, Cost: 1}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Decide with a canceled context = %v", err)
	}
}

// With the clock frozen, concurrent callers on one key get exactly B units.
func TestConcurrentFrozenClock(t *testing.T) {
	clk := newClock(1_700_000_000_000_000)
	st := newStore(t, clk)
	l := gcra.Limit{T: 1000, Burst: 500}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				d, err := st.Decide(context.Background(), []gcra.Request{{Key: "hot", Limit: l, Cost: 1}, {Key: "other", Limit: l, Cost: 1}})
				if err == nil && d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != l.Burst {
		t.Fatalf("admitted %d with the clock frozen, want exactly B = %d", got, l.Burst)
	}
}

// I6: a key is gone once its TAT (rounded up to a ms, plus 1 ms) is past:
// lazily on read, and by Sweep and Run.
func TestExpiry(t *testing.T) {
	clk := newClock(1_700_000_000_000_000)
	st := newStore(t, clk)
	l := gcra.Limit{T: 50_000, Burst: 4}
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := st.Decide(ctx, []gcra.Request{{Key: k, Limit: l, Cost: 3}}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(150 * time.Millisecond) // TAT reached: still there, as in Redis
	if _, ok := st.Peek("a"); !ok {
		t.Fatal("key gone at its TAT, before its expiry")
	}
	if n := st.Sweep(); n != 0 {
		t.Fatalf("Sweep at the TAT dropped %d keys", n)
	}
	clk.Add(1 * time.Millisecond)
	if _, ok := st.Peek("a"); ok {
		t.Fatal("key still there after its expiry")
	}
	if d, _ := st.Decide(ctx, []gcra.Request{{Key: "a", Limit: l, Cost: 1}}); d.Remaining != 3 {
		t.Fatalf("decision on an expired key = %+v, want a fresh key (3 remaining)", d)
	}
	if n := st.Sweep(); n != 2 {
		t.Fatalf("Sweep dropped %d keys, want 2 (b and c)", n)
	}
	if n := st.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1", n)
	}

	// Run sweeps on its own ticker until its context ends.
	cfg := DefaultConfig()
	cfg.Clock = clk.Now
	cfg.SweepInterval = time.Millisecond
	st2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st2.Decide(ctx, []gcra.Request{{Key: "x", Limit: l, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- st2.Run(runCtx) }()
	clk.Add(time.Second)
	deadline := time.After(5 * time.Second)
	for st2.Len() != 0 {
		select {
		case <-deadline:
			t.Fatal("Run did not sweep the expired key within 5s")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
}

func TestDecideMany(t *testing.T) {
	clk := newClock(1_700_000_000_000_000)
	st := newStore(t, clk)
	l := gcra.Limit{T: 1_000_000, Burst: 2}
	ans := st.DecideMany(context.Background(), [][]gcra.Request{
		{{Key: "k", Limit: l, Cost: 1}},
		{{Key: "k", Limit: l, Cost: 1}},
		{{Key: "k", Limit: l, Cost: 1}},
		{{Key: "k", Limit: l, Cost: 3}},
	})
	for i, want := range []bool{true, true, false} {
		if ans[i].Err != nil || ans[i].Allowed != want {
			t.Errorf("answer %d = %+v, want allowed=%v", i, ans[i], want)
		}
	}
	if !errors.Is(ans[3].Err, gcra.ErrCostExceedsBurst) {
		t.Errorf("answer 3 = %v, want ErrCostExceedsBurst", ans[3].Err)
	}
}

// A store that starts keys empty admits at the rate from the first request:
// no burst on top of what another store may have admitted.
func TestStartEmpty(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	cfg := DefaultConfig()
	cfg.Clock = func() time.Time { return now }
	for _, empty := range []bool{false, true} {
		cfg.StartEmpty = empty
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		lim := gcra.Limit{T: 100_000, Burst: 5} // 10/s, burst 5
		admitted := 0
		for range 5 {
			d, err := s.Decide(context.Background(), []gcra.Request{{Key: "k", Limit: lim, Cost: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if want := map[bool]int{false: 5, true: 0}[empty]; admitted != want {
			t.Errorf("StartEmpty=%v: %d of 5 admitted at once, want %d", empty, admitted, want)
		}
		now = now.Add(100 * time.Millisecond) // one emission interval
		d, _ := s.Decide(context.Background(), []gcra.Request{{Key: "k2", Limit: lim, Cost: 1}})
		if empty && d.Allowed {
			t.Errorf("StartEmpty: a new key admitted at once")
		}
		d, _ = s.Decide(context.Background(), []gcra.Request{{Key: "k", Limit: lim, Cost: 1}})
		if !d.Allowed {
			t.Errorf("StartEmpty=%v: one emission interval later, denied", empty)
		}
	}
}

// Reserve, then settle, as the twin says: a composite's keys refunded
// alike, a second settle and an expired reservation refused unchanged.
func TestReserveSettle(t *testing.T) {
	clk := newClock(1_700_000_000_000_000)
	s := newStore(t, clk)
	ctx := context.Background()
	reqs := []gcra.Request{
		{Key: "a", Limit: gcra.Limit{T: 1000, Burst: 100}, Cost: 40},
		{Key: "b", Limit: gcra.Limit{T: 5000, Burst: 50}, Cost: 40},
	}
	if d, err := s.DecideReserve(ctx, gcra.Reservation{Key: "r", Reqs: reqs}, time.Second); err != nil || !d.Allowed {
		t.Fatalf("decide and reserve: %+v %v", d, err)
	}
	before := [2]gcra.State{}
	for i, r := range reqs {
		before[i], _ = s.Peek(r.Key)
	}
	if _, err := s.Settle(ctx, "r", 10); err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		st, _ := s.Peek(r.Key)
		if want := before[i].TAT - 30*r.Limit.T; st.TAT != want {
			t.Errorf("key %s: TAT %d after refunding 30, want %d", r.Key, st.TAT, want)
		}
	}
	if _, err := s.Settle(ctx, "r", 0); !errors.Is(err, gcra.ErrNoReservation) {
		t.Errorf("second settle: %v, want ErrNoReservation", err)
	}
	if d, err := s.DecideReserve(ctx, gcra.Reservation{Key: "r2", Reqs: reqs}, time.Second); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	if _, err := s.Settle(ctx, "r2", -3); !errors.Is(err, gcra.ErrActual) {
		t.Errorf("negative actual: %v, want ErrActual", err)
	}
	clk.Add(2 * time.Second)
	if _, err := s.Settle(ctx, "r2", 0); !errors.Is(err, gcra.ErrNoReservation) {
		t.Errorf("expired reservation: %v, want ErrNoReservation", err)
	}
}

// A refund after the key refilled and was spent again gives nothing back
// (what time returned is not returned twice); a charge on a missing key of
// a store whose keys start empty starts from empty.
func TestSettleMintsNothing(t *testing.T) {
	clk := newClock(1_700_000_000_000_000)
	s := newStore(t, clk)
	ctx := context.Background()
	l := gcra.Limit{T: 1_000_000, Burst: 10}
	r := []gcra.Request{{Key: "k", Limit: l, Cost: 10}}
	if d, err := s.DecideReserve(ctx, gcra.Reservation{Key: "res", Reqs: r}, time.Hour); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	clk.Add(10 * time.Second) // refilled
	if d, _ := s.Decide(ctx, r); !d.Allowed {
		t.Fatal("spend after the refill")
	}
	if _, err := s.Settle(ctx, "res", 0); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Decide(ctx, []gcra.Request{{Key: "k", Limit: l, Cost: 1}}); d.Allowed {
		t.Fatal("the refund minted: the key admits again at once")
	}

	cfg := DefaultConfig()
	cfg.Clock, cfg.Shards, cfg.StartEmpty = clk.Now, 4, true
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Charge(ctx, []gcra.Request{{Key: "x", Limit: l, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.Decide(ctx, []gcra.Request{{Key: "x", Limit: l, Cost: 1}}); d.Allowed {
		t.Fatal("a charge on a missing key of an empty-starting store left it fuller than empty")
	}
}

// A key spent under a slow limit and restated under a fast one refills at
// the fast rate from the restate on; without the restate it refills at the
// slow rate until its next decision. A missing key stays missing.
func TestRestate(t *testing.T) {
	ctx := context.Background()
	slow, fast := gcra.Limit{T: 300_000, Burst: 1}, gcra.Limit{T: 10_000, Burst: 8}
	for _, restate := range []bool{false, true} {
		clk := newClock(1_700_000_000_000_000)
		s := newStore(t, clk)
		if d, _ := s.Decide(ctx, []gcra.Request{{Key: "k", Limit: slow, Cost: 1}}); !d.Allowed {
			t.Fatal("first decision denied")
		}
		clk.Add(5 * time.Millisecond) // the grant arrives
		if restate {
			if err := s.Restate(ctx, []gcra.Request{{Key: "k", Limit: fast}, {Key: "gone", Limit: fast}}); err != nil {
				t.Fatal(err)
			}
			if _, ok := s.Peek("gone"); ok {
				t.Fatal("a missing key was restated into existence")
			}
			if st, _ := s.Peek("k"); st.T != fast.T || st.Burst != fast.Burst {
				t.Fatalf("after the restate the key holds %+v, want it under %+v", st, fast)
			}
		}
		clk.Add(78 * time.Millisecond) // the next request, 83 ms after the first
		d, err := s.Decide(ctx, []gcra.Request{{Key: "k", Limit: fast, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		// Restated at 5 ms: 5/300 of a unit then, plus 78 ms at 10 ms a
		// unit. Not restated: 83/300 of a unit, restated at 83 ms.
		if d.Allowed != restate {
			t.Errorf("restated %v: the request 78 ms after the grant: allowed %v, want %v", restate, d.Allowed, restate)
		}
		if restate && d.Remaining != 6 {
			t.Errorf("restated: %d units left after the request, want 6 (7.8 refilled, one spent, whole units)", d.Remaining)
		}
	}
	if err := newStore(t, newClock(1)).Restate(ctx, nil); err == nil {
		t.Error("an empty restate accepted")
	}
}
