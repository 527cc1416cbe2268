package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(tb testing.TB, c redis.UniversalClient) *redisstore.Store {
	tb.Helper()
	s, err := redisstore.New(c)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// redisNow reads the server's clock in µs.
func redisNow(tb testing.TB, c redis.Cmdable) int64 {
	tb.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return tm.UnixMicro()
}

// nowKey holds the instant a pinned script uses instead of TIME.
const nowKey = "allot-test:now"

// clockLine is the one statement of the scripts that reads the clock.
const clockLine = "local now = clock()"

// pinned returns src with its clock statement replaced by a read of nowKey,
// so a test can run the production script body at any instant it chooses.
// Everything but that one line is the embedded production source.
func pinned(tb testing.TB, src string) string {
	tb.Helper()
	if n := strings.Count(src, clockLine); n != 1 {
		tb.Fatalf("script has %d statements %q, want exactly 1", n, clockLine)
	}
	return strings.Replace(src, clockLine, "local now = tonumber(redis.call('GET', '"+nowKey+"'))", 1)
}

// lab runs the pinned scripts on a real Redis with preset key states.
type lab struct {
	c        *redis.Client
	one, all *redis.Script
}

func newLab(tb testing.TB, c *redis.Client) *lab {
	return &lab{
		c:   c,
		one: redis.NewScript(pinned(tb, gcra.SingleScript())),
		all: redis.NewScript(pinned(tb, gcra.CompositeScript())),
	}
}

// value is a stored key: its bytes and its remaining time to live (-1: no
// expiry), or absent.
type value struct {
	present bool
	s       string
	pttl    time.Duration
}

func (v value) String() string {
	if !v.present {
		return "<absent>"
	}
	return fmt.Sprintf("%q pttl %v", v.s, v.pttl)
}

// encodeState is how the scripts store s. A missing state is absent; plain
// writes the TAT alone (the seed's format, read under the current limit).
func encodeState(s gcra.State, plain bool) value {
	if !s.Exists() {
		return value{}
	}
	if plain {
		return value{present: true, s: strconv.FormatInt(s.TAT, 10), pttl: -1}
	}
	return value{present: true, s: fmt.Sprintf("%d:%d:%d", s.TAT, s.T, s.Burst), pttl: -1}
}

// run presets keys to vals, pins the clock at now and runs the pinned
// script (single for one key, composite for more) in one MULTI/EXEC, then
// reads every key back inside the same transaction, so no key can expire
// between the script and the read.
func (l *lab) run(tb testing.TB, now int64, keys []string, vals []value, args []any) ([]int64, []value, error) {
	tb.Helper()
	ctx := context.Background()
	script := l.one
	if len(keys) > 1 {
		script = l.all
	}
	var eval *redis.Cmd
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	_, err := l.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			if vals[i].present {
				p.Set(ctx, k, vals[i].s, 0)
			} else {
				p.Del(ctx, k)
			}
		}
		p.Set(ctx, nowKey, now, 0)
		eval = script.Eval(ctx, p, keys, args...)
		for i, k := range keys {
			gets[i] = p.Get(ctx, k)
			ttls[i] = p.PTTL(ctx, k)
		}
		return nil
	})
	if err != nil && eval.Err() != nil {
		return nil, nil, eval.Err()
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		tb.Fatalf("MULTI/EXEC: %v", err)
	}
	raw, ok := eval.Val().([]any)
	if !ok {
		tb.Fatalf("script reply %#v is not an array", eval.Val())
	}
	reply := make([]int64, len(raw))
	for i, e := range raw {
		n, ok := e.(int64)
		if !ok {
			tb.Fatalf("script reply %#v: element %d is not an integer", raw, i)
		}
		reply[i] = n
	}
	out := make([]value, len(keys))
	for i := range keys {
		s, gerr := gets[i].Result()
		if errors.Is(gerr, redis.Nil) {
			continue
		}
		if gerr != nil {
			tb.Fatal(gerr)
		}
		out[i] = value{present: true, s: s, pttl: ttls[i].Val()}
	}
	return reply, out, nil
}

// expectReply is the reply the scripts must give for r.
func expectReply(r gcra.Result) []int64 {
	a := int64(0)
	if r.Allowed {
		a = 1
	}
	return []int64{a, r.RetryAfter.Microseconds(), r.Remaining, r.ResetAfter.Microseconds()}
}

// sameValue compares a key read back after a script with what the twin says
// it must hold. A written key's PTTL must be the twin's Expiry (less at most
// the few milliseconds the transaction took); an untouched key keeps no TTL.
func sameValue(got, want value) bool {
	if got.present != want.present || got.s != want.s {
		return false
	}
	if !got.present {
		return true
	}
	if want.pttl < 0 {
		return got.pttl < 0
	}
	return got.pttl <= want.pttl && got.pttl >= want.pttl-50*time.Millisecond
}

// afterTwin is what a key holds after the twin decided: the new state with
// its expiry when written, the preset value otherwise.
func afterTwin(preset value, ns gcra.State, write bool, now int64) value {
	if !write {
		return preset
	}
	v := encodeState(ns, false)
	v.pttl = gcra.Expiry(ns, now)
	return v
}

func startLab(tb testing.TB) (*redistest.Server, *redis.Client, *lab) {
	srv := redistest.Start(tb)
	c := srv.Client(tb)
	return srv, c, newLab(tb, c)
}
