package redisstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
)

// The seed's traced sequence, verbatim, on the Lua script: 5/s, burst 3.
func TestSeedTraceOnLua(t *testing.T) {
	_, _, lb := startLab(t)
	l, err := gcra.NewLimit(gcra.PerSecond(5), 3)
	if err != nil {
		t.Fatal(err)
	}
	const base = int64(1_700_000_000_000_000)
	steps := []struct {
		at    int64
		reply []int64 // allowed, retry µs, remaining, reset µs
	}{
		{0, []int64{1, 0, 2, 200_000}},
		{0, []int64{1, 0, 1, 400_000}},
		{0, []int64{1, 0, 0, 600_000}},
		{0, []int64{0, 200_000, 0, 600_000}},
		{0, []int64{0, 200_000, 0, 600_000}},
		{250_000, []int64{1, 0, 0, 550_000}},
		{250_000, []int64{0, 150_000, 0, 550_000}},
	}
	var v value
	for i, st := range steps {
		reply, after, err := lb.run(t, base+st.at, []string{"k"}, []value{v}, []any{l.T, l.Burst, 1})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !slices.Equal(reply, st.reply) {
			t.Errorf("step %d at %dµs: script = %v, want %v", i, st.at, reply, st.reply)
		}
		v = after[0]
		v.pttl = -1
	}
}

// Random limits spanning 1 µs to 100 s per unit, bursts 1 to 100,000: every
// intermediate value stays far below 2^53, where Lua's doubles and Go's
// int64 agree exactly.
func randLimit(r *rand.Rand) gcra.Limit {
	ts := []int64{1, 2, 3, 7, 999, 1000, 20_000, 200_000, 1_000_000, 3_600_000, 60_000_000}
	bs := []int64{1, 2, 3, 5, 20, 200, 1000}
	var l gcra.Limit
	if r.IntN(4) == 0 {
		l.T = 1 + r.Int64N(100_000_000)
	} else {
		l.T = ts[r.IntN(len(ts))]
	}
	if r.IntN(4) == 0 {
		l.Burst = 1 + r.Int64N(100_000)
	} else {
		l.Burst = bs[r.IntN(len(bs))]
	}
	return l
}

func randCost(r *rand.Rand, l gcra.Limit) int64 {
	if r.IntN(2) == 0 {
		return 1
	}
	return 1 + r.Int64N(l.Burst)
}

// randState returns a key state at now for a key limited by cur: missing,
// under cur (possibly stored in the seed's plain format), under another
// limit, or long rested.
func randState(r *rand.Rand, now int64, cur gcra.Limit) (gcra.State, bool) {
	switch r.IntN(6) {
	case 0:
		return gcra.State{}, false
	case 1, 2:
		tat := now + r.Int64N(cur.Burst*cur.T+1) - r.Int64N(2*cur.T+1)
		return gcra.State{TAT: tat, T: cur.T, Burst: cur.Burst}, r.IntN(2) == 0
	case 3, 4:
		old := randLimit(r)
		tat := now + r.Int64N(old.Burst*old.T+1) - r.Int64N(2*old.T+1)
		return gcra.State{TAT: tat, T: old.T, Burst: old.Burst}, false
	}
	return gcra.State{TAT: now - 1 - r.Int64N(1_000_000_000), T: cur.T, Burst: cur.Burst}, false
}

func randStep(r *rand.Rand, l gcra.Limit) int64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return r.Int64N(l.T + 1)
	case 2:
		return l.T
	case 3:
		return r.Int64N(2*l.Burst*l.T + 1)
	case 4:
		return -r.Int64N(l.T + 1) // the clock may step back (another Redis after failover)
	}
	return 1 + r.Int64N(10*l.T)
}

