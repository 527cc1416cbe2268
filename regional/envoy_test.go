package regional

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allot-dev/allot/gcra/keys"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy"
	"github.com/allot-dev/allot/policy/envoyconf"
)

const envoyTestConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /login*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /free
    rate_limit: {unlimited: true}
  - key: path
    value: /shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /closed
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, name: per-user}
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 4
      replaces: [{name: per-user}]
  - key: client
    value: web
    descriptors:
      - key: route
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: source
    value: bot*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: allowlisted
`

// envoyPod is a standalone pod (no etcd) on a real Redis with cfg loaded.
type envoyPod struct {
	s   *Service
	rs  *redistest.Server
	api rlsAPI
	reg *prometheus.Registry
}

func startEnvoyPod(t *testing.T, yaml string, opts EnvoyOptions, adjust func(*Config)) *envoyPod {
	t.Helper()
	rs := redistest.Start(t)
	rc := redis.NewClient(redistest.ClientOptions(rs.Addr))
	t.Cleanup(func() { _ = rc.Close() })
	store, err := redisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.Region, cfg.Store, cfg.Registerer = "us-east", store, reg
	cfg.StoreTimeout = 50 * time.Millisecond
	if adjust != nil {
		adjust(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	if s.Ready() {
		t.Error("a standalone pod without a configuration is ready")
	}
	p := &envoyPod{s: s, rs: rs, api: rlsAPI{s: s}, reg: reg}
	p.load(t, yaml, opts)
	wait.Until(t, 10*time.Second, func() error {
		if !s.Ready() {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	return p
}

func (p *envoyPod) load(t *testing.T, yaml string, opts EnvoyOptions) {
	t.Helper()
	f, err := envoyconf.ParseFile("config.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoyconf.Build([]*envoyconf.File{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.s.SetEnvoyConfig(cfg, opts); err != nil {
		t.Fatal(err)
	}
}

// desc builds an RLS descriptor from "k=v,k2=v2".
func desc(s string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// summary reads an answer as "OVERALL: code/remaining ...", a descriptor
// without a limit as "-", an unlimited one as "max".
func summary(r *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.GetOverallCode().String() + ":")
	for _, st := range r.GetStatuses() {
		b.WriteByte(' ')
		switch {
		case st.GetLimitRemaining() == math.MaxUint32 && st.GetCurrentLimit() == nil:
			b.WriteString("max")
		case st.GetCurrentLimit() == nil:
			b.WriteString("-")
		default:
			fmt.Fprintf(&b, "%s/%d", st.GetCode(), st.GetLimitRemaining())
		}
	}
	return b.String()
}

func (p *envoyPod) ask(t *testing.T, domain string, hits uint32, descs ...*ratelimitv3.RateLimitDescriptor) string {
	t.Helper()
	r, err := p.api.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s %v): %v", domain, descs, err)
	}
	return summary(r)
}

func TestEnvoySemantics(t *testing.T) {
	p := startEnvoyPod(t, envoyTestConfig, EnvoyOptions{}, nil)
	type step struct {
		name  string
		hits  uint32
		descs []string
		want  string
	}
	steps := []step{
		// A bare key: each value its own counter, 3 a minute.
		{"ip a 1", 0, []string{"remote_address=a"}, "OK: OK/2"},
		{"ip a 2", 0, []string{"remote_address=a"}, "OK: OK/1"},
		{"ip a 3", 0, []string{"remote_address=a"}, "OK: OK/0"},
		{"ip a over", 0, []string{"remote_address=a"}, "OVER_LIMIT: OVER_LIMIT/0"},
		{"ip b own counter", 0, []string{"remote_address=b"}, "OK: OK/2"},
		// Descriptors are counted independently: one over does not stop
		// the other from being charged.
		{"two descriptors", 0, []string{"remote_address=a", "remote_address=c"}, "OVER_LIMIT: OVER_LIMIT/0 OK/2"},
		// A wildcard value: every matching value its own counter.
		{"login", 0, []string{"path=/login"}, "OK: OK/1"},
		{"login/2fa own counter", 0, []string{"path=/login/2fa"}, "OK: OK/1"},
		{"login 2", 0, []string{"path=/login"}, "OK: OK/0"},
		{"login over", 0, []string{"path=/login"}, "OVER_LIMIT: OVER_LIMIT/0"},
		// Unlimited, unknown values and keys, whitelisted keys, unknown
		// domains.
		{"unlimited", 0, []string{"path=/free", "path=/free"}, "OK: max max"},
		{"unknown value", 0, []string{"path=/other"}, "OK: -"},
		{"unknown key", 0, []string{"nothing=1"}, "OK: -"},
		{"whitelisted", 0, []string{"allowlisted=yes"}, "OK: -"},
		// Shadow: over, but never OVER_LIMIT.
		{"shadow 1", 0, []string{"path=/shadow"}, "OK: OK/0"},
		{"shadow over", 0, []string{"path=/shadow"}, "OK: OK/0"},
		// Quota mode: a violation is reported as OK.
		{"quota 1", 0, []string{"path=/quota"}, "OK: OK/0"},
		{"quota over", 0, []string{"path=/quota"}, "OK: OK/0"},
		// requests_per_unit 0 admits nothing.
		{"zero", 0, []string{"path=/closed"}, "OVER_LIMIT: OVER_LIMIT/0"},
		// replaces: vip's limit replaces per-user's in the same request.
		{"user alone", 0, []string{"user=u1"}, "OK: OK/0"},
		{"user over", 0, []string{"user=u1"}, "OVER_LIMIT: OVER_LIMIT/0"},
		{"replaced", 0, []string{"user=u1", "vip=v1"}, "OK: - OK/3"},
		// Nested: the limit applies at the depth of the last entry only.
		{"nested too short", 0, []string{"client=web"}, "OK: -"},
		{"nested", 0, []string{"client=web,route=/a"}, "OK: OK/1"},
		{"nested other route", 0, []string{"client=web,route=/b"}, "OK: OK/1"},
		{"nested too deep", 0, []string{"client=web,route=/a,extra=1"}, "OK: -"},
		// hits_addend: the request's, a descriptor's own wins; above the
		// burst is over.
		{"hits 4", 4, []string{"tokens=t"}, "OK: OK/6"},
		{"hits 7 over", 7, []string{"tokens=t"}, "OVER_LIMIT: OVER_LIMIT/0"},
		{"hits 6", 6, []string{"tokens=t"}, "OK: OK/0"},
		{"hits above burst", 11, []string{"tokens=u"}, "OVER_LIMIT: OVER_LIMIT/0"},
		// share_threshold: every value the wildcard matches shares one
		// counter.
		{"bot1", 0, []string{"source=bot1"}, "OK: OK/1"},
		{"bot2 shares", 0, []string{"source=bot2"}, "OK: OK/0"},
		{"bot3 over", 0, []string{"source=bot3"}, "OVER_LIMIT: OVER_LIMIT/0"},
	}
	for _, s := range steps {
		var ds []*ratelimitv3.RateLimitDescriptor
		for _, d := range s.descs {
			ds = append(ds, desc(d))
		}
		if got := p.ask(t, "edge", s.hits, ds...); got != s.want {
			t.Errorf("%s: %s = %q, want %q", s.name, s.descs, got, s.want)
		}
	}
	if got := p.ask(t, "elsewhere", 0, desc("remote_address=a")); got != "OK: -" {
		t.Errorf("unknown domain = %q, want no limit", got)
	}
	// A descriptor's own hits_addend, 0 included (check only: never
	// charged).
	d := desc("tokens=v")
	d.HitsAddend = wrapperspb.UInt64(0)
	for range 3 {
		r, err := p.api.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 50, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("check only = %v, %v", r, err)
		}
	}
	d.HitsAddend = wrapperspb.UInt64(10)
	if got := p.ask(t, "edge", 50, d); got != "OK: OK/0" {
		t.Errorf("descriptor hits_addend 10 after checks = %q, want OK/0 (checks charged nothing)", got)
	}
	// The decisions metric names each limit by its path.
	if got := testutil.ToFloat64(p.s.m.decisions.WithLabelValues("edge.remote_address", "us-east", "denied")); got != 2 {
		t.Errorf("denied for edge.remote_address = %v, want 2", got)
	}
	if got := testutil.ToFloat64(p.s.m.decisions.WithLabelValues("edge.path_/shadow", "us-east", "shadow_denied")); got != 1 {
		t.Errorf("shadow_denied for edge.path_/shadow = %v, want 1", got)
	}
	// And the original's metrics, under its names and labels.
	for _, c := range []struct {
		v          *prometheus.CounterVec
		key1, key2 string
		want       float64
	}{
		{p.s.m.envoyTotal, "remote_address", "", 7},
		{p.s.m.envoyWithin, "remote_address", "", 5},
		{p.s.m.envoyOver, "remote_address", "", 2},
		{p.s.m.envoyOver, "path_/shadow", "", 1},
		{p.s.m.envoyShadow, "path_/shadow", "", 1},
		{p.s.m.envoyTotal, "client_web", "route", 2},
		{p.s.m.envoyTotal, "tokens", "", 4 + 7 + 6 + 11 + 0 + 10},
	} {
		if got := testutil.ToFloat64(c.v.WithLabelValues("edge", c.key1, c.key2)); got != c.want {
			t.Errorf("{key1=%q,key2=%q} = %v, want %v", c.key1, c.key2, got, c.want)
		}
	}
}

func TestEnvoyRequestLimit(t *testing.T) {
	p := startEnvoyPod(t, envoyTestConfig, EnvoyOptions{}, nil)
	d := desc("remote_address=z")
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	for i, want := range []string{"OK: OK/0", "OVER_LIMIT: OVER_LIMIT/0"} {
		if got := p.ask(t, "edge", 0, d); got != want {
			t.Errorf("request limit 1/h, call %d = %q, want %q", i, got, want)
		}
	}
	r, _ := p.api.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if cl := r.GetStatuses()[0].GetCurrentLimit(); cl.GetRequestsPerUnit() != 1 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Errorf("current limit = %v, want the request's 1/HOUR", cl)
	}
	// Only for known domains, as the original.
	if got := p.ask(t, "elsewhere", 0, d); got != "OK: -" {
		t.Errorf("request limit in an unknown domain = %q, want no limit", got)
	}
	d.Limit.Unit = typev3.RateLimitUnit_UNKNOWN
	_, err := p.api.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a=b"), d}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[1].limit") {
		t.Errorf("unknown unit: %v, want InvalidArgument naming descriptors[1].limit", err)
	}
}

func TestEnvoyBadRequests(t *testing.T) {
	p := startEnvoyPod(t, envoyTestConfig, EnvoyOptions{}, nil)
	long := desc("k=" + strings.Repeat("x", maxEnvoyValue))
	many := &ratelimitv3.RateLimitDescriptor{}
	for i := range maxEnvoyEntries + 1 {
		many.Entries = append(many.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: fmt.Sprint(i), Value: "v"})
	}
	for _, c := range []struct {
		r    *rlsv3.RateLimitRequest
		want string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a=b")}}, "domain"},
		{&rlsv3.RateLimitRequest{Domain: "edge"}, "descriptors"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address=q"), long}}, "descriptors[1].entries[0]"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{many}}, "descriptors[0].entries"},
	} {
		_, err := p.api.ShouldRateLimit(context.Background(), c.r)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want InvalidArgument naming %s", c.r, err, c.want)
		}
	}
	// A refused request charged nothing.
	if got := p.ask(t, "edge", 0, desc("remote_address=q")); got != "OK: OK/2" {
		t.Errorf("after refused requests = %q, want the first charge", got)
	}
	// Global limits need the coordinator, hence etcd.
	cfg := p.s.EnvoyConfig()
	if err := p.s.SetEnvoyConfig(cfg, EnvoyOptions{Global: map[string]envoyconf.Global{"edge.path_/free": {Tenant: "t"}}}); err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Errorf("a global limit on a pod without etcd: %v, want an error naming etcd", err)
	}
}

func TestEnvoyOptions(t *testing.T) {
	p := startEnvoyPod(t, envoyTestConfig, EnvoyOptions{ShadowMode: true, Headers: true, ResetHeader: "X-Reset"}, nil)
	var r *rlsv3.RateLimitResponse
	for range 4 {
		var err error
		r, err = p.api.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address=s"), desc("path=/free")}})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Global shadow mode: the statuses tell, the answer is OK.
	if got := summary(r); got != "OK: OVER_LIMIT/0 max" {
		t.Errorf("shadow mode answer = %q", got)
	}
	h := map[string]string{}
	for _, hv := range r.GetResponseHeadersToAdd() {
		h[hv.GetKey()] = hv.GetValue()
	}
	if h["RateLimit-Limit"] != "3" || h["RateLimit-Remaining"] != "0" || h["X-Reset"] != "20" {
		// 3 a minute: one unit comes back every 20 s.
		t.Errorf("headers = %v, want limit 3, remaining 0, X-Reset 20", h)
	}
}

func TestEnvoyReloadKeepsCounters(t *testing.T) {
	p := startEnvoyPod(t, envoyTestConfig, EnvoyOptions{}, nil)
	p.ask(t, "edge", 0, desc("remote_address=r"))
	p.ask(t, "edge", 0, desc("remote_address=r"))
	// The same limit in a new configuration continues from the counter.
	p.load(t, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 3}\n", EnvoyOptions{})
	if got := p.ask(t, "edge", 0, desc("remote_address=r")); got != "OK: OK/0" {
		t.Errorf("after reload = %q, want the third of 3", got)
	}
	if got := p.ask(t, "edge", 0, desc("path=/login")); got != "OK: -" {
		t.Errorf("a limit the new configuration dropped = %q, want none", got)
	}
	if err := p.s.SetEnvoyConfig(nil, EnvoyOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := p.api.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a=b")}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("standalone without a configuration: %v, want Unavailable", err)
	}
}

// TestEnvoyBound hammers one second-unit limit from several goroutines:
// GCRA never admits more than the burst plus the rate for the time
// elapsed, and admits about that much (no fixed window doubles it).
func TestEnvoyBound(t *testing.T) {
	// A generous store timeout: a fallback decision (its own local bucket)
	// is not what this test bounds.
	p := startEnvoyPod(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 20}\n", EnvoyOptions{}, func(c *Config) {
		c.StoreTimeout = 2 * time.Second
	})
	var mu sync.Mutex
	admitted := 0
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Since(start) < 1500*time.Millisecond {
				r, err := p.api.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k=1")}})
				if err != nil {
					t.Error(err)
					return
				}
				if r.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	var fb float64
	for _, reason := range []string{"timeout", "breaker_open", "unavailable", "error"} {
		fb += testutil.ToFloat64(p.s.m.fallback.WithLabelValues("d.k", "us-east", reason))
	}
	if fb > 0 {
		t.Fatalf("%v fallback decisions: the store timed out, the bound below is not the store's", fb)
	}
	bound := 20 + 20*el
	if float64(admitted) > bound+1 {
		t.Errorf("admitted %d in %.2fs, above burst + rate·t = %.1f", admitted, el, bound)
	}
	if float64(admitted) < 20+20*1.3 {
		t.Errorf("admitted %d in %.2fs, want about %.0f", admitted, el, bound)
	}
}

func TestEnvoyStoreFailure(t *testing.T) {
	const yaml = "domain: edge\ndescriptors:\n  - key: fast\n    rate_limit: {unit: second, requests_per_unit: 50}\n  - key: free\n    rate_limit: {unlimited: true}\n"
	for _, closed := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail_closed=%v", closed), func(t *testing.T) {
			p := startEnvoyPod(t, yaml, EnvoyOptions{FailClosed: closed}, func(c *Config) {
				c.StoreTimeout = 20 * time.Millisecond
			})
			if got := p.ask(t, "edge", 0, desc("fast=f")); got != "OK: OK/49" {
				t.Fatalf("healthy = %q", got)
			}
			p.rs.Pause(t)
			defer p.rs.Resume(t)
			// Open: the local limiter's bucket starts empty (Redis may
			// have spent the burst) and refills at 50/s for this one pod.
			// Closed: every decision denies.
			asked, admitted := 0, 0
			wait.Until(t, 3*time.Second, func() error {
				asked++
				if got := p.ask(t, "edge", 0, desc("fast=f")); strings.HasPrefix(got, "OK:") {
					admitted++
				}
				if closed && asked < 20 || !closed && admitted == 0 {
					return fmt.Errorf("asked %d, admitted %d", asked, admitted)
				}
				return nil
			})
			if closed && admitted > 0 {
				t.Errorf("fail closed admitted %d of %d", admitted, asked)
			}
			if got := p.ask(t, "edge", 0, desc("free=1")); got != "OK: max" {
				t.Errorf("unlimited while the store is paused = %q", got)
			}
			var n float64
			for _, reason := range []string{"timeout", "breaker_open"} {
				n += testutil.ToFloat64(p.s.m.fallback.WithLabelValues("edge.fast", "us-east", reason))
			}
			if n != float64(asked) {
				t.Errorf("fallback decisions for edge.fast = %v, want %d", n, asked)
			}
		})
	}
}

// envoyKeyReference is envoyKey as keys.Key builds it: the reference the
// one-pass envoyKey must equal.
func envoyKeyReference(prefix, domain string, es []envoyconf.Entry, limit string) string {
	var b strings.Builder
	if prefix != "" {
		b.WriteString(keys.Escape(prefix) + ":")
	}
	b.WriteString(keys.Escape(domain))
	for _, e := range es {
		b.WriteString(":" + keys.Escape(e.Key) + "=" + keys.Escape(e.Value))
	}
	k, _ := keys.Key(b.String(), limit)
	return k
}

func FuzzEnvoyKey(f *testing.F) {
	f.Add("", "edge", "remote_address", "10.0.0.1", "path", "/a:b=c%d{e}")
	f.Add("p:x", "dom ain", "k", "", "ключ", "\x00\xff")
	f.Fuzz(func(t *testing.T, prefix, domain, k1, v1, k2, v2 string) {
		es := []envoyconf.Entry{{Key: k1, Value: v1}, {Key: k2, Value: v2}}
		got, want := envoyKey(prefix, domain, es, "envoy"), envoyKeyReference(prefix, domain, es, "envoy")
		if o, w := envoyKey(prefix, domain, es, "envoy-5-MINUTE"), envoyKeyReference(prefix, domain, es, "envoy-5-MINUTE"); o != w || o == got {
			t.Fatalf("override key %q, want %q, distinct from %q", o, w, got)
		}
		if got != want {
			t.Fatalf("envoyKey = %q, want %q", got, want)
		}
		parts, err := keys.Parse(got)
		if err != nil || parts.Limit != "envoy" {
			t.Fatalf("Parse(%q) = %+v, %v", got, parts, err)
		}
		// Distinct descriptors never share a key.
		if other := envoyKey(prefix, domain, []envoyconf.Entry{{Key: k1, Value: v1 + k2}, {Key: "", Value: v2}}, "envoy"); other == got && k2 != "" {
			t.Fatalf("%v and a different descriptor share key %q", es, got)
		}
	})
}

// TestEnvoyGlobalLimit marks one limit of an envoyproxy/ratelimit
// configuration global: two regions of two pods each (a store per region)
// hammer it at once, and together they admit no more than its tenant's
// global budget R·t + B, and most of it; a per-value limit beside it stays
// per region. Bad mappings are refused, naming the limit.
func TestEnvoyGlobalLimit(t *testing.T) {
	const R, B = 40.0, 20
	r := newEventsRig(t, []string{"us-east", "eu-west"}, map[string]int{"us-east": 2, "eu-west": 2})
	r.budget(t, "edge-api", policy.Budget{Rate: "40/s", Burst: B}, R)
	f, err := envoyconf.ParseFile("config.yaml", []byte(`domain: edge
