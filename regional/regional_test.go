package regional

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/coordtest"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/internal/wait"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
	"github.com/allot-dev/allot/shares"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// pod is one regional service under test with its HTTP and gRPC servers.
type pod struct {
	s    *Service
	reg  *prometheus.Registry
	http *httptest.Server
	conn *grpc.ClientConn
	st   *state.Store
}

// applyPolicy stores doc as the policy and waits until the pod's view of
// tenant satisfies loaded.
func (p *pod) applyPolicy(tb testing.TB, doc, tenant string, loaded func(*tenantEntry) bool) {
	tb.Helper()
	if _, err := p.st.ApplyPolicy(context.Background(), []byte(doc), 0, "test"); err != nil {
		tb.Fatal(err)
	}
	wait.Until(tb, 10*time.Second, func() error {
		if te := p.s.view.tenant(tenant); te == nil || !loaded(te) {
			return fmt.Errorf("policy not loaded yet for tenant %q", tenant)
		}
		return nil
	})
}

// limits is a loaded condition: the tenant resolves to n limits.
func limits(n int) func(*tenantEntry) bool {
	return func(te *tenantEntry) bool { return len(te.resolved.Limits) == n }
}

// benchBudget is a loaded condition: the bench tier's budget is in force.
func benchBudget(te *tenantEntry) bool { return te.budget.Rate >= 1e5 }

func startPod(t testing.TB, store gcra.Store, adjust func(*Config)) *pod {
	t.Helper()
	return startPodOn(t, etcdtest.Start(t), store, adjust)
}

// startPodOn starts a pod on an existing etcd, with a coordinator (one per
// etcd) answering its reports, applies the test policy and waits until the
// pod is ready.
func startPodOn(t testing.TB, etcd *etcdtest.Server, store gcra.Store, adjust func(*Config)) *pod {
	t.Helper()
	if _, loaded := leaders.LoadOrStore(etcd, true); !loaded {
		coordtest.Start(t, coordtest.Fast(etcd.Client(t)))
	}
	return startPodWith(t, etcd, store, adjust, true)
}

// leaders notes the etcd servers startPodOn started a coordinator on.
var leaders sync.Map

