package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/regional"
)

// served is the handler behind the middleware: it counts the requests it
// serves and records the decision it found in their context.
type served struct {
	n    atomic.Int64
	mu   sync.Mutex
	last *client.Decision
}

func (s *served) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.n.Add(1)
	if d, ok := client.DecisionFromContext(r.Context()); ok {
		s.mu.Lock()
		s.last = &d
		s.mu.Unlock()
	}
	_, _ = io.WriteString(w, "hello\n")
}

// errorLog records what WithOnError saw.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(_ *http.Request, err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// The seed's trace through the middleware in front of a real regional
// service: three requests served with the RateLimit fields, the 4th
// answered 429 with Retry-After: 1; 250 ms later one more is served.
func TestMiddlewareSeedTrace(t *testing.T) {
	l := startLimiter(t)
	c := newClient(t, l.Addr, generous)
	var decisions, denied atomic.Int64
	next := &served{}
	h := client.Middleware(c,
		client.WithDescriptors(client.FromHeader("X-Tenant", "tenant")),
		client.WithOnDecision(func(_ *http.Request, d client.Decision) {
			decisions.Add(1)
			if !d.Allowed {
				denied.Add(1)
			}
		}),
	)(next)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	const policy = `"tenant";q=5;w=1`
	steps := []struct {
		advance    time.Duration
		code       int
		rateLimit  string
		retryAfter string
	}{
		{0, 200, `"tenant";r=2;t=1`, ""},
		{0, 200, `"tenant";r=1;t=1`, ""},
		{0, 200, `"tenant";r=0;t=1`, ""},
		{0, 429, `"tenant";r=0;t=1`, "1"},
		{250 * time.Millisecond, 200, `"tenant";r=0;t=1`, ""},
		{0, 429, `"tenant";r=0;t=1`, "1"},
	}
	for i, s := range steps {
		l.Clock.Add(s.advance)
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/things", nil)
		req.Header.Set("X-Tenant", "t42")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != s.code || h.Get("RateLimit") != s.rateLimit || h.Get("RateLimit-Policy") != policy ||
			h.Get("Retry-After") != s.retryAfter {
			t.Errorf("request %d = %d RateLimit=%q RateLimit-Policy=%q Retry-After=%q; want %d %q %q %q",
				i, resp.StatusCode, h.Get("RateLimit"), h.Get("RateLimit-Policy"), h.Get("Retry-After"),
				s.code, s.rateLimit, policy, s.retryAfter)
		}
		if s.code == 429 {
			if cc := h.Get("Cache-Control"); cc != "no-store" {
				t.Errorf("request %d: 429 with Cache-Control %q, want no-store", i, cc)
			}
			if !strings.Contains(string(body), `"tenant"`) {
				t.Errorf("request %d: 429 body %q does not name the limit", i, body)
			}
		}
	}
	if got := next.n.Load(); got != 4 {
		t.Errorf("handler served %d requests, want 4 (denied ones never reach it)", got)
	}
	if d, n := decisions.Load(), denied.Load(); d != 6 || n != 2 {
		t.Errorf("OnDecision saw %d decisions, %d denied; want 6, 2", d, n)
	}
	if next.last == nil || next.last.Limit != "tenant" || !next.last.Allowed {
		t.Errorf("DecisionFromContext in the handler = %+v, want the allowed decision of limit tenant", next.last)
	}
}