descriptors:
  - key: path
    value: /api
    rate_limit: {unit: second, requests_per_unit: 40}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoyconf.Build([]*envoyconf.File{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	var pods []*pod
	for _, ps := range r.pods {
		pods = append(pods, ps...)
	}
	for _, c := range []struct {
		global map[string]envoyconf.Global
		want   string
	}{
		// Counted per user, and the policy has no global limit per user.
		{map[string]envoyconf.Global{"edge.user": {Tenant: "edge-api"}}, `global limit "edge.user": tenant: tenant edge-api's policy has no global limit`},
		{map[string]envoyconf.Global{"edge.path_/nope": {Tenant: "edge-api"}}, "no such limit"},
		{map[string]envoyconf.Global{"edge.path_/api": {Tenant: "bad/tenant"}}, "tenant"},
	} {
		if err := pods[0].s.SetEnvoyConfig(cfg, EnvoyOptions{Only: true, Global: c.global}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Global %v: %v, want an error saying %q", c.global, err, c.want)
		}
	}
	if pods[0].s.EnvoyConfig() != nil {
		t.Error("a refused configuration was set")
	}
	for _, p := range pods {
		if err := p.s.SetEnvoyConfig(cfg, EnvoyOptions{Only: true, Global: map[string]envoyconf.Global{"edge.path_/api": {Tenant: "edge-api"}}}); err != nil {
			t.Fatal(err)
		}
	}
	var admitted, users atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, p := range pods {
		api := rlsAPI{s: p.s}
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := api.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("path=/api"), desc("user=u1")}})
				if err != nil {
					t.Error(err)
					return
				}
				if resp.GetStatuses()[0].GetCode() == rlsv3.RateLimitResponse_OK {
					admitted.Add(1)
				}
				if resp.GetStatuses()[1].GetCode() == rlsv3.RateLimitResponse_OK {
					users.Add(1)
				}
				select {
				case <-ctx.Done():
				case <-time.After(2 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	got := float64(admitted.Load())
	if most := R*el + B; got > most {
		t.Errorf("four pods in two regions admitted %v of the global limit in %.2f s, more than R·t + B = %.1f", got, el, most)
	}
	if got < 0.6*R*el {
		t.Errorf("admitted %v of the global limit in %.2f s, under 60%% of R·t = %.0f: the regions' shares do not add up to the budget", got, el, R*el)
	}
	// The per-value limit is each region's own (1000/s in each): not shared.
	if u := users.Load(); u < int64(got)*3/2 {
		t.Errorf("the regional per-user limit admitted %d, want far more than the global one's %v", u, got)
	}
	t.Logf("global limit: %v admitted in %.2f s (R·t + B = %.1f); regional per-user limit: %d", got, el, R*el+B, users.Load())
}

// TestEnvoyLyingCallers: a hits_addend beyond any int64 is over the limit
// (not a negative cost, not a crash), and a descriptor's own limit never
// resets the configured limit on the same entries.
func TestEnvoyLyingCallers(t *testing.T) {
	p := startEnvoyPod(t, envoyTestConfig, EnvoyOptions{}, nil)
	d := desc("remote_address=liar")
	d.HitsAddend = wrapperspb.UInt64(1 << 63)
	if got := p.ask(t, "edge", 0, d); got != "OVER_LIMIT: OVER_LIMIT/0" {
		t.Errorf("hits_addend 2^63 = %q, want over the limit", got)
	}
	d.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	if got := p.ask(t, "edge", 0, d); got != "OVER_LIMIT: OVER_LIMIT/0" {
		t.Errorf("hits_addend 2^64-1 = %q, want over the limit", got)
	}
	// 3 a minute configured; between its requests, the same entries with
	// a limit of their own (1 a second), which must not restate the
	// configured counter.
	own := desc("remote_address=shared")
	own.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}
	var got []string
	for range 5 {
		got = append(got, p.ask(t, "edge", 0, desc("remote_address=shared")))
		p.ask(t, "edge", 0, own)
	}
	if want := "OK: OK/2,OK: OK/1,OK: OK/0,OVER_LIMIT: OVER_LIMIT/0,OVER_LIMIT: OVER_LIMIT/0"; strings.Join(got, ",") != want {
		t.Errorf("configured limit between overrides = %v, want %s", got, want)
	}
}

