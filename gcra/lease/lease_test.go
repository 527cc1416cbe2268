package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/lease"
	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counting wraps a Store and sums the units it admitted: what "the script
// counted".
type counting struct {
	gcra.Store
	units atomic.Int64
}

func (c *counting) Decide(ctx context.Context, reqs []gcra.Request) (gcra.Decision, error) {
	d, err := c.Store.Decide(ctx, reqs)
	if err == nil && d.Allowed {
		for _, r := range reqs {
			c.units.Add(r.Cost)
		}
	}
	return d, err
}

type fakeClock struct{ us atomic.Int64 }

func (c *fakeClock) Now() time.Time      { return time.UnixMicro(c.us.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.us.Add(d.Microseconds()) }

func setup(t *testing.T, size, minBurst int64) (*fakeClock, *counting, lease.Config) {
	t.Helper()
	clk := &fakeClock{}
	clk.us.Store(1_700_000_000_000_000)
	mcfg := memstore.DefaultConfig()
	mcfg.Clock = clk.Now
	ms, err := memstore.New(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := lease.DefaultConfig()
	cfg.Size, cfg.MinBurst, cfg.Clock = size, minBurst, clk.Now
	return clk, &counting{Store: ms}, cfg
}

func newLimiter(t *testing.T, s gcra.Store, cfg lease.Config) *lease.Limiter {
	t.Helper()
	l, err := lease.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestConfig(t *testing.T) {
	cases := []struct {
		name, field string
		edit        func(*lease.Config)
	}{
		{"size", "Size", func(c *lease.Config) { c.Size = 0 }},
		{"ttl", "TTL", func(c *lease.Config) { c.TTL = 0 }},
		{"min burst", "MinBurst", func(c *lease.Config) { c.MinBurst = c.Size - 1 }},
		{"size above MaxSize", "Size", func(c *lease.Config) { c.Size, c.MinBurst = lease.MaxSize+1, lease.MaxSize+1 }},
		{"tick", "Tick", func(c *lease.Config) { c.Tick = -time.Millisecond }},
	}
	for _, tc := range cases {
		cfg := lease.DefaultConfig()
		tc.edit(&cfg)
		if _, err := lease.New(&counting{}, cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: New = %v, want an error naming %s", tc.name, err, tc.field)
		}
	}
	if _, err := lease.New(nil, lease.DefaultConfig()); err == nil {
		t.Error("New(nil store) succeeded")
	}
}

// Several pods (Limiters) over one store, many goroutines each, random
// costs, the clock moving: the pods never admit more than the store
// counted, and what the store counted but nobody admitted is exactly the
// stranded units plus those still held. With coarse, each pod's Run
// advances a coarse clock every millisecond (and sweeps) meanwhile. With
// sized, every decision names its own lease size (DecideSized: 5, 10 or
// 20 at random), so a key's lease size changes from one lease to the next.
func TestNeverAdmitsMoreThanStoreCounted(t *testing.T) {
	for _, tc := range []struct {
		name          string
		coarse, sized bool
	}{{"exact", false, false}, {"coarse", true, false}, {"coarse/sized", true, true}} {
		t.Run(tc.name, func(t *testing.T) { testNeverAdmitsMoreThanStoreCounted(t, tc.coarse, tc.sized) })
	}
}

func testNeverAdmitsMoreThanStoreCounted(t *testing.T, coarse, sized bool) {
	clk, store, cfg := setup(t, 10, 40)
	cfg.TTL = 20 * time.Millisecond
	cfg.Tick = time.Millisecond
	l := gcra.Limit{T: 1000, Burst: 100} // 1000/s
	pods := []*lease.Limiter{newLimiter(t, store, cfg), newLimiter(t, store, cfg), newLimiter(t, store, cfg)}
	stop := func() {}
	if coarse {
		ctx, cancel := context.WithCancel(context.Background())
		var runs sync.WaitGroup
		for _, p := range pods {
			runs.Go(func() {
				if err := p.Run(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		stop = func() { cancel(); runs.Wait() }
		t.Cleanup(stop)
	}
	start := clk.us.Load()
	var admitted, allowed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			pod := pods[g%len(pods)]
			for i := 0; i < 3000; i++ {
				switch r.IntN(400) {
				case 0:
					clk.Add(cfg.TTL + time.Millisecond) // a quiet spell: leases expire
				case 1, 2, 3, 4, 5, 6, 7, 8, 9, 10:
					clk.Add(time.Duration(r.Int64N(2000)) * time.Microsecond)
				}
				cost := 1 + r.Int64N(3)
				key := "k" + string(rune('0'+r.IntN(2)))
				var d gcra.Decision
				var err error
				if sized {
					size := []int64{5, 10, 20}[r.IntN(3)]
					d, err = pod.DecideSized(context.Background(), gcra.Request{Key: key, Limit: l, Cost: cost}, size)
				} else {
					d, err = pod.Decide(context.Background(), []gcra.Request{{Key: key, Limit: l, Cost: cost}})
				}
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(cost)
					allowed.Add(1)
				}
			}
		}(g)
	}
	wg.Wait()
	stop() // no sweep between the reads of Stats below
	elapsed := clk.us.Load() - start
	counted := store.units.Load()
	if got := admitted.Load(); got > counted {
		t.Fatalf("pods admitted %d units, the store counted only %d", got, counted)
	}
	if bound := 2 * (l.Burst + elapsed/l.T + 1); counted > bound {
		t.Fatalf("store counted %d units over two keys in %dµs, bound %d", counted, elapsed, bound)
	}
	var stranded, held, leased, served, decisions int64
	for _, p := range pods {
		s := p.Stats()
		stranded += s.Stranded
		held += s.Held
		leased += s.LeasedUnits
		served += s.ServedUnits + s.FallbackUnits
		decisions += s.Served + s.Fallbacks - s.Denied
	}
	if decisions != allowed.Load() {
		t.Fatalf("pods report %d decisions allowed (served + fallbacks − denied), callers saw %d", decisions, allowed.Load())
	}
	if gap := counted - admitted.Load(); gap != stranded+held {
		t.Fatalf("store counted %d, pods admitted %d: gap %d, but stranded %d + held %d", counted, admitted.Load(), gap, stranded, held)
	}
	if served != admitted.Load() {
		t.Fatalf("pods report %d units served, callers saw %d admitted", served, admitted.Load())
	}
	if leased == 0 || stranded == 0 {
		t.Fatalf("leased %d, stranded %d: the test did not exercise leases and expiry", leased, stranded)
	}
	// Once every lease has expired, a sweep writes every held unit off.
	clk.Add(cfg.TTL)
	for _, p := range pods {
		p.Sweep()
		if s := p.Stats(); s.Held != 0 {
			t.Errorf("after expiry and Sweep, Held = %d", s.Held)
		}
	}
}

// The seed's edge: with fewer units left than a lease, the Limiter asks for
// one unit instead of failing.
func TestSingleUnitFallbackNearTheEdge(t *testing.T) {
	_, store, cfg := setup(t, 10, 40)
	l := gcra.Limit{T: 1_000_000, Burst: 45} // refills 1/s: nothing refills during the test
	p := newLimiter(t, store, cfg)
	ctx := context.Background()
	req := []gcra.Request{{Key: "edge", Limit: l, Cost: 1}}
	var admitted int64
	for i := 0; i < 60; i++ {
		d, err := p.Decide(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	s := p.Stats()
	if admitted != 45 {
		t.Fatalf("admitted %d of a burst of 45, want all 45 (4 leases of 10, then 5 single units); stats %+v", admitted, s)
	}
	if s.Leases != 4 || s.Fallbacks != 20 || s.FallbackUnits != 5 || s.Denied != 15 {
		t.Fatalf("stats %+v, want 4 leases, 20 fallbacks of which 5 admitted, 15 denied", s)
	}
}

func TestStrandedReported(t *testing.T) {
	clk, store, cfg := setup(t, 10, 40)
	p := newLimiter(t, store, cfg)
	l := gcra.Limit{T: 1000, Burst: 100}
	ctx := context.Background()
	req := []gcra.Request{{Key: "quiet", Limit: l, Cost: 1}}
	if d, err := p.Decide(ctx, req); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Fatalf("first decision = %+v, %v; want allowed with 9 held", d, err)
	}
	clk.Add(cfg.TTL) // the pod goes quiet past the lease's TTL
	if d, err := p.Decide(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("decision after the TTL = %+v, %v", d, err)
	}
	if s := p.Stats(); s.Stranded != 9 || s.Leases != 2 || s.Held != 9 {
		t.Fatalf("stats %+v, want 9 stranded, 2 leases, 9 held", s)
	}
	clk.Add(cfg.TTL)
	if n := p.Sweep(); n != 1 {
		t.Fatalf("Sweep forgot %d keys, want 1", n)
	}
	if s := p.Stats(); s.Stranded != 18 || s.Held != 0 {
		t.Fatalf("stats after Sweep %+v, want 18 stranded, 0 held", s)
	}
	if counted := store.units.Load(); counted != 20 {
		t.Fatalf("store counted %d units, want the two leases' 20", counted)
	}
}

func TestPassthrough(t *testing.T) {
	_, store, cfg := setup(t, 10, 40)
	p := newLimiter(t, store, cfg)
	ctx := context.Background()
	big := gcra.Limit{T: 1000, Burst: 100}
	small := gcra.Limit{T: 1000, Burst: 20}
	for _, reqs := range [][]gcra.Request{
		{{Key: "a", Limit: big, Cost: 1}, {Key: "b", Limit: big, Cost: 1}}, // composite
		{{Key: "c", Limit: small, Cost: 1}},                                // burst below MinBurst
		{{Key: "d", Limit: big, Cost: 11}},                                 // cost above Size
	} {
		if d, err := p.Decide(ctx, reqs); err != nil || !d.Allowed {
			t.Fatalf("Decide(%+v) = %+v, %v", reqs, d, err)
		}
	}
	if s := p.Stats(); s.Passthrough != 3 || s.Leases != 0 {
		t.Fatalf("stats %+v, want 3 pass-throughs and no lease", s)
	}
	if got := store.units.Load(); got != 14 {
		t.Fatalf("store counted %d, want exactly the 14 units asked", got)
	}
	if _, err := p.Decide(ctx, []gcra.Request{{Key: "", Limit: big, Cost: 1}}); !errors.Is(err, gcra.ErrKey) {
		t.Fatalf("empty key = %v, want gcra.ErrKey", err)
	}
}

// blocking is a Store that holds every call until released.
type blocking struct{ release chan struct{} }

func (b *blocking) Decide(ctx context.Context, _ []gcra.Request) (gcra.Decision, error) {
	select {
	case <-b.release:
		return gcra.Decision{Result: gcra.Result{Allowed: true}}, nil
	case <-ctx.Done():
		return gcra.Decision{}, ctx.Err()
	}
}

// A decision waiting for another's refill of the same key gives up at its
// deadline.
func TestWaitHonoursContext(t *testing.T) {
	b := &blocking{release: make(chan struct{})}
	p := newLimiter(t, b, lease.DefaultConfig())
	req := []gcra.Request{{Key: "k", Limit: gcra.Limit{T: 1000, Burst: 100}, Cost: 1}}
	first := make(chan error)
	go func() {
		_, err := p.Decide(context.Background(), req)
		first <- err
	}()
	// Wait until the first decision holds the key (it is blocked in the store).
	wait.Until(t, 5*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err := p.Decide(ctx, req)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return nil
		case err == nil:
			return errors.New("second decision answered, want a deadline error while the key is being refilled")
		default:
			return fmt.Errorf("second decision: %w; want a deadline error while the key is being refilled", err)
		}
	})
	close(b.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// On real Redis: three pods leasing from one key, many goroutines, for
// 1.5 s. The pods admit no more than the script counted, and that stays
// within B + elapsed/T (+1) on Redis's clock.
func TestLeasesOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	rs, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	store := &counting{Store: rs}
	cfg := lease.DefaultConfig()
	cfg.TTL = 50 * time.Millisecond
	pods := []*lease.Limiter{newLimiter(t, store, cfg), newLimiter(t, store, cfg), newLimiter(t, store, cfg)}
	l := gcra.Limit{T: 2000, Burst: 50} // 500/s
	begin, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func(p *lease.Limiter) {
			defer wg.Done()
			for ctx.Err() == nil {
				d, err := p.Decide(context.Background(), []gcra.Request{{Key: "shared", Limit: l, Cost: 1}})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}(pods[g%3])
	}
	wg.Wait()
	end, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	elapsed := end.Sub(begin).Microseconds()
	counted := store.units.Load()
	t.Logf("admitted %d, script counted %d, bound %d", admitted.Load(), counted, l.Burst+elapsed/l.T+1)
	if admitted.Load() > counted {
		t.Fatalf("pods admitted %d units, the script counted %d", admitted.Load(), counted)
	}
	if bound := l.Burst + elapsed/l.T + 1; counted > bound {
		t.Fatalf("script counted %d units in %dµs, bound %d", counted, elapsed, bound)
	}
	var leases int64
	for _, p := range pods {
		leases += p.Stats().Leases
	}
	if leases == 0 {
		t.Fatal("no lease was taken")
	}
}

// Many goroutines take from one key's leases at once, with the clock
// still (nothing expires) and a store that admits only the burst: the
// callers are admitted exactly the units the store counted less those
// still held, never more, and the Limiter counts every decision it served.
func TestConcurrentTakersNeverOverServe(t *testing.T) {
	_, store, cfg := setup(t, 100, 100)
	l := gcra.Limit{T: 1_000_000_000, Burst: 10_000} // nothing refills during the test
	p := newLimiter(t, store, cfg)
	var admitted, allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 2))
			for range 4000 {
				cost := 1 + r.Int64N(3)
				d, err := p.Decide(context.Background(), []gcra.Request{{Key: "hot", Limit: l, Cost: cost}})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(cost)
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	s := p.Stats()
	counted := store.units.Load()
	if counted > l.Burst {
		t.Fatalf("store counted %d units, more than the burst %d", counted, l.Burst)
	}
	if got, want := admitted.Load(), counted-s.Held; got != want {
		t.Fatalf("callers admitted %d units; store counted %d, %d held: want %d (stats %+v)", got, counted, s.Held, want, s)
	}
	if s.Stranded != 0 {
		t.Fatalf("stranded %d with a still clock", s.Stranded)
	}
	if got := s.Served + s.Fallbacks - s.Denied; got != allowed.Load() {
		t.Fatalf("served %d + fallbacks %d − denied %d = %d decisions, callers saw %d allowed", s.Served, s.Fallbacks, s.Denied, got, allowed.Load())
	}
	if s.Leases < 50 || s.Denied == 0 {
		t.Fatalf("stats %+v: want the burst spent through many leases, then denials", s)
	}
}

// With Run advancing the coarse clock every Tick, a lease is served until
// its TTL, never after TTL + Tick, and, when Run keeps up (synctest.Wait
// lets it), not after the TTL. Time is synctest's: the store's and the
// Limiter's clocks are the bubble's. Run starts at s, ticks at s + k·Tick
// and sweeps at s + k·TTL; leases are taken at s + Tick and s + TTL + Tick,
// so that no sweep, only the decisions' own expiry checks, ends them.
func TestCoarseClockExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, err := memstore.New(memstore.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		store := &counting{Store: ms}
		cfg := lease.DefaultConfig()
		cfg.Tick = 10 * time.Millisecond
		p := newLimiter(t, store, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- p.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()
		req := []gcra.Request{{Key: "k", Limit: gcra.Limit{T: 1000, Burst: 100}, Cost: 1}}
		decide := func(step string, wantLeases, wantStranded int64) {
			t.Helper()
			d, err := p.Decide(context.Background(), req)
			if err != nil || !d.Allowed {
				t.Fatalf("%s: Decide = %+v, %v", step, d, err)
			}
			if s := p.Stats(); s.Leases != wantLeases || s.Stranded != wantStranded {
				t.Fatalf("%s: stats %+v, want %d leases, %d stranded", step, s, wantLeases, wantStranded)
			}
		}
		wait := func(d time.Duration) {
			<-time.After(d)
		}

		wait(cfg.Tick)
		synctest.Wait()
		decide("first, at s + Tick", 1, 0)
		wait(cfg.TTL - time.Nanosecond)
		synctest.Wait()
		decide("just before the TTL", 1, 0) // never early
		wait(time.Nanosecond)
		synctest.Wait()
		decide("at the TTL, Run on time", 2, 8)

		// Without letting Run catch up: the decision at TTL + Tick may run
		// before Run handles that instant's tick, but the tick before it
		// already reached the TTL.
		wait(cfg.TTL + cfg.Tick)
		decide("at TTL + Tick, Run possibly one tick behind", 3, 17)
		if counted := store.units.Load(); counted != 30 {
			t.Fatalf("store counted %d, want three leases' 30", counted)
		}
	})
}

// One Limiter leases each call's own size: a lease takes exactly that many
// units from the store; keys whose burst is below max(MinBurst, size) and
// costs above the size pass through; a key whose size changes keeps the
// units it holds and its next lease takes the new size; sizes outside 1 to
// MaxSize are refused before the store is asked.
func TestDecideSized(t *testing.T) {
	_, store, cfg := setup(t, 10, 40)
	p := newLimiter(t, store, cfg)
	ctx := context.Background()
	big := gcra.Limit{T: 1000, Burst: 1000}
	steps := []struct {
		name          string
		key           string
		limit         gcra.Limit
		cost, size    int64
		wantRemaining int64
		wantCounted   int64 // the store's running total
		wantLeases    int64
		wantPass      int64
	}{
		{"first of a lease of 100", "a", big, 1, 100, 99, 100, 1, 0},
		{"served from it", "a", big, 5, 100, 94, 100, 1, 0},
		{"another key, a lease of 3 (burst ≥ MinBurst)", "b", big, 2, 3, 1, 103, 2, 0},
		{"served, then spent", "b", big, 1, 3, 0, 103, 2, 0},
		{"spent: a new lease of 3", "b", big, 3, 3, 0, 106, 3, 0},
		{"a's size grows to 200: its 94 units serve first", "a", big, 50, 200, 44, 106, 3, 0},
		{"fewer than the cost left: a lease of 200, the 44 kept", "a", big, 60, 200, 184, 306, 4, 0},
		{"burst below the size: passes through", "c", gcra.Limit{T: 1000, Burst: 150}, 1, 200, 149, 307, 4, 1},
		{"burst below MinBurst: passes through", "d", gcra.Limit{T: 1000, Burst: 39}, 1, 5, 38, 308, 4, 2},
		{"cost above the size: passes through", "e", big, 6, 5, 994, 314, 4, 3},
	}
	for _, st := range steps {
		d, err := p.DecideSized(ctx, gcra.Request{Key: st.key, Limit: st.limit, Cost: st.cost}, st.size)
		if err != nil || !d.Allowed || d.Remaining != st.wantRemaining {
			t.Fatalf("%s: DecideSized(%s, cost %d, size %d) = %+v, %v; want allowed with %d remaining",
				st.name, st.key, st.cost, st.size, d, err, st.wantRemaining)
		}
		s := p.Stats()
		if got := store.units.Load(); got != st.wantCounted || s.Leases != st.wantLeases || s.Passthrough != st.wantPass {
			t.Fatalf("%s: store counted %d, stats %+v; want %d counted, %d leases, %d pass-throughs",
				st.name, got, s, st.wantCounted, st.wantLeases, st.wantPass)
		}
	}
	// Every unit the store counted for leases is served or held.
	s := p.Stats()
	if s.LeasedUnits != 306 || s.ServedUnits != 1+5+2+1+3+50+60 || s.Held != 184 || s.Stranded != 0 {
		t.Fatalf("stats %+v, want 306 leased = 122 served + 184 held", s)
	}
	for _, size := range []int64{0, -1, lease.MaxSize + 1} {
		if _, err := p.DecideSized(ctx, gcra.Request{Key: "a", Limit: big, Cost: 1}, size); !errors.Is(err, lease.ErrSize) {
			t.Errorf("DecideSized(size %d) = %v, want lease.ErrSize", size, err)
		}
	}
	if got := store.units.Load(); got != 314 {
		t.Fatalf("refused sizes reached the store: it counted %d, want 314", got)
	}
	// DecideOne is DecideSized with Config.Size.
	if d, err := p.DecideOne(ctx, gcra.Request{Key: "f", Limit: big, Cost: 1}); err != nil || d.Remaining != cfg.Size-1 {
		t.Fatalf("DecideOne = %+v, %v; want a lease of Size %d", d, err, cfg.Size)
	}
}
