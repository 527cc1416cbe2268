package redisstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/keys"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
)

// The settle script is the twin's SettleMicros, key by key, on real Redis at
// pinned instants: random states (missing, full, in use, over, stored under
// another limit), random reservations and actual costs.
func TestSettleLuaMatchesTwin(t *testing.T) {
	_, c, _ := startLab(t)
	script := redis.NewScript(pinned(t, gcra.SettleScript()))
	r := rand.New(rand.NewPCG(5, 6))
	const resKey = "allot:v1:{t}:#settle:x"
	for seq := 0; seq < 400; seq++ {
		n := 1 + r.IntN(3)
		now := int64(1_700_000_000_000_000) + r.Int64N(1e12)
		ks := make([]string, n)
		lims := make([]gcra.Limit, n)
		presets := make([]value, n)
		states := make([]gcra.State, n)
		reserved := int64(0)
		for i := range n {
			ks[i] = "allot:v1:{t}:l" + string(rune('a'+i))
			lims[i] = randLimit(r)
			if i == 0 {
				reserved = 1 + r.Int64N(lims[0].Burst)
			}
			if lims[i].Burst < reserved {
				lims[i].Burst = reserved
			}
			var plain bool
			states[i], plain = randState(r, now, lims[i])
			if plain && (states[i].T != lims[i].T || states[i].Burst != lims[i].Burst || states[i].TAT <= 0) {
				plain = false
			}
			presets[i] = encodeState(states[i], plain)
		}
		var actual int64
		switch r.IntN(4) {
		case 0:
			actual = reserved
		case 1:
			actual = r.Int64N(reserved + 1)
		case 2:
			actual = 0
		default:
			actual = reserved + r.Int64N(3*reserved+5)
		}
		ok := true
		for i := range n {
			ok = ok && lims[i].CheckActual(reserved, actual) == nil
		}
		if !ok {
			continue
		}
		args := []any{"res", actual}
		r0s := make([]int64, n)
		for i := range n {
			// Where the reservation left the key: far ahead (no cap),
			// near now, or in the past (time returned it all).
			switch r.IntN(3) {
			case 0:
				r0s[i] = now + 1e12
			case 1:
				r0s[i] = now + r.Int64N(lims[i].Burst*lims[i].T+1)
			default:
				r0s[i] = now - r.Int64N(1e6)
			}
			args = append(args, lims[i].T, lims[i].Burst, reserved, r0s[i])
		}
		ret, after, resLeft := runPinned(t, c, script, now, ks, presets, resKey, args)
		if ret != 1 || resLeft {
			t.Fatalf("seq %d: script returned %d, reservation left %v; want 1 and deleted", seq, ret, resLeft)
		}
		for i := range n {
			ns, write := gcra.SettleMicros(states[i], now, lims[i], reserved, actual, r0s[i])
			want := afterTwin(presets[i], ns, write, now)
			if got := after[i]; !sameValue(got, want) {
				t.Fatalf("seq %d key %d: state %+v (stored %v) limit %+v reserved %d actual %d at %d:\n script %v\n twin   %v",
					seq, i, states[i], presets[i], lims[i], reserved, actual, now, got, want)
			}
		}
	}
}