// When the limiter is down or stalled, FailOpen serves and FailClosed
// answers 503 with Retry-After (never 429), each within the client's call
// timeout; OnError sees ErrUnavailable every time.
func TestMiddlewareLimiterUnavailable(t *testing.T) {
	targets := []struct {
		name  string
		start func(t *testing.T) *client.Client
	}{
		{"stopped", func(t *testing.T) *client.Client {
			l := startLimiter(t)
			c := newClient(t, l.Addr, 0)
			warm(t, c, "warm")
			l.Stop()
			return c
		}},
		{"stalled", func(t *testing.T) *client.Client { return newClient(t, blackHole(t), 0) }},
	}
	modes := []struct {
		mode       client.FailureMode
		opts       []client.MiddlewareOption
		code       int
		retryAfter string
		served     int64
	}{
		{client.FailOpen, nil, 200, "", 3},
		{client.FailClosed, nil, 503, "1", 0},
		{client.FailClosed, []client.MiddlewareOption{client.WithUnavailableRetryAfter(1500 * time.Millisecond)}, 503, "2", 0},
	}
	for _, tg := range targets {
		for _, m := range modes {
			t.Run(fmt.Sprintf("%s/%v/retry-%s", tg.name, m.mode, m.retryAfter), func(t *testing.T) {
				c := tg.start(t)
				next := &served{}
				var errs errorLog
				opts := append([]client.MiddlewareOption{
					client.WithDescriptors(client.FromHeader("X-Tenant", "tenant")),
					client.WithFailureMode(m.mode),
					client.WithOnError(errs.add),
				}, m.opts...)
				h := client.Middleware(c, opts...)(next)
				for i := range 3 {
					req := httptest.NewRequest(http.MethodGet, "/v1/things", nil)
					req.Header.Set("X-Tenant", "t42")
					rec := httptest.NewRecorder()
					start := time.Now()
					h.ServeHTTP(rec, req)
					took := time.Since(start)
					res := rec.Result()
					if res.StatusCode != m.code || res.Header.Get("Retry-After") != m.retryAfter {
						t.Errorf("request %d = %d Retry-After %q, want %d %q", i, res.StatusCode, res.Header.Get("Retry-After"), m.code, m.retryAfter)
					}
					if res.Header.Get("RateLimit") != "" || res.Header.Get("RateLimit-Policy") != "" {
						t.Errorf("request %d carries RateLimit fields %v without a decision", i, res.Header)
					}
					if m.code == 503 && res.Header.Get("Cache-Control") != "no-store" {
						t.Errorf("request %d: 503 with Cache-Control %q, want no-store", i, res.Header.Get("Cache-Control"))
					}
					if took > client.DefaultTimeout+slack {
						t.Errorf("request %d took %v, want within the call timeout %v (+%v scheduling slack)", i, took, client.DefaultTimeout, slack)
					}
				}
				if got := next.n.Load(); got != m.served {
					t.Errorf("handler served %d requests, want %d", got, m.served)
				}
				errsSeen := errs.all()
				if len(errsSeen) != 3 {
					t.Fatalf("OnError called %d times, want 3", len(errsSeen))
				}
				for _, err := range errsSeen {
					if !errors.Is(err, client.ErrUnavailable) {
						t.Errorf("OnError(%v), want ErrUnavailable", err)
					}
				}
			})
		}
	}
}

