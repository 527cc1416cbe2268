package lease_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/lease"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
)

// Reserve holds what it admits until Commit or Cancel: a cancelled unit is
// back in the lease (the store is not asked again), a committed one counts
// as served in the class, units reserved past their lease's end are
// stranded when cancelled, and a fallback unit the store admitted becomes
// a lease of the key when cancelled, served to the next decision without a
// store call. The class counts leased = served + stranded + held.
func TestReserve(t *testing.T) {
	clk, store, cfg := setup(t, 10, 40)
	p := newLimiter(t, store, cfg)
	ctx := context.Background()
	var c lease.Class
	big := gcra.Limit{T: 1000, Burst: 100}
	req := gcra.Request{Key: "a", Limit: big, Cost: 1}

	check := func(step string, wantCounted, wantHeld, wantStranded int64, want lease.ClassStats) {
		t.Helper()
		s := p.Stats()
		if got := store.units.Load(); got != wantCounted || s.Held != wantHeld || s.Stranded != wantStranded || c.Stats() != want {
			t.Fatalf("%s: store counted %d, stats %+v, class %+v; want %d counted, %d held, %d stranded, class %+v",
				step, got, s, c.Stats(), wantCounted, wantHeld, wantStranded, want)
		}
	}
	reserve := func(step string, req gcra.Request, wantRemaining int64) lease.Reservation {
		t.Helper()
		d, r, err := p.Reserve(ctx, req, 10, &c)
		if err != nil || !d.Allowed || d.Remaining != wantRemaining {
			t.Fatalf("%s: Reserve = %+v, %v; want allowed with %d remaining", step, d, err, wantRemaining)
		}
		return r
	}

	r := reserve("first: a lease of 10", req, 9)
	check("reserved", 10, 9, 0, lease.ClassStats{Leased: 10})
	r.Cancel(ctx)
	check("cancelled: back in the lease", 10, 10, 0, lease.ClassStats{Leased: 10})
	r.Cancel(ctx) // a no-op once cancelled
	r.Commit()
	check("cancelled twice, then committed: nothing more", 10, 10, 0, lease.ClassStats{Leased: 10})

	req.Cost = 3
	r = reserve("3 from the lease", req, 7)
	r.Commit()
	check("committed", 10, 7, 0, lease.ClassStats{Leased: 10, Served: 3})

	req.Cost = 2
	r = reserve("2 more", req, 5)
	clk.Add(cfg.TTL) // the lease ends while they are reserved
	r.Cancel(ctx)
	check("cancelled after the lease ended: stranded with the rest", 10, 0, 7, lease.ClassStats{Leased: 10, Served: 3, Stranded: 7})

	// The edge of the quota: a burst of 45 that does not refill.
	edge := gcra.Request{Key: "edge", Limit: gcra.Limit{T: 1_000_000_000, Burst: 45}, Cost: 1}
	for i := range 40 {
		r := reserve("edge, from four leases", edge, int64(9-i%10))
		r.Commit()
	}
	check("edge: four leases served", 50, 0, 7, lease.ClassStats{Leased: 50, Served: 43, Stranded: 7})
	r = reserve("edge: no full lease, the store admits one unit", edge, 4)
	if s := p.Stats(); s.FallbackUnits != 1 {
		t.Fatalf("stats %+v, want 1 fallback unit", s)
	}
	r.Cancel(ctx)
	check("edge: the cancelled fallback unit is a lease now", 51, 1, 7, lease.ClassStats{Leased: 51, Served: 43, Stranded: 7})
	if s := p.Stats(); s.FallbackUnits != 0 || s.LeasedUnits != 51 {
		t.Fatalf("stats %+v, want the unit moved from fallback to leased", s)
	}
	r = reserve("edge: served from it, no store call", edge, 0)
	r.Commit()
	check("edge: served", 51, 0, 7, lease.ClassStats{Leased: 51, Served: 44, Stranded: 7})
	if s := p.Stats(); s.ServedUnits != 44 || s.LeasedUnits-s.ServedUnits-s.Stranded-s.Held != 0 {
		t.Fatalf("stats %+v: want every leased unit served, stranded or held", s)
	}

	// A denial holds nothing.
	for i := range 4 {
		r := reserve("edge: the last fallback units", edge, int64(3-i))
		r.Commit()
	}
	d, r, err := p.Reserve(ctx, edge, 10, &c)
	if err != nil || d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("past the burst: Reserve = %+v, %v; want denied with a retry-after", d, err)
	}
	r.Cancel(ctx)
	check("denied and cancelled: nothing moves", 55, 0, 7, lease.ClassStats{Leased: 51, Served: 44, Stranded: 7})

	// Requests that are not leased, and bad sizes, are refused before the store is asked.
	small := gcra.Request{Key: "small", Limit: gcra.Limit{T: 1000, Burst: 39}, Cost: 1}
	for _, tc := range []struct {
		req  gcra.Request
		size int64
		want error
	}{
		{small, 10, lease.ErrNotLeased},
		{gcra.Request{Key: "a", Limit: big, Cost: 11}, 10, lease.ErrNotLeased},
		{req, 0, lease.ErrSize},
		{req, lease.MaxSize + 1, lease.ErrSize},
	} {
		if _, _, err := p.Reserve(ctx, tc.req, tc.size, &c); !errors.Is(err, tc.want) {
			t.Errorf("Reserve(%+v, size %d) = %v, want %v", tc.req, tc.size, err, tc.want)
		}
		if got := p.Leases(tc.req, tc.size); got {
			t.Errorf("Leases(%+v, %d) = true, want false", tc.req, tc.size)
		}
	}
	if !p.Leases(req, 10) {
		t.Error("Leases(a leased request) = false")
	}
	if got := store.units.Load(); got != 55 {
		t.Fatalf("refused requests reached the store: it counted %d, want 55", got)
	}
}