// Reserve, then settle, through the Store on real Redis: a refund gives back
// exactly what was unused, never above full; a debt delays the next request
// by exactly debt·T; a second settle, an unknown or expired reservation,
// and a bad actual are refused with nothing changed.
func TestReserveSettle(t *testing.T) {
	c := redistest.Start(t).Client(t)
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lim := gcra.Limit{T: 10_000, Burst: 100} // 100/s, burst 100
	key, _ := keys.Key("t1", "tokens")
	res, _ := keys.SettleKey("t1", "r1")
	tat := func() int64 {
		v, err := c.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		a, _, _ := strings.Cut(v, ":")
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			t.Fatalf("key holds %q", v)
		}
		return n
	}
	reserve := func(id string, cost int64) string {
		t.Helper()
		rk, _ := keys.SettleKey("t1", id)
		d, err := s.DecideReserve(ctx, gcra.Reservation{Key: rk, Reqs: []gcra.Request{{Key: key, Limit: lim, Cost: cost}}}, time.Minute)
		if err != nil || !d.Allowed {
			t.Fatalf("decide and reserve %d: %+v %v", cost, d, err)
		}
		return rk
	}

	// 80 reserved, 30 used: 50 refunded, exactly 50·T.
	rk := reserve("r1", 80)
	before := tat()
	got, err := s.Settle(ctx, rk, 30)
	if err != nil || got.Reserved != 80 || got.Actual != 30 {
		t.Fatalf("settle: %+v %v", got, err)
	}
	if after := tat(); before-after != 50*lim.T {
		t.Fatalf("refund moved the TAT by %d µs, want %d (50 units)", before-after, 50*lim.T)
	}
	// A second settle, an unknown one, a bad actual: refused, nothing changes.
	mark := tat()
	for _, c := range []struct {
		key    string
		actual int64
		want   error
	}{
		{rk, 0, gcra.ErrNoReservation},
		{res + "nope", 10, gcra.ErrNoReservation},
	} {
		if _, err := s.Settle(ctx, c.key, c.actual); !errors.Is(err, c.want) {
			t.Errorf("settle %s %d: %v, want %v", c.key, c.actual, err, c.want)
		}
	}
	if tat() != mark {
		t.Fatal("a refused settle changed the key")
	}
	rk2 := reserve("r2", 5)
	mark = tat()
	if _, err := s.Settle(ctx, rk2, -1); !errors.Is(err, gcra.ErrActual) {
		t.Errorf("negative actual: %v, want ErrActual", err)
	}
	if _, err := s.Settle(ctx, rk2, 1<<50); !errors.Is(err, gcra.ErrActual) {
		t.Errorf("an actual whose debt no key can hold: %v, want ErrActual", err)
	}
	if tat() != mark {
		t.Fatal("a refused settle changed the key")
	}
	// Never above full: reserve 5 of a rested key, refund 5 after it
	// refilled: the key stays full (no key, or TAT ≤ now), not 5 over.
	c.Del(ctx, key)
	rk3 := reserve("r3", 5)
	c.Set(ctx, key, "1:10000:100", time.Minute) // refilled long ago
	if _, err := s.Settle(ctx, rk3, 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Get(ctx, key).Result(); v != "1:10000:100" {
		t.Fatalf("a refund to a full key wrote %q, want it untouched", v)
	}
	// A reservation time has returned (its record says the decision left
	// the key long ago) refunds nothing, though the key is in use again.
	c.Del(ctx, key)
	rk7 := reserve("r7", 60)
	raw, _ := c.Get(ctx, rk7).Result()
	rec, _, _ := strings.Cut(raw, "|")
	c.Set(ctx, rk7, rec+"|1", time.Minute)
	mark = tat()
	if _, err := s.Settle(ctx, rk7, 0); err != nil {
		t.Fatal(err)
	}
	if tat() != mark {
		t.Fatalf("a refund of a reservation time had returned moved the TAT from %d to %d", mark, tat())
	}
	// Debt: a burst spent, then 50 units more than reserved: the next
	// request waits 50·T longer than it would.
	c.Del(ctx, key)
	rk4 := reserve("r4", 100)
	callsFrom := time.Now()
	d, _ := s.Decide(ctx, []gcra.Request{{Key: key, Limit: lim, Cost: 1}})
	base := d.RetryAfter
	if _, err := s.Settle(ctx, rk4, 150); err != nil {
		t.Fatal(err)
	}
	d, _ = s.Decide(ctx, []gcra.Request{{Key: key, Limit: lim, Cost: 1}})
	// Redis's clock ran on between the two decisions, by at most the
	// real time the three calls took.
	elapsed := time.Since(callsFrom)
	if d.Allowed || d.RetryAfter < base+50*lim.Interval()-elapsed-time.Millisecond || d.RetryAfter > base+50*lim.Interval() {
		t.Fatalf("after 50 units of debt: %+v, want a wait of %v + 50·T = %v, less the %v the calls took", d, base, base+50*lim.Interval(), elapsed)
	}
	// Racing settles of one reservation: exactly one wins.
	c.Del(ctx, key)
	rk5 := reserve("r5", 50)
	var wg sync.WaitGroup
	wins := make(chan bool, 8)
	for range 8 {
		wg.Go(func() {
			_, err := s.Settle(ctx, rk5, 0)
			wins <- err == nil
		})
	}
	wg.Wait()
	close(wins)
	n := 0
	for w := range wins {
		if w {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d of 8 racing settles won, want 1", n)
	}
	// An expired reservation: gone.
	rk6, _ := keys.SettleKey("t1", "r6")
	if d, err := s.DecideReserve(ctx, gcra.Reservation{Key: rk6, Reqs: []gcra.Request{{Key: key, Limit: lim, Cost: 1}}}, time.Millisecond); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	wait.Until(t, time.Second, func() error {
		if c.Exists(ctx, rk6).Val() != 0 {
			return errors.New("reservation not expired yet")
		}
		return nil
	})
	if _, err := s.Settle(ctx, rk6, 0); !errors.Is(err, gcra.ErrNoReservation) {
		t.Fatalf("expired reservation: %v, want ErrNoReservation", err)
	}
}

// The charge script is ChargeMicros on every key, on real Redis at pinned
// instants, costs above the burst included.
func TestChargeLuaMatchesTwin(t *testing.T) {
	_, c, _ := startLab(t)
	script := redis.NewScript(pinned(t, gcra.ChargeScript()))
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 8))
	for seq := 0; seq < 300; seq++ {
		n := 1 + r.IntN(3)
		now := int64(1_700_000_000_000_000) + r.Int64N(1e12)
		ks := make([]string, n)
		reqs := make([]gcra.Request, n)
		states := make([]gcra.State, n)
		presets := make([]value, n)
		args := []any{}
		for i := range n {
			ks[i] = "allot:v1:{t}:c" + string(rune('a'+i))
			l := randLimit(r)
			cost := 1 + r.Int64N(3*l.Burst)
			reqs[i] = gcra.Request{Key: ks[i], Limit: l, Cost: cost}
			states[i], _ = randState(r, now, l)
			presets[i] = encodeState(states[i], false)
			args = append(args, l.T, l.Burst, cost)
		}
		if gcra.ValidateCharges(reqs) != nil {
			continue
		}
		ret, after, _ := runPinned(t, c, script, now, ks, presets, "", args)
		if ret != 1 {
			t.Fatalf("seq %d: script returned %d, want 1", seq, ret)
		}
		for i := range n {
			ns, write := gcra.ChargeMicros(states[i], now, reqs[i].Limit, reqs[i].Cost)
			want := afterTwin(presets[i], ns, write, now)
			if got := after[i]; !sameValue(got, want) {
				t.Fatalf("seq %d key %d: state %+v limit %+v cost %d:\n script %v\n twin   %v", seq, i, states[i], reqs[i].Limit, reqs[i].Cost, got, want)
			}
		}
	}
	// Through the Store: a charge above the burst is taken; a bad one is
	// refused before Redis.
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	l := gcra.Limit{T: 1000, Burst: 10}
	start := time.Now()
	if err := s.Charge(ctx, []gcra.Request{{Key: "allot:v1:{u}:x", Limit: l, Cost: 25}}); err != nil {
		t.Fatal(err)
	}
	// 25 units on a burst of 10 at 1 ms each: the next unit fits 16 ms
	// after the charge, less the time (Redis's clock) since.
	d, _ := s.Decide(ctx, []gcra.Request{{Key: "allot:v1:{u}:x", Limit: l, Cost: 1}})
	if least := 16*time.Millisecond - time.Since(start) - time.Millisecond; d.Allowed || d.RetryAfter < least || d.RetryAfter > 16*time.Millisecond {
		t.Fatalf("after a charge of 25 on burst 10: %+v, want denied for 16 ms less the time since the charge (at least %v)", d, least)
	}
	// Debt piles up to a window at most: the key stays a GCRA state.
	big := gcra.Limit{T: 1_000_000, Burst: 10}
	for range 5 {
		if err := s.Charge(ctx, []gcra.Request{{Key: "allot:v1:{u}:big", Limit: big, Cost: (1 << 51) / big.T}}); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := s.Decide(ctx, []gcra.Request{{Key: "allot:v1:{u}:big", Limit: big, Cost: 1}}); err != nil || d.Allowed {
		t.Fatalf("after five window-long charges: %+v %v, want a denial (not an error)", d, err)
	}
	for _, bad := range [][]gcra.Request{nil, {{Key: "", Limit: l, Cost: 1}}, {{Key: "k", Limit: l, Cost: 0}}, {{Key: "k", Limit: l, Cost: 1 << 50}}} {
		if err := s.Charge(ctx, bad); err == nil {
			t.Errorf("charge %+v accepted", bad)
		}
	}
}