// Descriptors that cannot be extracted, or that the limiter rejects,
// answer 400 naming the problem; the handler never runs; OnError sees
// ErrInvalid. A real limiter decides.
func TestMiddlewareBadRequests(t *testing.T) {
	l := startLimiter(t)
	c := newClient(t, l.Addr, generous)
	cases := []struct {
		name    string
		fn      client.DescriptorsFunc // nil: the default, FromHeaders("X-Allot-")
		headers map[string]string
		want    string // in the body
	}{
		{"header missing", client.FromHeader("X-Tenant", "tenant"), nil, "X-Tenant"},
		{"header empty", client.FromHeader("X-Tenant", "tenant"), map[string]string{"X-Tenant": ""}, "X-Tenant"},
		{"no prefixed headers", nil, map[string]string{"X-Other": "1"}, "X-Allot-Tenant"},
		{"cost not a number", nil, map[string]string{"X-Allot-Tenant": "t1", "X-Allot-Cost": "two"}, "X-Allot-Cost"},
		{"cost 0", nil, map[string]string{"X-Allot-Tenant": "t1", "X-Allot-Cost": "0"}, "X-Allot-Cost"},
		{"no tenant (limiter rejects)", nil, map[string]string{"X-Allot-User": "7"}, "descriptors.tenant"},
		{"cost above burst (limiter rejects)", nil, map[string]string{"X-Allot-Tenant": "t1", "X-Allot-Cost": "4"}, "cost"},
		{"conflicting extractors", client.Merge(client.FromHeader("X-Tenant", "tenant"), client.FromHeader("X-Org", "tenant")),
			map[string]string{"X-Tenant": "a", "X-Org": "b"}, "tenant"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			next := &served{}
			var errs errorLog
			opts := []client.MiddlewareOption{client.WithOnError(errs.add), client.WithFailureMode(client.FailClosed)}
			if tc.fn != nil {
				opts = append(opts, client.WithDescriptors(tc.fn))
			}
			h := client.Middleware(c, opts...)(next)
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != 400 || !strings.Contains(rec.Body.String(), tc.want) {
				t.Errorf("response = %d %q, want 400 naming %s", rec.Code, rec.Body.String(), tc.want)
			}
			if next.n.Load() != 0 {
				t.Error("the handler served a bad request")
			}
			if e := errs.all(); len(e) != 1 || !errors.Is(e[0], client.ErrInvalid) {
				t.Errorf("OnError saw %v, want one ErrInvalid", e)
			}
		})
	}
	// The same headers with a good cost are served: the default extractor
	// reads every X-Allot-* header.
	h := client.Middleware(c)(&served{})
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-Allot-Tenant", "t2")
	req.Header.Set("X-Allot-Cost", "3")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 || rec.Header().Get("RateLimit") != `"tenant";r=0;t=1` {
		t.Errorf("X-Allot-Tenant: t2, X-Allot-Cost: 3 = %d %v, want 200 with RateLimit r=0", rec.Code, rec.Header())
	}
}

