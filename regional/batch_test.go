package regional

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/internal/wait"
)

// countingStore counts the round trips made to a memstore.
// countingStore counts the round trips made to a memstore, and fails them
// while down is set.
type countingStore struct {
	*memstore.Store
	decides, manys, manyElems atomic.Int64
	down                      atomic.Bool
	// stall, when set, makes a Decide whose first key contains it wait
	// for its context to end: a Redis that stopped answering.
	stall atomic.Pointer[string]
}

var errDown = errors.New("store down (test)")

func (c *countingStore) Decide(ctx context.Context, reqs []gcra.Request) (gcra.Decision, error) {
	c.decides.Add(1)
	if c.down.Load() {
		return gcra.Decision{}, errDown
	}
	if st := c.stall.Load(); st != nil && len(reqs) > 0 && strings.Contains(reqs[0].Key, *st) {
		<-ctx.Done()
		return gcra.Decision{}, ctx.Err()
	}
	return c.Store.Decide(ctx, reqs)
}

func (c *countingStore) DecideMany(ctx context.Context, batch [][]gcra.Request) []gcra.Answer {
	c.manys.Add(1)
	c.manyElems.Add(int64(len(batch)))
	if c.down.Load() {
		out := make([]gcra.Answer, len(batch))
		for i := range out {
			out[i].Err = errDown
		}
		return out
	}
	return c.Store.DecideMany(ctx, batch)
}

func countingPod(t *testing.T) (*pod, *fakeClock, *countingStore) {
	t.Helper()
	return countingPodWith(t, func(c *Config) { c.StoreTimeout = 5 * time.Second })
}

func countingPodWith(t *testing.T, adjust func(*Config)) (*pod, *fakeClock, *countingStore) {
	t.Helper()
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	mcfg := memstore.DefaultConfig()
	mcfg.Clock = clock.Now
	ms, err := memstore.New(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: ms}
	return startPod(t, cs, adjust), clock, cs
}

// randomRequests draws a mix the test policy treats every way: budget
// tenants, tenant+user composites with a shadow limit, the fail-closed login
// route, and bad requests (no tenant, cost 0, a cost above every burst).
func randomRequests(r *rand.Rand, n int) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		d := map[string]string{"tenant": fmt.Sprintf("t%d", r.IntN(4))}
		switch r.IntN(6) {
		case 0:
			d["user"] = fmt.Sprintf("u%d", r.IntN(3))
		case 1:
			d["route"] = "/login"
		case 2:
			delete(d, "tenant")
			d["user"] = "nobody"
		}
		cost := int64(1 + r.IntN(2))
		switch r.IntN(12) {
		case 0:
			cost = 0
		case 1:
			cost = 9
		}
		reqs[i] = Request{Descriptors: d, Cost: cost}
	}
	return reqs
}

// TestDecideManyMatchesDecide: a batch is decided exactly as the same
// requests decided one by one, in order (two pods on identical stores and
// clocks, random batches, time moving between them), and a batch's plain
// requests share round trips.
func TestDecideManyMatchesDecide(t *testing.T) {
	batched, bclock, bstore := countingPod(t)
	single, sclock, _ := countingPod(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 8))
	for round := range 40 {
		reqs := randomRequests(r, 1+r.IntN(24))
		before := bstore.manys.Load() + bstore.decides.Load()
		got := batched.s.DecideMany(ctx, reqs)
		trips := bstore.manys.Load() + bstore.decides.Load() - before
		alone := 0
		for i, q := range reqs {
			want, werr := single.s.Decide(ctx, q.Descriptors, q.Cost)
			if (werr == nil) != (got[i].Err == nil) || (werr != nil && werr.Error() != got[i].Err.Error()) {
				t.Fatalf("round %d request %d %v: DecideMany error %v, Decide error %v", round, i, q, got[i].Err, werr)
			}
			if got[i].Decision != want {
				t.Fatalf("round %d request %d %v:\nDecideMany %+v\nDecide     %+v", round, i, q, got[i].Decision, want)
			}
			if _, ok := q.Descriptors["user"]; ok && werr == nil {
				alone++ // a shadow limit matches: decided on its own
			}
		}
		// Each request with a shadow limit is a round trip of its own and
		// may split the batch once (its tenant's earlier requests go first).
		if limit := int64(1 + 2*alone); trips > limit {
			t.Errorf("round %d: %d store round trips for %d requests (%d with shadow limits), want at most %d", round, trips, len(reqs), alone, limit)
		}
		step := time.Duration(r.IntN(400)) * time.Millisecond
		bclock.Add(step)
		sclock.Add(step)
	}
	if bstore.manyElems.Load() == 0 {
		t.Fatal("no batch reached the store as one DecideMany")
	}
}