// startPodWith starts a pod; with leader it waits until the pod is ready
// (a leader answered it), else only until it has the policy.
func startPodWith(t testing.TB, etcd *etcdtest.Server, store gcra.Store, adjust func(*Config), leader bool) *pod {
	t.Helper()
	st := state.New(etcd.Client(t), "")
	ctx := context.Background()
	pol, err := os.ReadFile("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// A policy another pod (or the test) applied on this etcd may be
	// loaded, and answered, before the check below.
	_, _, perr := st.Policy(ctx)
	policyBefore := perr == nil
	if !leader {
		// No coordinator records the shard count: the pod would wait
		// for it before it reports.
		if _, err := st.InitShards(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.Region, cfg.Store, cfg.Etcd, cfg.Registerer = "us-east", store, etcd.Client(t), reg
	cfg.StoreTimeout = 50 * time.Millisecond // generous: -race on a shared 2-core machine
	cfg.ReportInterval = 100 * time.Millisecond
	if adjust != nil {
		adjust(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	hs := httptest.NewServer(s.Handler(reg, ""))
	t.Cleanup(hs.Close)
	// Not ready before a policy exists.
	if code, _ := get(t, hs.URL+"/readyz"); code != 503 && !policyBefore {
		t.Errorf("/readyz before any policy = %d, want 503", code)
	}
	if _, err := st.ApplyPolicy(ctx, pol, 0, ""); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		if !leader {
			s.view.mu.RLock()
			defer s.view.mu.RUnlock()
			if !s.view.policyLoaded {
				return errors.New("no policy yet")
			}
			return nil
		}
		if code, _ := get(t, hs.URL+"/readyz"); code != 200 {
			return errors.New("not ready")
		}
		return nil
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	s.RegisterGRPC(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &pod{s: s, reg: reg, http: hs, conn: conn, st: st}
}

func get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func postDecide(t testing.TB, p *pod, body string) (int, decideResponse, string) {
	t.Helper()
	resp, err := http.Post(p.http.URL+"/v1/decide", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var d decideResponse
	_ = json.Unmarshal(b, &d)
	return resp.StatusCode, d, string(b)
}

// step is one decision of the seed's trace: 5/s burst 3.
type step struct {
	advance   time.Duration
	allowed   bool
	remaining int64
	retryMS   int64
}

var seedTrace = []step{
	{0, true, 2, 0}, {0, true, 1, 0}, {0, true, 0, 0}, {0, false, 0, 200},
	{250 * time.Millisecond, true, 0, 0}, {0, false, 0, 150},
}

func memPod(t testing.TB) (*pod, *fakeClock) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	mcfg := memstore.DefaultConfig()
	mcfg.Clock = clock.Now
	ms, err := memstore.New(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	return startPod(t, ms, nil), clock
}

// The seed's trace through every transport: HTTP, allot.v1.Limiter and
// Envoy's RLS, each on its own tenant (the free tier: 5/s burst 3, pinned
// to this region).
func TestSeedTraceEveryTransport(t *testing.T) {
	p, clock := memPod(t)
	lim := allotv1.NewLimiterClient(p.conn)
	rls := rlsv3.NewRateLimitServiceClient(p.conn)
	transports := map[string]func(tenant string) (bool, int64, int64){
		"http": func(tenant string) (bool, int64, int64) {
			code, d, raw := postDecide(t, p, `{"descriptors":{"tenant":"`+tenant+`"},"cost":1}`)
			if code != 200 || d.Limit != "tenant" {
				t.Fatalf("POST /v1/decide = %d %s", code, raw)
			}
			return d.Allowed, d.Remaining, d.RetryAfterMS
		},
		"grpc": func(tenant string) (bool, int64, int64) {
			r, err := lim.Decide(context.Background(), &allotv1.DecideRequest{Descriptors: map[string]string{"tenant": tenant}, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			return r.GetAllowed(), r.GetRemaining(), r.GetRetryAfterMs()
		},
		"rls": func(tenant string) (bool, int64, int64) {
			r, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api",
				Descriptors: []*corev3.RateLimitDescriptor{{Entries: []*corev3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}}}}})
			if err != nil {
				t.Fatal(err)
			}
			st := r.GetStatuses()[0]
			allowed := r.GetOverallCode() == rlsv3.RateLimitResponse_OK
			retry := int64(0)
			if !allowed {
				retry = st.GetDurationUntilReset().AsDuration().Milliseconds()
			}
			return allowed, int64(st.GetLimitRemaining()), retry
		},
	}
	for name, decide := range transports {
		t.Run(name, func(t *testing.T) {
			tenant := "seed-" + name
			for i, s := range seedTrace {
				clock.Add(s.advance)
				allowed, rem, retry := decide(tenant)
				if allowed != s.allowed || rem != s.remaining || retry != s.retryMS {
					t.Errorf("step %d: decide = {allowed %v, remaining %d, retry %d ms}, want {%v, %d, %d}",
						i, allowed, rem, retry, s.allowed, s.remaining, s.retryMS)
				}
			}
		})
	}
}

func TestForwardAuth(t *testing.T) {
	p, _ := memPod(t)
	do := func() (int, http.Header) {
		req, _ := http.NewRequest("GET", p.http.URL+"/v1/forward-auth", nil)
		req.Header.Set("X-Allot-Tenant", "t1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	for i := range 3 {
		if code, h := do(); code != 200 || h.Get("RateLimit-Policy") != `"tenant";q=5;w=1` {
			t.Fatalf("request %d: %d %v, want 200 with RateLimit-Policy", i, code, h)
		}
	}
	code, h := do()
	if code != 429 || h.Get("Retry-After") != "1" || h.Get("RateLimit") != `"tenant";r=0;t=1` ||
		h.Get("RateLimit-Policy") != `"tenant";q=5;w=1` {
		t.Errorf("4th request = %d %v; want 429, Retry-After: 1 and the RateLimit fields", code, h)
	}
	_, metrics := get(t, p.http.URL+"/metrics")
	if !strings.Contains(metrics, `allot_decisions_total{limit="tenant",region="us-east",result="denied"} 1`) {
		t.Errorf("/metrics does not count the denial:\n%s", metrics)
	}
	// Bad input names the field.
	req, _ := http.NewRequest("GET", p.http.URL+"/v1/forward-auth", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "tenant") {
		t.Errorf("forward-auth without X-Allot-Tenant = %d %s, want 400 naming tenant", resp.StatusCode, b)
	}
}

func TestCompositeAndShadow(t *testing.T) {
	p, _ := memPod(t)
	decide := func(user string) decideResponse {
		code, d, raw := postDecide(t, p, `{"descriptors":{"tenant":"t1","user":"`+user+`"}}`)
		if code != 200 {
			t.Fatalf("decide = %d %s", code, raw)
		}
		return d
	}
	// user 7: two allowed (user burst 2), the second would be denied by the
	// shadow hourly limit (burst 1) but is not.
	if d := decide("7"); !d.Allowed || d.Shadow {
		t.Fatalf("user 7 #1 = %+v, want allowed, no shadow denial", d)
	}
	if d := decide("7"); !d.Allowed || !d.Shadow {
		t.Fatalf("user 7 #2 = %+v, want allowed with a shadow denial", d)
	}
	// The third is denied by the user limit, all or nothing: the tenant
	// limit (burst 3) is not charged...
	if d := decide("7"); d.Allowed || d.Limit != "user" {
		t.Fatalf("user 7 #3 = %+v, want denied by user", d)
	}
	// ...so user 8 still finds the tenant's third unit.
	if d := decide("8"); !d.Allowed || d.Remaining != 0 || d.Limit != "tenant" {
		t.Fatalf("user 8 = %+v, want allowed with the tenant's last unit", d)
	}
	if d := decide("9"); d.Allowed || d.Limit != "tenant" {
		t.Fatalf("user 9 = %+v, want denied by tenant", d)
	}
	// The shadow limit would have denied user 7's second and third
	// requests: both counted, neither denied for it.
	if got := testutil.ToFloat64(p.s.m.decisions.WithLabelValues("user-hourly", "us-east", "shadow_denied")); got != 2 {
		t.Errorf("shadow_denied count = %v, want 2", got)
	}
}

func TestBadRequests(t *testing.T) {
	p, _ := memPod(t)
	cases := []struct{ body, field string }{
		{`{"descriptors":{"user":"7"}}`, "descriptors.tenant"},
		{`{"descriptors":{}}`, "descriptors"},
		{`{"descriptors":{"tenant":"t1"},"cost":0}`, "cost"},
		{`{"descriptors":{"tenant":"t1"},"cost":-2}`, "cost"},
		{`{"descriptors":{"tenant":"t1"},"cost":4}`, "cost"},
		{`{"descriptors":{"tenant":"t1"},"cots":1}`, "cots"},
		{`not json`, "body"},
	}
	for _, c := range cases {
		code, _, raw := postDecide(t, p, c.body)
		if code != 400 || !strings.Contains(raw, c.field) {
			t.Errorf("POST /v1/decide %s = %d %s, want 400 naming %s", c.body, code, raw, c.field)
		}
	}
	_, err := allotv1.NewLimiterClient(p.conn).Decide(context.Background(), &allotv1.DecideRequest{Descriptors: map[string]string{"user": "1"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("gRPC Decide without tenant = %v, want InvalidArgument", err)
	}
}

// A stalled Redis costs a request at most its timeout; open limits admit
// through the local fallback at their fallback rate (from an empty bucket:
// no burst), closed ones deny; every fallback decision is counted;
// decisions return to Redis once it recovers.
func TestRedisFailure(t *testing.T) {
	rs := redistest.Start(t)
	opts := redistest.ClientOptions(rs.Addr)
	rc := redis.NewClient(opts)
	t.Cleanup(func() { _ = rc.Close() })
	store, err := redisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	p := startPod(t, store, func(c *Config) { c.BreakerOpen = 300 * time.Millisecond; c.BreakerFailures = 2 })
	ctx := context.Background()
	d, err := p.s.Decide(ctx, map[string]string{"tenant": "t1"}, 1)
	if err != nil || !d.Allowed || d.Fallback {
		t.Fatalf("healthy Decide = %+v, %v", d, err)
	}
	// The tenant limit's fail-open share of the budget is the leader's
	// (one pod in the region: all of it, 5/s burst 3), lowered to its
	// fallback_rate of 2/s.
	waitShare(t, p, 1)

	rs.Pause(t)
	fallbackClosed := 0
	rate := newRateCheck(t, 500*time.Millisecond) // 2/s
	decide := func() bool {
		t.Helper()
		start := time.Now()
		d, err := p.s.Decide(ctx, map[string]string{"tenant": "t2"}, 1)
		if took := time.Since(start); took > p.s.cfg.StoreTimeout+200*time.Millisecond {
			t.Errorf("a decision during the stall took %v, want about the store timeout %v", took, p.s.cfg.StoreTimeout)
		}
		if err != nil || !d.Fallback || d.Closed {
			t.Fatalf("Decide during the stall = %+v, %v; want a fail-open fallback decision", d, err)
		}
		return d.Allowed
	}
	for range 6 {
		rate.add(decide())
		dl, err := p.s.Decide(ctx, map[string]string{"tenant": "t2", "route": "/login"}, 1)
		if err != nil || dl.Allowed || !dl.Fallback || !dl.Closed || dl.Limit != "login" {
			t.Fatalf("login during the stall = %+v, %v; want denied (fails closed)", dl, err)
		}
		fallbackClosed++
	}
	// The tenant fails open at 2/s from an empty bucket (Redis may have
	// spent the burst of 3 just before it stalled): the quick decisions
	// admit nothing at once, then one unit per 500 ms (rate checks it at
	// every decision).
	rate.until(2, decide)
	var counted float64
	for _, reason := range []string{"timeout", "breaker_open"} {
		counted += testutil.ToFloat64(p.s.m.fallback.WithLabelValues("tenant", "us-east", reason))
	}
	if counted != float64(rate.decisions) {
		t.Errorf("fallback decisions counted for tenant = %v, want %d", counted, rate.decisions)
	}
	if got := testutil.ToFloat64(p.s.m.fallback.WithLabelValues("login", "us-east", "timeout")) +
		testutil.ToFloat64(p.s.m.fallback.WithLabelValues("login", "us-east", "breaker_open")); got != float64(fallbackClosed) {
		t.Errorf("fallback decisions counted for login = %v, want %d", got, fallbackClosed)
	}
	rs.Resume(t)
	wait.Until(t, 10*time.Second, func() error {
		d, err := p.s.Decide(ctx, map[string]string{"tenant": "t3"}, 1)
		if err != nil || d.Fallback {
			return errors.New("still in fallback")
		}
		return nil
	})
}

// testGrants counts the answers testGrant made.
var testGrants atomic.Uint64

// testGrant makes the pod hold g for tenant under a one-minute lease, as if
// a leader of a later term than any real one had answered with it (so that
// the real leader's answers, of an older term, are ignored from then on).
func testGrant(v *view, tenant string, g shares.Grant) {
	n := testGrants.Add(1)
	g.Epoch = 1
	v.answered(shares.ShardOf(tenant, v.shards()), time.Now(), shares.Answer{Term: 1<<62 + n, Lease: time.Minute, Full: true, Epoch: 1,
		Entries: []shares.Entry{{Tenant: tenant, Grant: g}}}, time.Now())
}

// waitBudget waits until the pod enforces at least rate and burst for
// tenant's budget limit from what the leader told it: a grant, or for a
// tenant it holds none of the leader's cold floor (the default tier's
// floor). Right after the pod is ready, or after a policy change, the leader
// may not have taken up the tenant's budget yet.
func waitBudget(tb testing.TB, p *pod, tenant string, rate float64, burst int64) {
	tb.Helper()
	wait.Until(tb, 10*time.Second, func() error {
		te := p.s.view.tenant(tenant)
		if te == nil {
			return errors.New("no policy loaded")
		}
		r, b, leased := p.s.view.tenantEffective(time.Now(), te)
		if r < rate*(1-1e-9) || b < burst {
			return fmt.Errorf("the pod enforces %v/s burst %d for %s (leased grant %v), want at least %v/s burst %d", r, b, tenant, leased, rate, burst)
		}
		return nil
	})
}

// waitShare waits until the leader handed the pod a fail-open share of want
// (1/want of the region's budget grants while the store is down).
func waitShare(tb testing.TB, p *pod, want int) {
	tb.Helper()
	wait.Until(tb, 10*time.Second, func() error {
		if got := p.s.view.failOpenShare(0, time.Now()); got != want {
			return fmt.Errorf("fail-open share 1/%d, want 1/%d", got, want)
		}
		return nil
	})
}

// rateCheck follows one key's fail-open fallback, whose local bucket starts
// empty (Redis may have spent the burst just before it failed): it admits at
// its rate from the first decision, never a burst, so at every point at most
// one unit per interval since start (taken before the first decision) is
// admitted.
type rateCheck struct {
	t         *testing.T
	start     time.Time
	interval  time.Duration
	admitted  int
	decisions int
}

func newRateCheck(t *testing.T, interval time.Duration) *rateCheck {
	return &rateCheck{t: t, start: time.Now(), interval: interval}
}

// add counts one fallback decision of the key, and checks the rate.
func (r *rateCheck) add(allowed bool) {
	r.t.Helper()
	r.decisions++
	if allowed {
		r.admitted++
	}
	// 1 ms of slack for the store's microsecond clock.
	el := time.Since(r.start)
	if most := int((el + time.Millisecond) / r.interval); r.admitted > most {
		r.t.Fatalf("the fallback admitted %d units within %v, want at most %d (one per %v, starting empty)", r.admitted, el, most, r.interval)
	}
}

// until decides (decide reports whether one fallback decision of the key
// admitted) until want units were admitted in all, checking the rate at
// every decision.
func (r *rateCheck) until(want int, decide func() bool) {
	r.t.Helper()
	wait.Until(r.t, 10*time.Second, func() error {
		r.add(decide())
		if r.admitted < want {
			return fmt.Errorf("the fallback admitted %d units in %v, want %d", r.admitted, time.Since(r.start), want)
		}
		return nil
	})
}