// I1, exact: the Lua script and the twin agree on every decision of random
// sequences (limits changing mid-sequence, clock jumping either way).
//
// Method: Redis TIME cannot be set, so the test runs the production script
// with its single clock statement ("local now = clock()") replaced by a read
// of a key the test sets (see pinned); every other line is the embedded
// source. Each step presets the key to the twin's state, pins now, runs the
// script and reads the key back in one MULTI/EXEC, then compares the reply,
// the stored bytes and the TTL with the twin at that same now. The clock
// statement itself is covered by TestLuaMatchesTwinOnRedisClock.
func TestLuaMatchesTwinPinned(t *testing.T) {
	_, _, lb := startLab(t)
	r := rand.New(rand.NewPCG(1, 2))
	for seq := 0; seq < 40; seq++ {
		l := randLimit(r)
		now := int64(1_700_000_000_000_000) + r.Int64N(1e12)
		s, plain := randState(r, now, l)
		for step := 0; step < 50; step++ {
			if r.IntN(5) == 0 {
				l = randLimit(r) // a changed grant
			}
			if r.IntN(10) == 0 {
				s, plain = randState(r, now, l)
			}
			if plain && (s.T != l.T || s.Burst != l.Burst || s.TAT <= 0) {
				plain = false
			}
			cost := randCost(r, l)
			preset := encodeState(s, plain)
			ns, res, write := gcra.DecideMicros(s, now, l, cost)
			reply, after, err := lb.run(t, now, []string{"k"}, []value{preset}, []any{l.T, l.Burst, cost})
			if err != nil {
				t.Fatalf("seq %d step %d: %v", seq, step, err)
			}
			want := afterTwin(preset, ns, write, now)
			if !slices.Equal(reply, expectReply(res)) || !sameValue(after[0], want) {
				t.Fatalf("seq %d step %d: state %+v (stored %v) now %d limit %+v cost %d:\n script %v, key %v\n twin   %v, key %v",
					seq, step, s, preset, now, l, cost, reply, after[0], expectReply(res), want)
			}
			s, plain = ns, false
			now += randStep(r, l)
		}
	}
}

// I1 for the composite script, with the same method.
func TestCompositeLuaMatchesTwinPinned(t *testing.T) {
	_, _, lb := startLab(t)
	r := rand.New(rand.NewPCG(3, 4))
	for seq := 0; seq < 30; seq++ {
		n := 2 + r.IntN(3)
		keys := make([]string, n)
		items := make([]gcra.Item, n)
		now := int64(1_700_000_000_000_000) + r.Int64N(1e12)
		for i := range items {
			keys[i] = "c" + string(rune('a'+i))
			items[i].Limit = randLimit(r)
			items[i].State, _ = randState(r, now, items[i].Limit)
		}
		for step := 0; step < 30; step++ {
			presets := make([]value, n)
			var args []any
			for i := range items {
				if r.IntN(6) == 0 {
					items[i].Limit = randLimit(r)
				}
				items[i].Cost = randCost(r, items[i].Limit)
				presets[i] = encodeState(items[i].State, false)
				args = append(args, items[i].Limit.T, items[i].Limit.Burst, items[i].Cost)
			}
			out := gcra.DecideAllMicros(items, now)
			reply, after, err := lb.run(t, now, keys, presets, args)
			if err != nil {
				t.Fatalf("seq %d step %d: %v", seq, step, err)
			}
			want := append(expectReply(out.Result), int64(out.Limiting+1))
			bad := !slices.Equal(reply, want)
			for i := range items {
				if !sameValue(after[i], afterTwin(presets[i], out.States[i], out.Write[i], now)) {
					bad = true
				}
			}
			if bad {
				t.Fatalf("seq %d step %d: items %+v now %d:\n script %v keys %v\n twin   %v states %+v write %v",
					seq, step, items, now, reply, after, want, out.States, out.Write)
			}
			for i := range items {
				if out.Write[i] {
					items[i].State = out.States[i]
				}
			}
			now += randStep(r, items[r.IntN(n)].Limit)
		}
	}
}