// With ChargeOverLimit, check-then-charge is bounded: a check (hits_addend
// 0) answers from the key, OK while it is within its limit (with what is
// left), and hits that do not fit are charged anyway, as debt past the
// burst, so the next check is over until the debt is paid; but never more
// than one window past the limit (as the original forgets at a window's
// end). Without it a check is always OK (TestEnvoySemantics).
func TestEnvoyChargeOverLimit(t *testing.T) {
	p := startEnvoyPod(t, envoyTestConfig, EnvoyOptions{ChargeOverLimit: true}, nil)
	check := func() *ratelimitv3.RateLimitDescriptor {
		d := desc("tokens=c")
		d.HitsAddend = wrapperspb.UInt64(0)
		return d
	}
	charge := func(n uint64) *ratelimitv3.RateLimitDescriptor {
		d := desc("tokens=c")
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	// 10 a minute: a unit every 6 s; the debt's cap, a window past the
	// limit, is 20 units owed (120 s until full).
	steps := []struct {
		name string
		d    *ratelimitv3.RateLimitDescriptor
		want string
	}{
		{"a check of a fresh key", check(), "OK: OK/10"},
		{"a check charges nothing", check(), "OK: OK/10"},
		{"the stream's real cost, 6 of 10", charge(6), "OK: OK/4"},
		{"a check after it", check(), "OK: OK/4"},
		{"a cost of 9 that does not fit: charged anyway (15 owed)", charge(9), "OVER_LIMIT: OVER_LIMIT/0"},
		{"a check, 5 units past the limit", check(), "OVER_LIMIT: OVER_LIMIT/0"},
		{"one more hit: over, and charged (16 owed)", charge(1), "OVER_LIMIT: OVER_LIMIT/0"},
		{"a cost above the burst: charged up to the cap (20 owed)", charge(25), "OVER_LIMIT: OVER_LIMIT/0"},
		{"past the cap: not charged", charge(3), "OVER_LIMIT: OVER_LIMIT/0"},
	}
	for _, s := range steps {
		if got := p.ask(t, "edge", 1, s.d); got != s.want {
			t.Fatalf("%s: %q, want %q", s.name, got, s.want)
		}
	}
	// 20 units owed: the check waits one window (60 s) to be within the
	// limit again, however much more was sent.
	r, err := p.api.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{check()}})
	if err != nil {
		t.Fatal(err)
	}
	if wait := r.GetStatuses()[0].GetDurationUntilReset().AsDuration(); wait < 55*time.Second || wait > 60*time.Second {
		t.Errorf("the check's wait with the debt at its cap: %v, want just under a minute (one window past the limit)", wait)
	}
	for result, want := range map[string]float64{"charged": 3, "capped": 1} {
		if got := testutil.ToFloat64(p.s.m.charges.WithLabelValues(result)); got != want {
			t.Errorf("allot_charges_total{result=%s} = %v, want %v", result, got, want)
		}
	}
}

