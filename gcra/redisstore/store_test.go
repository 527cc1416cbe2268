package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
)

func limit(tb testing.TB, rate gcra.Rate, burst int64) gcra.Limit {
	tb.Helper()
	l, err := gcra.NewLimit(rate, burst)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func TestNewRejectsClientWithoutContextDeadlines(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := redisstore.New(c); !errors.Is(err, redisstore.ErrContextTimeoutDisabled) {
		t.Fatalf("New(client without ContextTimeoutEnabled) = %v, want ErrContextTimeoutDisabled", err)
	}
	if _, err := redisstore.New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// Through the Store on Redis's clock: a burst of three at once, then a
// denial with the wait until the next unit. (The seed's exact trace, at
// pinned instants, is TestSeedTraceOnLua; this limit is slow so that a
// loaded machine cannot let a unit refill between the calls.)
func TestStoreBurstThenDeny(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Client(t))
	l := limit(t, gcra.PerMinute(5), 3) // T = 12 s
	ctx := context.Background()
	req := []gcra.Request{{Key: "burst", Limit: l, Cost: 1}}
	for i, want := range []int64{2, 1, 0} {
		d, err := st.Decide(ctx, req)
		if err != nil || !d.Allowed || d.Remaining != want {
			t.Fatalf("decision %d = %+v, %v; want allowed with %d remaining", i, d, err, want)
		}
	}
	d, err := st.Decide(ctx, req)
	if err != nil || d.Allowed {
		t.Fatalf("fourth decision = %+v, %v; want denied", d, err)
	}
	// Between the first and the fourth call Redis's clock moved on a little.
	if d.RetryAfter > 12*time.Second || d.RetryAfter < 11*time.Second || d.ResetAfter != 3*12*time.Second-(12*time.Second-d.RetryAfter) {
		t.Fatalf("fourth decision = %+v, want a retry-after just under 12s and a reset-after 24s beyond it", d)
	}
}

func TestStoreValidatesBeforeRedis(t *testing.T) {
	// No server at all: validation must answer before any I/O.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	st := newStore(t, c)
	l := gcra.Limit{T: 1000, Burst: 3}
	cases := []struct {
		name string
		reqs []gcra.Request
		want error
	}{
		{"none", nil, gcra.ErrNoRequests},
		{"empty key", []gcra.Request{{Key: "", Limit: l, Cost: 1}}, gcra.ErrKey},
		{"cost above burst", []gcra.Request{{Key: "k", Limit: l, Cost: 4}}, gcra.ErrCostExceedsBurst},
		{"zero cost", []gcra.Request{{Key: "k", Limit: l, Cost: 0}}, gcra.ErrCost},
		{"bad limit", []gcra.Request{{Key: "k", Limit: gcra.Limit{}, Cost: 1}}, gcra.ErrRateTooHigh},
		{"duplicate", []gcra.Request{{Key: "k", Limit: l, Cost: 1}, {Key: "k", Limit: l, Cost: 1}}, gcra.ErrDuplicateKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := st.Decide(context.Background(), tc.reqs); !errors.Is(err, tc.want) {
				t.Fatalf("Decide = %v, want %v", err, tc.want)
			}
			a := st.DecideMany(context.Background(), [][]gcra.Request{tc.reqs})
			if !errors.Is(a[0].Err, tc.want) {
				t.Fatalf("DecideMany = %v, want %v", a[0].Err, tc.want)
			}
		})
	}
}

// I2: many concurrent callers on one key against real Redis never get more
// than B + elapsed/T units (+1 for rounding), elapsed measured on Redis's
// clock around the whole run.
func TestConcurrentCallersBound(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st := newStore(t, c)
	l := limit(t, gcra.PerSecond(200), 20) // T = 5 ms
	const workers = 32
	const runFor = 2200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()
	start := redisNow(t, c)
	var admitted, calls atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 9))
			for ctx.Err() == nil {
				cost := 1 + r.Int64N(3)
				d, err := st.Decide(context.Background(), []gcra.Request{{Key: "hot", Limit: l, Cost: cost}})
				if err != nil {
					errs <- err
					return
				}
				calls.Add(1)
				if d.Allowed {
					admitted.Add(cost)
				}
			}
		}(uint64(w))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := redisNow(t, c) - start
	bound := l.Burst + elapsed/l.T + 1
	got := admitted.Load()
	t.Logf("%d calls, %d units admitted in %dµs (bound %d)", calls.Load(), got, elapsed, bound)
	if got > bound {
		t.Fatalf("admitted %d units in %dµs, more than B + elapsed/T + 1 = %d", got, elapsed, bound)
	}
	if got < elapsed/l.T/2 {
		t.Fatalf("admitted only %d units in %dµs: the limiter is not being exercised", got, elapsed)
	}
}

