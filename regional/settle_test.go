package regional

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
)

// redisPodPolicy starts a pod on a real redis-server with the policy doc
// (n limits for tenant t1) and store timeout, and returns it with a client
// to read its keys.
func redisPodPolicy(t *testing.T, doc string, n int, timeout time.Duration) (*pod, *redis.Client) {
	t.Helper()
	rs := redistest.Start(t)
	rc := redis.NewClient(redistest.ClientOptions(rs.Addr))
	t.Cleanup(func() { _ = rc.Close() })
	store, err := redisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	p := startPod(t, store, func(c *Config) { c.StoreTimeout = timeout })
	p.applyPolicy(t, doc, "t1", limits(n))
	return p, rc
}

const settlePolicy = `version: 1
regions: [us-east, eu-west]
default_tier: free
limits:
  - name: tokens
    descriptors: [tenant, kind]
    match: {kind: tokens}
    rate: 100/h
    burst: 100
tiers:
  free:
    budget: {rate: 5/s, burst: 3}
`

// Reserve, then settle, on a pod over real Redis, through the service, its
// HTTP API and the Go client over gRPC: a refund gives back exactly what
// was unused, a debt delays the next request by exactly debt·T, and every
// bad settle (second, unknown, malformed, negative) is refused with the key
// unchanged.
func TestReserveThenSettle(t *testing.T) {
	p, rc := redisPodPolicy(t, settlePolicy, 1, 5*time.Second)
	ctx := context.Background()
	const T = 36 * time.Second // 100/h
	tat := func(tenant string) int64 {
		v, err := rc.Get(ctx, "allot:v1:{"+tenant+"}:tokens:kind=tokens").Result()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		a, _, _ := strings.Cut(v, ":")
		n, _ := strconv.ParseInt(a, 10, 64)
		return n
	}
	tokens := func(tenant string) map[string]string { return map[string]string{"tenant": tenant, "kind": "tokens"} }

	// 80 reserved, 30 used: 50 back, exactly; then 70 fit and 71 do not.
	d, err := p.s.Reserve(ctx, tokens("t1"), 80)
	if err != nil || !d.Allowed || d.SettleToken == "" {
		t.Fatalf("reserve 80: %+v %v", d, err)
	}
	before := tat("t1")
	got, err := p.s.Settle(ctx, d.SettleToken, 30)
	if err != nil || got != (Settled{Reserved: 80, Actual: 30, Refunded: 50}) {
		t.Fatalf("settle: %+v %v", got, err)
	}
	if moved := before - tat("t1"); moved != 50*T.Microseconds() {
		t.Fatalf("the refund moved the TAT back %d µs, want 50·T = %d", moved, 50*T.Microseconds())
	}
	// Refused settles change nothing.
	mark := tat("t1")
	for _, c := range []struct {
		token  string
		actual int64
		want   error
	}{
		{d.SettleToken, 0, ErrSettleGone},                        // settled already
		{d.SettleToken[:len(d.SettleToken)-2], 0, ErrSettleGone}, // unknown
		{"s1.not-base64!.x", 0, ErrBadRequest},
		{"hello", 0, ErrBadRequest},
		{d.SettleToken, -1, ErrBadRequest},
	} {
		if _, err := p.s.Settle(ctx, c.token, c.actual); !errors.Is(err, c.want) {
			t.Errorf("settle %q %d: %v, want %v", c.token, c.actual, err, c.want)
		}
	}
	if tat("t1") != mark {
		t.Fatal("a refused settle changed the key")
	}
	if d, _ := p.s.Decide(ctx, tokens("t1"), 70); !d.Allowed {
		t.Fatalf("70 after the refund: %+v, want allowed (100 − 30 used)", d)
	}
	if d, _ := p.s.Decide(ctx, tokens("t1"), 1); d.Allowed {
		t.Fatalf("1 more: %+v, want denied", d)
	}
	// A plain decision has no token; a denial neither.
	if d, _ := p.s.Decide(ctx, tokens("t9"), 1); d.SettleToken != "" {
		t.Fatalf("Decide carried a settle token: %+v", d)
	}
	if d, _ := p.s.Reserve(ctx, tokens("t1"), 5); d.Allowed || d.SettleToken != "" {
		t.Fatalf("a denied reservation: %+v, want no token", d)
	}

	// Debt, over HTTP: 90 reserved, 150 used; the next request waits for
	// the 150 − 100 + 1 units it lacks.
	post := func(path string, body any) (int, map[string]any) {
		b, _ := json.Marshal(body)
		resp, err := http.Post(p.http.URL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	code, out := post("/v1/decide", map[string]any{"descriptors": tokens("t2"), "cost": 90, "reserve": true})
	tok, _ := out["settle_token"].(string)
	if code != 200 || out["allowed"] != true || tok == "" {
		t.Fatalf("POST /v1/decide reserve: %d %v", code, out)
	}
	code, out = post("/v1/settle", map[string]any{"token": tok, "actual": 150})
	if code != 200 || out["charged"] != float64(60) || out["refunded"] != float64(0) {
		t.Fatalf("POST /v1/settle: %d %v", code, out)
	}
	d, _ = p.s.Decide(ctx, tokens("t2"), 1)
	if want := 51 * T; d.Allowed || d.RetryAfter > want || d.RetryAfter < want-2*time.Second {
		t.Fatalf("after 60 units of debt: %+v, want denied for about %v", d, want)
	}
	if code, out = post("/v1/settle", map[string]any{"token": tok, "actual": 150}); code != 404 || !strings.Contains(out["error"].(string), "already settled") {
		t.Fatalf("second POST /v1/settle: %d %v, want 404 naming it", code, out)
	}
	for _, body := range []map[string]any{{"token": tok}, {"token": tok, "actual": -4}, {"token": tok, "actual": 1, "extra": 1}} {
		if code, out = post("/v1/settle", body); code != 400 {
			t.Errorf("POST /v1/settle %v: %d %v, want 400", body, code, out)
		}
	}

	// The Go client, over gRPC.
	cl, err := client.New(client.Config{Target: p.conn.Target(), Insecure: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cd, err := cl.Reserve(ctx, tokens("t3"), 40)
	if err != nil || !cd.Allowed || cd.SettleToken == "" {
		t.Fatalf("client reserve: %+v %v", cd, err)
	}
	if s, err := cd.Settle(ctx, 10); err != nil || s.Refunded != 30 {
		t.Fatalf("client settle: %+v %v", s, err)
	}
	if _, err := cd.Settle(ctx, 10); !errors.Is(err, client.ErrSettleGone) {
		t.Fatalf("client second settle: %v, want ErrSettleGone", err)
	}
	if _, err := (client.Decision{}).Settle(ctx, 1); !errors.Is(err, client.ErrNotReserved) {
		t.Fatalf("settle of an unreserved decision: %v, want ErrNotReserved", err)
	}
	if _, err := cl.Settle(ctx, cd.SettleToken, -1); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("client negative actual: %v, want ErrInvalid", err)
	}
}

// A settle corrects the counts the next report carries, never below zero.
func TestSettleAdjustsCounts(t *testing.T) {
	c := newCounters(10)
	c.add("t1", 80, true)
	c.adjust("t1", -50)
	c.adjust("nobody", 5) // not counted: not tracked for it
	if got := c.drain(false); got["t1"].Offered != 30 || got["t1"].Admitted != 30 || len(got) != 1 {
		t.Fatalf("after reserving 80 and settling 30: %+v", got)
	}
	c.add("t1", 10, true)
	c.adjust("t1", -40) // a settle of a reservation counted in an earlier report
	if got := c.drain(false); got["t1"].Offered != 0 || got["t1"].Admitted != 0 {
		t.Fatalf("a refund beyond the interval's counts: %+v, want 0", got)
	}
}

const chargePolicy = `version: 1
regions: [us-east, eu-west]
default_tier: free
charges: {key: allot_charge, value: done}
limits:
  - name: tokens
    descriptors: [tenant, model]
    rate: 100/h
    burst: 100
tiers:
  free:
    budget: {rate: 5/s, burst: 3}
`

// Envoy's call at the end of a stream (apply_on_stream_done, the real cost
// as hits_addend), marked by the policy's charges entry: charged past the
// burst, never denied; the next ordinary call waits for the debt. A call
// without the entry is decided as always.
func TestRLSCharges(t *testing.T) {
	p, _ := redisPodPolicy(t, chargePolicy, 1, 5*time.Second)
	rls := rlsv3.NewRateLimitServiceClient(p.conn)
	ctx := context.Background()
	call := func(hits uint64, kv ...string) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{HitsAddend: uint32(hits), Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc(0, kv...)}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// The request: 10 units, allowed.
	if r := call(10, "tenant", "t1", "model", "m"); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("the request: %v", r)
	}
	// Its stream ends having cost 140 more: charged, OK, though over the
	// burst.
	if r := call(140, "tenant", "t1", "model", "m", "allot_charge", "done"); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("the charge: %v, want OK (charges are never denied)", r)
	}
	if n := testutil.ToFloat64(p.s.m.charges.WithLabelValues("charged")); n != 1 {
		t.Fatalf("allot_charges_total{result=charged} = %v, want 1", n)
	}
	// 150 spent of a burst of 100: the next unit waits 51·T.
	r := call(1, "tenant", "t1", "model", "m")
	const T = 36 * time.Second
	wait := r.GetStatuses()[0].GetDurationUntilReset().AsDuration()
	if r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || wait > 51*T || wait < 51*T-2*time.Second {
		t.Fatalf("after the charge: %v (wait %v), want OVER_LIMIT for about %v", r.GetOverallCode(), wait, 51*T)
	}
	// Another model's key is untouched; a charge of another value of the
	// entry is an ordinary call (denied here: 120 > burst is refused).
	if r := call(1, "tenant", "t1", "model", "other"); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("another model: %v", r)
	}
	if _, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{HitsAddend: 120, Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc(0, "tenant", "t1", "model", "x", "allot_charge", "no")}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an unmarked call above the burst: %v, want InvalidArgument", err)
	}
}

// A request that matches a leased limit is decided, but gets no settle
// token: the units its leases served could not be settled (their debt
// would never reach the limit's key).
func TestReserveWithLeasedLimitHasNoToken(t *testing.T) {
	p, _ := redisPod(t)
	ctx := context.Background()
	d, err := p.s.Reserve(ctx, map[string]string{"tenant": "t1", "user": "u", "machine": "m1"}, 1)
	if err != nil || !d.Allowed || d.SettleToken != "" {
		t.Fatalf("a reserved request with a leased limit: %+v %v, want allowed without a token", d, err)
	}
	if d, err := p.s.Reserve(ctx, map[string]string{"tenant": "t1", "user": "v"}, 1); err != nil || !d.Allowed || d.SettleToken == "" {
		t.Fatalf("the same without the leased limit: %+v %v, want a token", d, err)
	}
}
