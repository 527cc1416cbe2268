package redisstore_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/redisstore"
)

// The check script is CheckMicros, on real Redis at pinned instants: keys
// missing, rested, in use, under another limit, and charged past their
// burst; and it writes nothing.
func TestCheckLuaMatchesTwin(t *testing.T) {
	_, c, _ := startLab(t)
	lb := &lab{c: c, one: redis.NewScript(pinned(t, gcra.CheckScript()))}
	r := rand.New(rand.NewPCG(11, 12))
	denied := 0
	for seq := 0; seq < 400; seq++ {
		l := randLimit(r)
		now := int64(1_700_000_000_000_000) + r.Int64N(1e12)
		s, plain := randState(r, now, l)
		if r.IntN(3) == 0 {
			// In debt: charged past its burst by up to two bursts.
			s = gcra.State{TAT: now + l.Burst*l.T + 1 + r.Int64N(2*l.Burst*l.T), T: l.T, Burst: l.Burst}
			plain = false
		}
		if plain && (s.T != l.T || s.Burst != l.Burst || s.TAT <= 0) {
			plain = false
		}
		preset := encodeState(s, plain)
		want := gcra.CheckMicros(s, now, l)
		if !want.Allowed {
			denied++
		}
		reply, after, err := lb.run(t, now, []string{"k"}, []value{preset}, []any{l.T, l.Burst})
		if err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		if !slices.Equal(reply, expectReply(want)) || !sameValue(after[0], afterTwin(preset, gcra.State{}, false, now)) {
			t.Fatalf("seq %d: state %+v (stored %v) now %d limit %+v:\n script %v, key %v\n twin   %v, key unchanged", seq, s, preset, now, l, reply, after[0], expectReply(want))
		}
	}
	if denied < 50 {
		t.Fatalf("only %d of the checks were denied: the test checked too few keys past their limit", denied)
	}
	// Through the Store: a charge past the burst makes the check deny
	// until it is paid; a check changes nothing; bad input is refused
	// before Redis.
	ctx := context.Background()
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	l := gcra.Limit{T: 60_000_000, Burst: 5} // 5 a minute
	key := "allot:v1:{u}:checked"
	if res, err := s.Check(ctx, key, l); err != nil || !res.Allowed || res.Remaining != 5 {
		t.Fatalf("check of a missing key: %+v %v, want allowed with 5 left", res, err)
	}
	if err := s.Charge(ctx, []gcra.Request{{Key: key, Limit: l, Cost: 7}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		res, err := s.Check(ctx, key, l)
		if err != nil || res.Allowed || res.RetryAfter < 119_000_000_000-1 {
			t.Fatalf("check after charging 7 of 5 a minute: %+v %v, want denied for about 2 minutes (the 2 units past the burst)", res, err)
		}
	}
	if _, err := s.Check(ctx, "", l); err == nil {
		t.Error("a check of an empty key accepted")
	}
	if _, err := s.Check(ctx, key, gcra.Limit{}); err == nil {
		t.Error("a check under an invalid limit accepted")
	}
}