// snapshot is a key's bytes and absolute expiry.
func snapshot(tb testing.TB, c *redis.Client, key string) string {
	tb.Helper()
	ctx := context.Background()
	v, err := c.Get(ctx, key).Result()
	if err != nil {
		tb.Fatalf("GET %s: %v", key, err)
	}
	exp, err := c.PExpireTime(ctx, key).Result()
	if err != nil {
		tb.Fatalf("PEXPIRETIME %s: %v", key, err)
	}
	return fmt.Sprintf("%s@%d", v, exp.Milliseconds())
}

// I3: a denied composite leaves every key byte-identical (value and expiry)
// and reports the largest retry-after and its index.
func TestCompositeAllOrNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st := newStore(t, c)
	ctx := context.Background()
	// Slow limits, so no key expires or refills while the test looks at it,
	// however loaded the machine.
	loose := limit(t, gcra.PerSecond(1), 100)
	tight := limit(t, gcra.PerMinute(10), 2)  // T = 6 s
	tighter := limit(t, gcra.PerMinute(1), 1) // T = 60 s

	// Spend the two tight keys, and touch the loose one so it exists.
	for _, r := range []gcra.Request{
		{Key: "loose", Limit: loose, Cost: 1},
		{Key: "tight", Limit: tight, Cost: 2},
		{Key: "tighter", Limit: tighter, Cost: 1},
	} {
		if d, err := st.Decide(ctx, []gcra.Request{r}); err != nil || !d.Allowed {
			t.Fatalf("Decide(%+v) = %+v, %v", r, d, err)
		}
	}
	before := map[string]string{}
	for _, k := range []string{"loose", "tight", "tighter"} {
		before[k] = snapshot(t, c, k)
	}
	d, err := st.Decide(ctx, []gcra.Request{
		{Key: "loose", Limit: loose, Cost: 5},
		{Key: "tight", Limit: tight, Cost: 1},
		{Key: "tighter", Limit: tighter, Cost: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed {
		t.Fatalf("composite over spent keys = %+v, want denied", d)
	}
	if d.Limiting != 2 || d.RetryAfter <= 50*time.Second || d.RetryAfter > time.Minute {
		t.Fatalf("composite = %+v, want limiting 2 (the 1/m key) with its retry-after just under 1m", d)
	}
	for k, want := range before {
		if got := snapshot(t, c, k); got != want {
			t.Errorf("key %s after a denied composite = %s, want unchanged %s", k, got, want)
		}
	}

	// An allowed composite charges every key.
	d, err = st.Decide(ctx, []gcra.Request{
		{Key: "loose", Limit: loose, Cost: 5},
		{Key: "fresh", Limit: tight, Cost: 1},
	})
	if err != nil || !d.Allowed {
		t.Fatalf("composite = %+v, %v; want allowed", d, err)
	}
	if d.Remaining != 1 || d.Limiting != 1 {
		t.Fatalf("composite = %+v, want the smallest remaining (1, from key 1)", d)
	}
	if after := snapshot(t, c, "loose"); after == before["loose"] {
		t.Errorf("allowed composite left key loose unchanged: %s", after)
	}
}

// I6: every written key carries a TTL, and is gone once its TAT is past.
func TestIdleKeysExpire(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st := newStore(t, c)
	ctx := context.Background()
	l := limit(t, gcra.PerSecond(5), 4) // T = 200 ms
	d, err := st.Decide(ctx, []gcra.Request{{Key: "idle", Limit: l, Cost: 3}})
	if err != nil || !d.Allowed {
		t.Fatalf("Decide = %+v, %v", d, err)
	}
	pttl, err := c.PTTL(ctx, "idle").Result()
	if err != nil {
		t.Fatal(err)
	}
	// reset_after is 600 ms: the key lives that long rounded up to a ms, + 1 ms.
	if pttl <= 0 || pttl > 601*time.Millisecond {
		t.Fatalf("PTTL = %v, want in (0, 601ms]", pttl)
	}
	wait.Until(t, 5*time.Second, func() error {
		n, err := c.Exists(ctx, "idle").Result()
		if err != nil {
			return err
		}
		if n != 0 {
			return errors.New("key still exists")
		}
		return nil
	})
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("DBSIZE = %d after every key went idle, want 0", n)
	}
}

// I7, by construction: no non-test file of this package reads the pod's
// clock.
func TestNoPodClockInSource(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" {
				switch sel.Sel.Name {
				case "Now", "Since", "Until", "Tick", "After", "NewTimer", "NewTicker", "AfterFunc":
					t.Errorf("%s: uses time.%s; the Redis path must take time from Redis TIME", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}

// I7, by behaviour: with every command logged (SLOWLOG with a zero
// threshold), the scripts the store sends carry only keys, T, B and cost:
// no argument is anywhere near the pod's clock in s, ms or µs.
func TestNoPodClockOnTheWire(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st := newStore(t, c)
	ctx := context.Background()
	if err := c.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "slowlog-max-len", "1000").Err(); err != nil {
		t.Fatal(err)
	}
	c.SlowLogReset(ctx)
	l := limit(t, gcra.PerSecond(5), 3)
	l2 := limit(t, gcra.PerMinute(7), 2)
	if _, err := st.Decide(ctx, []gcra.Request{{Key: "a", Limit: l, Cost: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Decide(ctx, []gcra.Request{{Key: "a", Limit: l, Cost: 1}, {Key: "b", Limit: l2, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	st.DecideMany(ctx, [][]gcra.Request{{{Key: "c", Limit: l, Cost: 1}}})
	entries, err := c.SlowLogGet(ctx, 1000).Result()
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Now()
	near := func(n int64) bool {
		for _, unit := range []int64{wall.Unix(), wall.UnixMilli(), wall.UnixMicro()} {
			scale := unit / wall.Unix()
			if d := n - unit; d > -86400*scale && d < 86400*scale {
				return true
			}
		}
		return false
	}
	scripts := 0
	for _, e := range entries {
		if len(e.Args) == 0 {
			continue
		}
		cmd := strings.ToUpper(e.Args[0])
		if cmd != "EVAL" && cmd != "EVALSHA" {
			continue
		}
		scripts++
		nkeys, err := strconv.Atoi(e.Args[2])
		if err != nil {
			t.Fatalf("%v: numkeys %q", e.Args, e.Args[2])
		}
		argv := e.Args[3+nkeys:]
		if len(argv) != 3*nkeys {
			t.Errorf("%v: %d ARGV for %d keys, want exactly T, B, cost per key", e.Args, len(argv), nkeys)
		}
		for _, a := range argv {
			n, err := strconv.ParseInt(a, 10, 64)
			if err != nil || near(n) {
				t.Errorf("%v: argument %q is not a limit or cost (or looks like the pod's clock)", e.Args[3:], a)
			}
		}
	}
	// Three decisions; the first use of each script is EVALSHA answered
	// NOSCRIPT, then EVAL.
	if scripts < 3 {
		t.Fatalf("saw %d script calls in SLOWLOG, want at least 3", scripts)
	}
}

// After SCRIPT FLUSH (a restarted or failed-over Redis) both paths fall back
// to EVAL and succeed.
func TestNoScriptFallback(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st := newStore(t, c)
	ctx := context.Background()
	l := limit(t, gcra.PerSecond(100), 10)
	for round := 0; round < 2; round++ {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if d, err := st.Decide(ctx, []gcra.Request{{Key: "x", Limit: l, Cost: 1}}); err != nil || !d.Allowed {
			t.Fatalf("Decide after SCRIPT FLUSH = %+v, %v", d, err)
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		ans := st.DecideMany(ctx, [][]gcra.Request{
			{{Key: "y", Limit: l, Cost: 1}},
			{{Key: "y", Limit: l, Cost: 1}, {Key: "z", Limit: l, Cost: 2}},
		})
		for i, a := range ans {
			if a.Err != nil || !a.Allowed {
				t.Fatalf("DecideMany after SCRIPT FLUSH: answer %d = %+v", i, a)
			}
		}
	}
}

// DecideMany gives, element by element, what Decide would have given in the
// same order, and reports per-element errors without failing the others.
func TestDecideMany(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st := newStore(t, c)
	ctx := context.Background()
	l := limit(t, gcra.PerMinute(1), 3) // slow: nothing refills during the test
	var batch [][]gcra.Request
	for i := 0; i < 5; i++ {
		batch = append(batch, []gcra.Request{{Key: "m", Limit: l, Cost: 1}})
	}
	batch = append(batch, []gcra.Request{{Key: "m", Limit: l, Cost: 9}})                                 // invalid
	batch = append(batch, []gcra.Request{{Key: "n", Limit: l, Cost: 1}, {Key: "m2", Limit: l, Cost: 3}}) // composite
	if err := c.Set(ctx, "bad", "not a state", 0).Err(); err != nil {
		t.Fatal(err)
	}
	batch = append(batch, []gcra.Request{{Key: "bad", Limit: l, Cost: 1}})
	ans := st.DecideMany(ctx, batch)
	if len(ans) != len(batch) {
		t.Fatalf("%d answers for %d decisions", len(ans), len(batch))
	}
	for i, want := range []bool{true, true, true, false, false} {
		if ans[i].Err != nil || ans[i].Allowed != want {
			t.Errorf("answer %d = %+v, want allowed=%v", i, ans[i], want)
		}
	}
	if !errors.Is(ans[5].Err, gcra.ErrCostExceedsBurst) {
		t.Errorf("answer 5 = %v, want ErrCostExceedsBurst", ans[5].Err)
	}
	if a := ans[6]; a.Err != nil || !a.Allowed || a.Remaining != 0 || a.Limiting != 1 {
		t.Errorf("answer 6 = %+v, want allowed, 0 remaining, limited by request 1", a)
	}
	if !errors.Is(ans[7].Err, redisstore.ErrRejected) {
		t.Errorf("answer 7 (corrupt key) = %v, want ErrRejected", ans[7].Err)
	}
}

// A killed Redis: the store returns ErrUnavailable, well within the
// deadline.
func TestKilledRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st := newStore(t, c)
	l := limit(t, gcra.PerSecond(100), 10)
	req := []gcra.Request{{Key: "k", Limit: l, Cost: 1}}
	if _, err := st.Decide(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	const deadline = 200 * time.Millisecond
	for _, many := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		began := time.Now()
		var err error
		if many {
			err = st.DecideMany(ctx, [][]gcra.Request{req, req})[1].Err
		} else {
			_, err = st.Decide(ctx, req)
		}
		took := time.Since(began)
		cancel()
		var se *redisstore.Error
		if !errors.As(err, &se) || !errors.Is(err, redisstore.ErrUnavailable) && !errors.Is(err, redisstore.ErrTimeout) {
			t.Fatalf("many=%v: Decide on a killed Redis = %v, want a *redisstore.Error, unavailable or timeout", many, err)
		}
		if took > deadline+200*time.Millisecond {
			t.Fatalf("many=%v: Decide on a killed Redis took %v, deadline %v", many, took, deadline)
		}
	}
}

// A stalled Redis (SIGSTOP): the store returns ErrTimeout within the
// context deadline, then works again once Redis resumes.
func TestStalledRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	st := newStore(t, c)
	l := limit(t, gcra.PerSecond(100), 10)
	req := []gcra.Request{{Key: "k", Limit: l, Cost: 1}}
	if _, err := st.Decide(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	const deadline = 100 * time.Millisecond
	for _, many := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		began := time.Now()
		var err error
		if many {
			err = st.DecideMany(ctx, [][]gcra.Request{req, req})[0].Err
		} else {
			_, err = st.Decide(ctx, req)
		}
		took := time.Since(began)
		cancel()
		if !errors.Is(err, redisstore.ErrTimeout) {
			t.Fatalf("many=%v: Decide on a stalled Redis = %v, want ErrTimeout", many, err)
		}
		if took > deadline+200*time.Millisecond {
			t.Fatalf("many=%v: Decide on a stalled Redis took %v, deadline %v", many, took, deadline)
		}
	}
	srv.Resume(t)
	wait.Until(t, 5*time.Second, func() error {
		_, err := st.Decide(context.Background(), req)
		return err
	})
}

func TestCanceled(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Client(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := st.Decide(ctx, []gcra.Request{{Key: "k", Limit: limit(t, gcra.PerSecond(1), 1), Cost: 1}})
	if !errors.Is(err, redisstore.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Decide with a canceled context = %v, want ErrCanceled wrapping context.Canceled", err)
	}
}