// Responses for decisions a fake Decider makes (the middleware's own
// logic, at values the real limiter's policy does not reach).
func TestMiddlewareResponses(t *testing.T) {
	api := client.Decision{Limit: "api", Quota: 10, Window: time.Minute}
	with := func(f func(*client.Decision)) client.Decision { d := api; f(&d); return d }
	jsonLimited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := client.DecisionFromContext(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = fmt.Fprintf(w, `{"error":"rate_limited","limit":%q}`, d.Limit)
	})
	cases := []struct {
		name    string
		d       client.Decision
		err     error
		opts    []client.MiddlewareOption
		code    int
		headers map[string]string // "" means absent
		body    string            // a substring
		served  bool
	}{
		{"allowed", with(func(d *client.Decision) { d.Allowed, d.Remaining, d.ResetAfter = true, 7, 1500*time.Millisecond }), nil, nil,
			200, map[string]string{"RateLimit": `"api";r=7;t=2`, "RateLimit-Policy": `"api";q=10;w=60`, "Retry-After": "", "Cache-Control": ""}, "hello", true},
		{"allowed, no limit matched", client.Decision{Allowed: true}, nil, nil,
			200, map[string]string{"RateLimit": "", "RateLimit-Policy": ""}, "hello", true},
		{"allowed, shadow denial", with(func(d *client.Decision) { d.Allowed, d.Shadow, d.Remaining = true, true, 3 }), nil, nil,
			200, map[string]string{"RateLimit": `"api";r=3;t=0`}, "hello", true},
		{"denied, retry rounds up", with(func(d *client.Decision) { d.RetryAfter, d.ResetAfter = 1500*time.Millisecond, 6*time.Second }), nil, nil,
			429, map[string]string{"Retry-After": "2", "RateLimit": `"api";r=0;t=2`, "Cache-Control": "no-store"}, `"api"`, false},
		{"denied, 1 ms", with(func(d *client.Decision) { d.RetryAfter = time.Millisecond }), nil, nil,
			429, map[string]string{"Retry-After": "1", "RateLimit": `"api";r=0;t=1`}, "retry after 1 s", false},
		{"denied, no retry given", with(func(d *client.Decision) {}), nil, nil,
			429, map[string]string{"Retry-After": "1", "RateLimit": `"api";r=0;t=0`}, "", false},
		{"denied, whole seconds", with(func(d *client.Decision) { d.RetryAfter = 3 * time.Second }), nil, nil,
			429, map[string]string{"Retry-After": "3", "RateLimit": `"api";r=0;t=3`}, "", false},
		{"denied by the limiter's fallback", with(func(d *client.Decision) { d.RetryAfter, d.Fallback = time.Second, true }), nil, nil,
			429, map[string]string{"Retry-After": "1"}, "", false},
		{"denied, no limit named", client.Decision{RetryAfter: 2 * time.Second}, nil, nil,
			429, map[string]string{"Retry-After": "2", "RateLimit": "", "RateLimit-Policy": ""}, "rate limited: retry after 2 s", false},
		{"denied, own limit handler", with(func(d *client.Decision) { d.RetryAfter = time.Second }), nil,
			[]client.MiddlewareOption{client.WithLimitHandler(jsonLimited)},
			429, map[string]string{"Retry-After": "1", "RateLimit": `"api";r=0;t=1`, "Cache-Control": "no-store", "Content-Type": "application/json"},
			`{"error":"rate_limited","limit":"api"}`, false},
		{"decider error, fail open", client.Decision{}, errors.New("boom"), nil,
			200, map[string]string{"RateLimit": "", "Retry-After": ""}, "hello", true},
		{"decider error, fail closed", client.Decision{}, errors.New("boom"), []client.MiddlewareOption{client.WithFailureMode(client.FailClosed)},
			503, map[string]string{"Retry-After": "1", "Cache-Control": "no-store"}, "unavailable", false},
		{"decider ErrInvalid", client.Decision{}, fmt.Errorf("%w: descriptors.user: too long", client.ErrInvalid),
			[]client.MiddlewareOption{client.WithFailureMode(client.FailClosed)},
			400, map[string]string{"Retry-After": ""}, "descriptors.user", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var gotDesc map[string]string
			var gotCost int64
			d := client.DeciderFunc(func(_ context.Context, desc map[string]string, cost int64) (client.Decision, error) {
				gotDesc, gotCost = desc, cost
				return tc.d, tc.err
			})
			next := &served{}
			h := client.Middleware(d, append([]client.MiddlewareOption{client.WithDescriptors(client.FromHeaders("X-Rl-"))}, tc.opts...)...)(next)
			req := httptest.NewRequest(http.MethodPost, "/", nil)
			req.Header.Set("X-Rl-Tenant", "t9")
			req.Header.Set("X-Rl-Api-Key", "k1")
			req.Header.Set("x-rl-cost", "2")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.code {
				t.Errorf("status = %d, want %d", rec.Code, tc.code)
			}
			for k, v := range tc.headers {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if !strings.Contains(rec.Body.String(), tc.body) {
				t.Errorf("body = %q, want it to contain %q", rec.Body.String(), tc.body)
			}
			if served := next.n.Load() == 1; served != tc.served {
				t.Errorf("served = %v, want %v", served, tc.served)
			}
			if tc.served && tc.err == nil && (next.last == nil || *next.last != tc.d) {
				t.Errorf("DecisionFromContext = %+v, want %+v", next.last, tc.d)
			}
			if gotCost != 2 || len(gotDesc) != 2 || gotDesc["tenant"] != "t9" || gotDesc["api_key"] != "k1" {
				t.Errorf("Decide got %v cost %d, want {tenant: t9, api_key: k1} cost 2", gotDesc, gotCost)
			}
		})
	}
}

func TestMiddlewareNilDecider(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Error("Middleware(nil) did not panic")
		}
	}()
	client.Middleware(nil)
}

func TestFailureModeString(t *testing.T) {
	for m, want := range map[client.FailureMode]string{client.FailOpen: "open", client.FailClosed: "closed", 7: "FailureMode(7)"} {
		if got := m.String(); got != want {
			t.Errorf("FailureMode(%d).String() = %q, want %q", int(m), got, want)
		}
	}
}