// With ChargeOverLimit, a check the store cannot answer admits (a check
// spends nothing) unless its limit fails closed, and is counted as a
// fallback decision either way.
func TestEnvoyCheckStoreFailure(t *testing.T) {
	for _, closed := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail_closed=%v", closed), func(t *testing.T) {
			p := startEnvoyPod(t, envoyTestConfig, EnvoyOptions{ChargeOverLimit: true, FailClosed: closed}, func(c *Config) {
				c.StoreTimeout = 20 * time.Millisecond
			})
			d := desc("tokens=f")
			d.HitsAddend = wrapperspb.UInt64(0)
			if got := p.ask(t, "edge", 1, d); got != "OK: OK/10" {
				t.Fatalf("healthy check = %q", got)
			}
			p.rs.Pause(t)
			defer p.rs.Resume(t)
			want := "OK:"
			if closed {
				want = "OVER_LIMIT:"
			}
			if got := p.ask(t, "edge", 1, d); !strings.HasPrefix(got, want) {
				t.Errorf("check while Redis is paused = %q, want %s", got, want)
			}
			var n float64
			for _, reason := range []string{"timeout", "breaker_open", "unavailable", "error"} {
				n += testutil.ToFloat64(p.s.m.fallback.WithLabelValues("edge.tokens", "us-east", reason))
			}
			if n != 1 {
				t.Errorf("fallback decisions for edge.tokens = %v, want 1 (the check)", n)
			}
		})
	}
}