// I1 with the production scripts untouched, on Redis's own clock. The test
// brackets the script between two TIME calls in the same MULTI/EXEC, so the
// script's now lies in [t0, t1] (a few µs wide), and requires that the twin
// at some instant of that interval gives exactly the script's reply and
// stored key.
func TestLuaMatchesTwinOnRedisClock(t *testing.T) {
	_, c, _ := startLab(t)
	ctx := context.Background()
	one := redis.NewScript(gcra.SingleScript())
	all := redis.NewScript(gcra.CompositeScript())
	r := rand.New(rand.NewPCG(5, 6))
	for it := 0; it < 200; it++ {
		n := 1 + r.IntN(2)*(1+r.IntN(3))
		ref := redisNow(t, c)
		items := make([]gcra.Item, n)
		keys := make([]string, n)
		presets := make([]value, n)
		var args []any
		for i := range items {
			keys[i] = "r" + string(rune('a'+i))
			items[i].Limit = randLimit(r)
			items[i].State, _ = randState(r, ref, items[i].Limit)
			items[i].Cost = randCost(r, items[i].Limit)
			presets[i] = encodeState(items[i].State, false)
			args = append(args, items[i].Limit.T, items[i].Limit.Burst, items[i].Cost)
		}
		script := one
		if n > 1 {
			script = all
		}
		var t0, t1 *redis.TimeCmd
		var eval *redis.Cmd
		gets := make([]*redis.StringCmd, n)
		ttls := make([]*redis.DurationCmd, n)
		if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				if presets[i].present {
					p.Set(ctx, k, presets[i].s, 0)
				} else {
					p.Del(ctx, k)
				}
			}
			t0 = p.Time(ctx)
			eval = script.Eval(ctx, p, keys, args...)
			t1 = p.Time(ctx)
			for i, k := range keys {
				gets[i] = p.Get(ctx, k)
				ttls[i] = p.PTTL(ctx, k)
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		lo, hi := t0.Val().UnixMicro(), t1.Val().UnixMicro()
		if hi < lo || hi-lo > 1_000_000 {
			t.Fatalf("TIME bracket [%d, %d] is not a short interval", lo, hi)
		}
		raw, _ := eval.Val().([]any)
		reply := make([]int64, len(raw))
		for i, e := range raw {
			reply[i], _ = e.(int64)
		}
		after := make([]value, n)
		for i := range keys {
			if s, err := gets[i].Result(); err == nil {
				after[i] = value{present: true, s: s, pttl: ttls[i].Val()}
			}
		}
		matched := false
		for now := lo; now <= hi && !matched; now++ {
			out := gcra.DecideAllMicros(items, now)
			want := expectReply(out.Result)
			if n > 1 {
				want = append(want, int64(out.Limiting+1))
			}
			ok := slices.Equal(reply, want)
			for i := range items {
				ok = ok && sameValue(after[i], afterTwin(presets[i], out.States[i], out.Write[i], now))
			}
			matched = ok
		}
		if !matched {
			out := gcra.DecideAllMicros(items, lo)
			t.Fatalf("iteration %d: no now in [%d, %d] makes the twin agree: items %+v\n script %v keys %v\n twin at %d: %+v",
				it, lo, hi, items, reply, after, lo, out)
		}
	}
}

// Changing a live key's limit never mints units: at the instant of the
// change, the units a greedy caller gets under the new limit are at most
// what the old limit still had, and at most the new burst. Checked on the
// twin and on the Lua script at the same instants.
//
// The domain keeps x·T' below 2^52 (x the owed time that gcra.Convert
// computes): there the float steps of Convert round exactly like integer
// ceiling division.
func TestLimitChangeNeverMints(t *testing.T) {
	_, _, lb := startLab(t)
	r := rand.New(rand.NewPCG(7, 8))
	greedyTwin := func(s gcra.State, now int64, l gcra.Limit) int64 {
		var n int64
		for {
			ns, res, _ := gcra.DecideMicros(s, now, l, 1)
			if !res.Allowed {
				return n
			}
			s = ns
			n++
		}
	}
	small := func() gcra.Limit {
		return gcra.Limit{T: 1 + r.Int64N(2_000_000), Burst: 1 + r.Int64N(40)}
	}
	for it := 0; it < 150; it++ {
		old, nl := small(), small()
		now := int64(1_700_000_000_000_000) + r.Int64N(1e12)
		s := gcra.State{TAT: now - r.Int64N(2*old.T) + r.Int64N(old.Burst*old.T+1), T: old.T, Burst: old.Burst}
		before := greedyTwin(s, now, old)
		twinAfter := greedyTwin(s, now, nl)
		if twinAfter > before || twinAfter > nl.Burst {
			t.Fatalf("twin minted: state %+v now %d old %+v new %+v: %d units before, %d after", s, now, old, nl, before, twinAfter)
		}
		// The same change on Redis: preset the old state, then take units one
		// at a time at the same instant under the new limit.
		v := encodeState(s, false)
		var luaAfter int64
		for {
			reply, after, err := lb.run(t, now, []string{"m"}, []value{v}, []any{nl.T, nl.Burst, 1})
			if err != nil {
				t.Fatal(err)
			}
			v = after[0]
			v.pttl = -1
			if reply[0] == 0 {
				break
			}
			luaAfter++
			if luaAfter > nl.Burst {
				break
			}
		}
		if luaAfter != twinAfter {
			t.Fatalf("state %+v now %d old %+v new %+v: Lua admitted %d after the change, twin %d", s, now, old, nl, luaAfter, twinAfter)
		}
	}
}