func TestExtractors(t *testing.T) {
	cases := []struct {
		name    string
		fn      client.DescriptorsFunc
		headers [][2]string
		want    map[string]string
		cost    int64
		err     string // "" when it succeeds
	}{
		{"header", client.FromHeader("X-Tenant", "tenant"), [][2]string{{"x-tenant", "t1"}}, map[string]string{"tenant": "t1"}, 1, ""},
		{"header, first value", client.FromHeader("X-Tenant", "tenant"), [][2]string{{"X-Tenant", "a"}, {"X-Tenant", "b"}}, map[string]string{"tenant": "a"}, 1, ""},
		{"header missing", client.FromHeader("X-Tenant", "tenant"), nil, nil, 0, "header X-Tenant: missing"},
		{"prefix", client.FromHeaders(""), [][2]string{{"X-Allot-Tenant", "t1"}, {"x-allot-api-key", "k"}, {"X-Allot-Cost", " 5 "}, {"X-Other", "no"}},
			map[string]string{"tenant": "t1", "api_key": "k"}, 5, ""},
		{"prefix alone is no descriptor", client.FromHeaders(""), [][2]string{{"X-Allot-", "x"}}, nil, 0, "none"},
		{"custom prefix", client.FromHeaders("X-Rl-"), [][2]string{{"X-Rl-Tenant", "t1"}, {"X-Allot-Tenant", "t2"}}, map[string]string{"tenant": "t1"}, 1, ""},
		{"negative cost", client.FromHeaders(""), [][2]string{{"X-Allot-Tenant", "t1"}, {"X-Allot-Cost", "-1"}}, nil, 0, "X-Allot-Cost"},
		{"cost header", client.CostFromHeader("X-Units"), [][2]string{{"X-Units", "12"}}, map[string]string{}, 12, ""},
		{"cost header absent", client.CostFromHeader("X-Units"), nil, map[string]string{}, 1, ""},
		{"cost header 0", client.CostFromHeader("X-Units"), [][2]string{{"X-Units", "0"}}, nil, 0, "X-Units"},
		{"cost header too big", client.CostFromHeader("X-Units"), [][2]string{{"X-Units", "99999999999999999999"}}, nil, 0, "X-Units"},
		{"merge", client.Merge(client.FromHeader("X-Tenant", "tenant"), client.FromHeader("X-User", "user"), client.CostFromHeader("X-Units")),
			[][2]string{{"X-Tenant", "t1"}, {"X-User", "7"}, {"X-Units", "4"}},
			map[string]string{"tenant": "t1", "user": "7"}, 4, ""},
		{"merge, same value twice", client.Merge(client.FromHeader("X-Tenant", "tenant"), client.FromHeaders("X-Allot-")),
			[][2]string{{"X-Tenant", "t1"}, {"X-Allot-Tenant", "t1"}, {"X-Allot-Cost", "2"}},
			map[string]string{"tenant": "t1"}, 2, ""},
		{"merge, first error", client.Merge(client.FromHeader("X-Tenant", "tenant"), client.FromHeader("X-User", "user")),
			[][2]string{{"X-Tenant", "t1"}}, nil, 0, "X-User"},
		{"merge, conflict", client.Merge(client.FromHeader("X-Tenant", "tenant"), client.FromHeader("X-Org", "tenant")),
			[][2]string{{"X-Tenant", "a"}, {"X-Org", "b"}}, nil, 0, "set twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			for _, h := range tc.headers {
				r.Header.Add(h[0], h[1])
			}
			d, cost, err := tc.fn(r)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("extract = %v, %d, %v; want an error containing %q", d, cost, err, tc.err)
				}
				return
			}
			if err != nil || cost != tc.cost || fmt.Sprint(d) != fmt.Sprint(tc.want) {
				t.Errorf("extract = %v, %d, %v; want %v, %d", d, cost, err, tc.want, tc.cost)
			}
		})
	}
	if client.DefaultHeaderPrefix != regional.DefaultHeaderPrefix {
		t.Errorf("DefaultHeaderPrefix = %q, regional's forward-auth reads %q", client.DefaultHeaderPrefix, regional.DefaultHeaderPrefix)
	}
}