// TestDecideManyStoreDown: when the store fails, every request of the
// batch is decided by its limits' on_failure (fail-open budget at the
// fallback rate, fail-closed login denied), each counted. The fallback's
// buckets start empty (the store may have spent the burst just before it
// failed): the open tenants are admitted at 2/s from the first decision,
// none at once.
func TestDecideManyStoreDown(t *testing.T) {
	p, _, cs := countingPod(t)
	// The budget's fail-open share is the leader's: one pod, the whole
	// pinned 5/s burst 3, lowered to the fallback_rate 2/s.
	waitShare(t, p, 1)
	cs.down.Store(true)
	reqs := []Request{
		{Descriptors: map[string]string{"tenant": "d1"}, Cost: 1},
		{Descriptors: map[string]string{"tenant": "d2"}, Cost: 1},
		{Descriptors: map[string]string{"tenant": "d3", "route": "/login"}, Cost: 1},
	}
	const interval = 500 * time.Millisecond // 2/s
	rates := []*rateCheck{newRateCheck(t, interval), newRateCheck(t, interval)}
	got := p.s.DecideMany(context.Background(), reqs)
	for i, want := range []struct{ allowed, closed bool }{{false, false}, {false, false}, {false, true}} {
		if got[i].Err != nil || !got[i].Decision.Fallback || got[i].Decision.Allowed != want.allowed || got[i].Decision.Closed != want.closed {
			t.Errorf("request %d with the store down = %+v, %v; want fallback, allowed %v, closed %v", i, got[i].Decision, got[i].Err, want.allowed, want.closed)
		}
	}
	for i := range rates {
		// Open, denied only by the empty bucket: the next unit comes at
		// the fallback rate.
		if d := got[i].Decision; d.Limit != "tenant" || d.RetryAfter <= 0 || d.RetryAfter > interval {
			t.Errorf("request %d: %+v; want a retry-after within the fallback's %v", i, d, interval)
		}
		rates[i].add(got[i].Decision.Allowed)
	}
	if n := cs.manys.Load(); n != 1 {
		t.Errorf("%d DecideMany calls for one batch, want 1", n)
	}
	// Then both open tenants are admitted, at the rate.
	wait.Until(t, 10*time.Second, func() error {
		got := p.s.DecideMany(context.Background(), reqs)
		for i := range rates {
			rates[i].add(got[i].Decision.Allowed)
		}
		if got[2].Decision.Allowed || !got[2].Decision.Closed {
			t.Fatalf("login with the store down = %+v; want denied, closed", got[2].Decision)
		}
		for i, r := range rates {
			if r.admitted == 0 {
				return fmt.Errorf("tenant d%d not admitted yet", i+1)
			}
		}
		return nil
	})
	var counted float64
	for _, reason := range []string{"error", "breaker_open"} {
		counted += testutil.ToFloat64(p.s.m.fallback.WithLabelValues("tenant", "us-east", reason))
	}
	if want := rates[0].decisions + rates[1].decisions; counted != float64(want) {
		t.Errorf("fallback decisions counted for tenant = %v, want %d", counted, want)
	}
}