// runPinned presets keys to presets (and res, when not "", to "res"), pins
// the clock at now and runs script over res (when set) and keys, reading
// every key back in the same transaction. It returns the script's integer
// reply, the keys after, and whether res is still there.
func runPinned(t *testing.T, c *redis.Client, script *redis.Script, now int64, keys []string, presets []value, res string, args []any) (int64, []value, bool) {
	t.Helper()
	ctx := context.Background()
	var eval *redis.Cmd
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	var left *redis.IntCmd
	all := keys
	if res != "" {
		all = append([]string{res}, keys...)
	}
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			if presets[i].present {
				p.Set(ctx, k, presets[i].s, 0)
			} else {
				p.Del(ctx, k)
			}
		}
		if res != "" {
			p.Set(ctx, res, "res", 0)
		}
		p.Set(ctx, nowKey, now, 0)
		eval = script.Eval(ctx, p, all, args...)
		for i, k := range keys {
			gets[i] = p.Get(ctx, k)
			ttls[i] = p.PTTL(ctx, k)
		}
		left = p.Exists(ctx, all[0])
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("%v (script: %v)", err, eval.Err())
	}
	after := make([]value, len(keys))
	for i := range keys {
		if s, gerr := gets[i].Result(); gerr == nil {
			after[i] = value{present: true, s: s, pttl: ttls[i].Val()}
		}
	}
	ret, _ := eval.Int64()
	return ret, after, res != "" && left.Val() != 0
}