// The scripts validate their arguments and name the bad one.
func TestLuaValidation(t *testing.T) {
	_, c, _ := startLab(t)
	ctx := context.Background()
	one := redis.NewScript(gcra.SingleScript())
	all := redis.NewScript(gcra.CompositeScript())
	cases := []struct {
		name   string
		script *redis.Script
		keys   []string
		args   []any
		want   string
	}{
		{"T zero", one, []string{"k"}, []any{0, 3, 1}, "ARGV[1] (T)"},
		{"T not a number", one, []string{"k"}, []any{"x", 3, 1}, "ARGV[1] (T)"},
		{"T fractional", one, []string{"k"}, []any{"1.5", 3, 1}, "ARGV[1] (T)"},
		{"T nan", one, []string{"k"}, []any{"nan", 3, 1}, "ARGV[1] (T)"},
		{"B zero", one, []string{"k"}, []any{1000, 0, 1}, "ARGV[2] (B)"},
		{"B missing", one, []string{"k"}, []any{1000}, "ARGV[2] (B)"},
		{"cost zero", one, []string{"k"}, []any{1000, 3, 0}, "ARGV[3] (cost)"},
		{"cost above burst", one, []string{"k"}, []any{1000, 3, 4}, "ARGV[3] (cost)"},
		{"window too long", one, []string{"k"}, []any{int64(1) << 40, 1 << 12, 1}, "(T*B)"},
		{"two keys to the single script", one, []string{"a", "b"}, []any{1, 1, 1}, "exactly 1 key"},
		{"composite arg count", all, []string{"a", "b"}, []any{1, 1, 1}, "3 ARGV"},
		{"composite second cost", all, []string{"a", "b"}, []any{1, 1, 1, 1000, 2, 3}, "ARGV[6] (cost)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.script.Eval(ctx, c, tc.keys, tc.args...).Err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("script(%v) error = %v, want one naming %q", tc.args, err, tc.want)
			}
		})
	}
	if err := c.Set(ctx, "junk", "not a tat", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := one.Eval(ctx, c, []string{"junk"}, 1000, 3, 1).Err()
	if err == nil || !strings.Contains(err.Error(), "does not hold a GCRA state") {
		t.Fatalf("script on a corrupt key = %v, want a refusal", err)
	}
}

