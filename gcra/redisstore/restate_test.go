package redisstore_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/redisstore"
)

// The restate script is RestateMicros on every key, on real Redis at
// pinned instants: keys under other limits, under their own, missing, and
// long rested.
func TestRestateLuaMatchesTwin(t *testing.T) {
	_, c, _ := startLab(t)
	script := redis.NewScript(pinned(t, gcra.RestateScript()))
	r := rand.New(rand.NewPCG(9, 10))
	written := 0
	for seq := 0; seq < 300; seq++ {
		n := 1 + r.IntN(3)
		now := int64(1_700_000_000_000_000) + r.Int64N(1e12)
		ks := make([]string, n)
		reqs := make([]gcra.Request, n)
		states := make([]gcra.State, n)
		presets := make([]value, n)
		args := []any{}
		for i := range n {
			ks[i] = "allot:v1:{t}:r" + string(rune('a'+i))
			l := randLimit(r)
			reqs[i] = gcra.Request{Key: ks[i], Limit: l}
			states[i], _ = randState(r, now, l)
			presets[i] = encodeState(states[i], false)
			args = append(args, l.T, l.Burst)
		}
		ret, after, _ := runPinned(t, c, script, now, ks, presets, "", args)
		want := 0
		for i := range n {
			ns, write := gcra.RestateMicros(states[i], now, reqs[i].Limit)
			if write {
				want++
			}
			if got, w := after[i], afterTwin(presets[i], ns, write, now); !sameValue(got, w) {
				t.Fatalf("seq %d key %d: state %+v limit %+v:\n script %v\n twin   %v", seq, i, states[i], reqs[i].Limit, got, w)
			}
		}
		if ret != int64(want) {
			t.Fatalf("seq %d: script says it wrote %d keys, the twin %d", seq, ret, want)
		}
		written += want
	}
	if written < 100 {
		t.Fatalf("only %d of the keys were under another limit: the test restated too few to say anything", written)
	}
	// Through the Store: a key spent under a slow limit, restated under a
	// fast one, refills at the fast one's rate from the restate on; a bad
	// request is refused before Redis.
	ctx := context.Background()
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	slow, fast := gcra.Limit{T: 10_000_000, Burst: 1}, gcra.Limit{T: 1000, Burst: 10}
	key := "allot:v1:{u}:restated"
	if d, err := s.Decide(ctx, []gcra.Request{{Key: key, Limit: slow, Cost: 1}}); err != nil || !d.Allowed {
		t.Fatalf("first decision: %+v %v", d, err)
	}
	if err := s.Restate(ctx, []gcra.Request{{Key: key, Limit: fast}, {Key: "allot:v1:{u}:missing", Limit: fast}}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "allot:v1:{u}:missing").Result(); err != nil || n != 0 {
		t.Fatalf("a missing key restated: exists %d %v, want it left missing", n, err)
	}
	v, err := c.Get(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if parts := strings.Split(v, ":"); len(parts) != 3 || parts[1] != strconv.FormatInt(fast.T, 10) || parts[2] != strconv.FormatInt(fast.Burst, 10) {
		t.Fatalf("after the restate the key holds %q, want a state under T=%d B=%d", v, fast.T, fast.Burst)
	}
	for _, bad := range [][]gcra.Request{nil, {{Key: "", Limit: fast}}, {{Key: "k", Limit: gcra.Limit{}}}, {{Key: "k", Limit: fast}, {Key: "k", Limit: fast}}} {
		if err := s.Restate(ctx, bad); err == nil {
			t.Errorf("restate %+v accepted", bad)
		}
	}
}