// A decision denied only because the limiter's store is down and the limit
// fails closed is not the caller's excess: 503 with Retry-After, never 429,
// and no RateLimit fields.
func TestClosedIsNot429(t *testing.T) {
	d := client.DeciderFunc(func(context.Context, map[string]string, int64) (client.Decision, error) {
		return client.Decision{Limit: "login", Fallback: true, Closed: true, RetryAfter: time.Second, Quota: 1, Window: time.Minute}, nil
	})
	h := client.Middleware(d)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("handler ran") }))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-Allot-Tenant", "t1")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" || rec.Header().Get("RateLimit") != "" {
		t.Errorf("closed decision = %d %v, want 503 with Retry-After 1 and no RateLimit fields", rec.Code, rec.Header())
	}
}

// sfItem matches one Structured Field List member as draft -10 writes it:
// a String naming the policy, then parameters.
var (
	sfPolicy = regexp.MustCompile(`^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)";q=(\d{1,15});w=(\d{1,15})$`)
	sfLimit  = regexp.MustCompile(`^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)";r=(\d{1,15});t=(\d{1,15})$`)
)

// Whatever a Decider returns, the fields are valid Structured Fields naming
// the limit, or absent; and on a denial Retry-After is never earlier than t.
func FuzzRateLimitHeaders(f *testing.F) {
	f.Add("tenant", int64(5), int64(1), int64(0), int64(200), false)
	f.Add(`we"ird\`, int64(1<<62), int64(-1), int64(1<<40), int64(-5), true)
	f.Add("ünicode", int64(3), int64(60), int64(2), int64(0), true)
	f.Fuzz(func(t *testing.T, name string, quota, windowS, remaining, retryMS int64, allowed bool) {
		d := client.Decision{
			Allowed: allowed, Limit: name, Quota: quota, Remaining: remaining,
			Window:     time.Duration(windowS%1_000_000) * time.Second,
			RetryAfter: time.Duration(retryMS%1_000_000_000) * time.Millisecond,
			ResetAfter: time.Duration(retryMS%1_000_000_000) * time.Millisecond,
		}
		h := client.Middleware(client.DeciderFunc(func(context.Context, map[string]string, int64) (client.Decision, error) {
			return d, nil
		}), client.WithDescriptors(client.FromHeader("X-Tenant", "tenant")))(&served{})
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Tenant", "t")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		pol, lim := rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit")
		if (pol == "") != (lim == "") {
			t.Fatalf("RateLimit-Policy %q and RateLimit %q: one without the other", pol, lim)
		}
		if pol != "" {
			pm, lm := sfPolicy.FindStringSubmatch(pol), sfLimit.FindStringSubmatch(lim)
			if pm == nil || lm == nil {
				t.Fatalf("RateLimit-Policy %q, RateLimit %q: not draft -10 syntax", pol, lim)
			}
			unq := strings.NewReplacer(`\"`, `"`, `\\`, `\`)
			if unq.Replace(pm[1]) != name || lm[1] != pm[1] {
				t.Fatalf("fields name %q and %q, want %q", pm[1], lm[1], name)
			}
			if !allowed {
				var ra, tt int64
				_, _ = fmt.Sscan(rec.Header().Get("Retry-After"), &ra)
				_, _ = fmt.Sscan(lm[3], &tt)
				if ra < tt {
					t.Fatalf("Retry-After %d earlier than t=%d", ra, tt)
				}
			}
		}
		var retry int64
		_, _ = fmt.Sscan(rec.Header().Get("Retry-After"), &retry)
		if !allowed && (rec.Code != 429 || retry < 1) {
			t.Fatalf("denied: %d Retry-After %q, want 429 with Retry-After ≥ 1", rec.Code, rec.Header().Get("Retry-After"))
		}
	})
}