// FuzzLuaTwin: the twin and the Lua script (pinned clock, as in
// TestLuaMatchesTwinPinned) agree on one single-key and one composite
// decision from any fuzzed state, instant, limits and costs.
func FuzzLuaTwin(f *testing.F) {
	f.Add(int64(0), uint32(200_000), uint16(3), uint16(1), uint32(200_000), uint16(3), false, uint32(1000), uint16(10), uint16(2))
	f.Add(int64(600_000), uint32(200_000), uint16(3), uint16(1), uint32(100_000), uint16(6), true, uint32(7), uint16(1), uint16(1))
	f.Add(int64(-5_000_000), uint32(1), uint16(65535), uint16(65535), uint32(99_999_999), uint16(1), false, uint32(1), uint16(1000), uint16(999))
	f.Add(int64(1<<40), uint32(3_600_000), uint16(10), uint16(10), uint32(1), uint16(65535), false, uint32(50), uint16(5), uint16(5))
	_, _, lb := startLab(f)
	f.Fuzz(func(t *testing.T, off int64, t1 uint32, b1, c1 uint16, t0 uint32, b0 uint16, plain bool, t2 uint32, b2, c2 uint16) {
		const now = int64(1_700_000_000_000_000)
		l1 := gcra.Limit{T: 1 + int64(t1)%100_000_000, Burst: 1 + int64(b1)}
		old := gcra.Limit{T: 1 + int64(t0)%100_000_000, Burst: 1 + int64(b0)}
		l2 := gcra.Limit{T: 1 + int64(t2)%100_000_000, Burst: 1 + int64(b2)}
		cost1 := 1 + int64(c1)%l1.Burst
		cost2 := 1 + int64(c2)%l2.Burst
		off %= 2 * old.Burst * old.T // a state the old limit could have written, or rested
		s := gcra.State{TAT: now + off, T: old.T, Burst: old.Burst}
		if plain {
			s.T, s.Burst = l1.T, l1.Burst
		}
		preset := encodeState(s, plain)

		ns, res, write := gcra.DecideMicros(s, now, l1, cost1)
		reply, after, err := lb.run(t, now, []string{"f1"}, []value{preset}, []any{l1.T, l1.Burst, cost1})
		if err != nil {
			t.Fatal(err)
		}
		if want := afterTwin(preset, ns, write, now); !slices.Equal(reply, expectReply(res)) || !sameValue(after[0], want) {
			t.Fatalf("single: state %+v limit %+v cost %d: script %v %v, twin %v %v", s, l1, cost1, reply, after[0], expectReply(res), want)
		}

		items := []gcra.Item{{State: s, Limit: l1, Cost: cost1}, {Limit: l2, Cost: cost2}}
		if plain {
			items[0].State = gcra.State{TAT: s.TAT, T: l1.T, Burst: l1.Burst}
		}
		items[1].State = gcra.State{TAT: now + off%(l2.Burst*l2.T+1), T: l2.T, Burst: l2.Burst}
		presets := []value{encodeState(items[0].State, false), encodeState(items[1].State, false)}
		out := gcra.DecideAllMicros(items, now)
		reply, after, err = lb.run(t, now, []string{"f1", "f2"}, presets,
			[]any{l1.T, l1.Burst, cost1, l2.T, l2.Burst, cost2})
		if err != nil {
			t.Fatal(err)
		}
		want := append(expectReply(out.Result), int64(out.Limiting+1))
		ok := slices.Equal(reply, want)
		for i := range items {
			ok = ok && sameValue(after[i], afterTwin(presets[i], out.States[i], out.Write[i], now))
		}
		if !ok {
			t.Fatalf("composite: items %+v: script %v %v, twin %v %+v", items, reply, after, want, out)
		}
	})
}

// Daily and weekly rates are exact against the twin on real Redis, from
// idle through a burst, a denial and the refill.
func TestLuaMatchesTwinDailyWeekly(t *testing.T) {
	_, _, lb := startLab(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		rate  gcra.Rate
		burst int64
	}{
		{gcra.PerDay(3), 2},
		{gcra.PerDay(5_000_000), 5_000_000},
		{gcra.PerWeek(7), 7},
		{gcra.PerWeek(1), 1},
	} {
		l, err := gcra.NewLimit(c.rate, c.burst)
		if err != nil {
			t.Fatalf("%v burst %d: %v", c.rate, c.burst, err)
		}
		if want := c.rate.Period.Microseconds() / c.rate.Count; l.T != want && l.T != want+1 {
			t.Fatalf("%v: T = %d µs, want %d", c.rate, l.T, want)
		}
		now := int64(1_700_000_000_000_000)
		var s gcra.State
		denied := false
		for step := 0; step < 60; step++ {
			cost := randCost(r, l)
			preset := encodeState(s, false)
			ns, res, write := gcra.DecideMicros(s, now, l, cost)
			reply, after, err := lb.run(t, now, []string{"k"}, []value{preset}, []any{l.T, l.Burst, cost})
			if err != nil {
				t.Fatalf("%v step %d: %v", c.rate, step, err)
			}
			if want := afterTwin(preset, ns, write, now); !slices.Equal(reply, expectReply(res)) || !sameValue(after[0], want) {
				t.Fatalf("%v step %d: now %d cost %d:\n script %v, key %v\n twin   %v, key %v", c.rate, step, now, cost, reply, after[0], expectReply(res), want)
			}
			if !res.Allowed {
				denied = true
				// The denial says when: one emission interval per unit
				// short, a day's share of a unit for N/d.
				if res.RetryAfter <= 0 || res.RetryAfter > time.Duration(cost*l.T)*time.Microsecond {
					t.Fatalf("%v step %d: denied cost %d with retry %v, want within %v", c.rate, step, cost, res.RetryAfter, time.Duration(cost*l.T)*time.Microsecond)
				}
			}
			s = ns
			now += r.Int64N(l.T) // under one unit's refill per step: the burst runs out
		}
		if !denied {
			t.Errorf("%v burst %d: never denied in 60 steps under its refill", c.rate, c.burst)
		}
	}
}