// A key swept while its last units are reserved: Cancel gives them to the
// key's new entry, with their lease's end, and they are served from it.
func TestCancelAfterSweep(t *testing.T) {
	_, store, cfg := setup(t, 10, 40)
	p := newLimiter(t, store, cfg)
	ctx := context.Background()
	req := gcra.Request{Key: "k", Limit: gcra.Limit{T: 1000, Burst: 100}, Cost: 10}
	d, r, err := p.Reserve(ctx, req, 10, nil)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("Reserve = %+v, %v; want the whole lease", d, err)
	}
	if n := p.Sweep(); n != 1 {
		t.Fatalf("Sweep forgot %d keys, want the empty one", n)
	}
	r.Cancel(ctx)
	if s := p.Stats(); s.Held != 10 || s.Stranded != 0 {
		t.Fatalf("after Cancel: stats %+v, want the 10 units held again", s)
	}
	if d, err := p.DecideSized(ctx, req, 10); err != nil || !d.Allowed || store.units.Load() != 10 {
		t.Fatalf("DecideSized = %+v, %v, store counted %d; want served from the given-back units, no new lease", d, err, store.units.Load())
	}
}

// On real Redis: three pods, twelve goroutines reserving one key's units
// and committing or cancelling each at random, leases ending meanwhile.
// The committed units never exceed what the script counted, the gap is
// exactly what the pods strand or hold (a unit served twice, or one given
// back that was not taken, would break it), the classes count the same,
// and the script stays within B + elapsed/T (+1) on Redis's clock.
func TestReserveConcurrentOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	rs, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	store := &counting{Store: rs}
	cfg := lease.DefaultConfig()
	cfg.TTL = 30 * time.Millisecond
	cfg.Tick = 0
	pods := []*lease.Limiter{newLimiter(t, store, cfg), newLimiter(t, store, cfg), newLimiter(t, store, cfg)}
	classes := make([]lease.Class, len(pods))
	l := gcra.Limit{T: 2000, Burst: 50} // 500/s
	begin, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	var committed, cancelled atomic.Int64
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 3))
			p, cl := pods[g%3], &classes[g%3]
			for ctx.Err() == nil {
				cost := 1 + r.Int64N(3)
				d, res, err := p.Reserve(context.Background(), gcra.Request{Key: "allot:v1:{t}:shared", Limit: l, Cost: cost}, 10, cl)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					continue
				}
				if r.IntN(2) == 0 {
					res.Commit()
					committed.Add(cost)
				} else {
					res.Cancel(context.Background())
					cancelled.Add(cost)
				}
			}
		})
	}
	wg.Wait()
	end, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	counted := store.units.Load()
	var stranded, held, fallback int64
	var cs lease.ClassStats
	for i, p := range pods {
		s := p.Stats()
		stranded += s.Stranded
		held += s.Held
		fallback += s.FallbackUnits
		st := classes[i].Stats()
		if st.Leased != s.LeasedUnits || st.Stranded != s.Stranded || st.Leased-st.Served-st.Stranded != s.Held {
			t.Errorf("pod %d: class %+v, stats %+v: want leased, stranded and held to agree", i, st, s)
		}
		cs.Leased += st.Leased
		cs.Served += st.Served
		cs.Stranded += st.Stranded
	}
	t.Logf("committed %d, cancelled %d, script counted %d, stranded %d, held %d, class %+v", committed.Load(), cancelled.Load(), counted, stranded, held, cs)
	if committed.Load() > counted {
		t.Fatalf("committed %d units, the script counted %d", committed.Load(), counted)
	}
	if gap := counted - committed.Load(); gap != stranded+held {
		t.Fatalf("script counted %d, committed %d: gap %d, but stranded %d + held %d", counted, committed.Load(), gap, stranded, held)
	}
	if got := cs.Served + fallback; got != committed.Load() {
		t.Fatalf("classes served %d + fallback units %d = %d, callers committed %d", cs.Served, fallback, got, committed.Load())
	}
	if bound := l.Burst + end.Sub(begin).Microseconds()/l.T + 1; counted > bound {
		t.Fatalf("script counted %d units, bound %d", counted, bound)
	}
	if cancelled.Load() == 0 || cs.Stranded == 0 || cs.Leased == 0 {
		t.Fatalf("cancelled %d, class %+v: the test did not exercise cancels, leases and expiry", cancelled.Load(), cs)
	}
}
