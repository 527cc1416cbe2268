package envoyxds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy/envoyconf"
)

const within = 10 * time.Second

// request is what the server saw of one DiscoveryRequest.
type request struct {
	at  time.Time
	req *discoveryv3.DiscoveryRequest
}

// xdsServer is go-control-plane's ADS server with a snapshot cache, on a
// loopback port.
type xdsServer struct {
	addr  string
	cache cachev3.SnapshotCache
	stop  func()

	mu      sync.Mutex
	reqs    []request
	headers []metadata.MD // incoming metadata of each stream
}

func startServer(t *testing.T, addr string) *xdsServer {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	x := &xdsServer{addr: lis.Addr().String(), cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			x.mu.Lock()
			x.headers = append(x.headers, md.Copy())
			x.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
			x.mu.Lock()
			x.reqs = append(x.reqs, request{time.Now(), proto.Clone(r).(*discoveryv3.DiscoveryRequest)})
			x.mu.Unlock()
			return nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, x.cache, cb))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	var once sync.Once
	x.stop = func() {
		once.Do(func() {
			gs.Stop()
			cancel()
			<-done
		})
	}
	t.Cleanup(x.stop)
	return x
}

func (x *xdsServer) set(t *testing.T, node, version string, rs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(rs))
	for i, r := range rs {
		res[i] = r
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

func (x *xdsServer) requests() []request {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.reqs)
}

// nacks returns the NACKs the server received.
func (x *xdsServer) nacks() []request {
	var out []request
	for _, r := range x.requests() {
		if r.req.GetErrorDetail() != nil {
			out = append(out, r)
		}
	}
	return out
}

// applied records the configurations a Subscriber applied.
type applied struct {
	t   *testing.T
	mu  sync.Mutex
	cfg []*envoyconf.Config
	err error // returned by apply
}

func (a *applied) apply(c *envoyconf.Config) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c == nil {
		a.t.Error("apply called with nil")
	}
	if a.err != nil {
		return a.err
	}
	a.cfg = append(a.cfg, c)
	return nil
}

func (a *applied) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.cfg)
}

func (a *applied) last() *envoyconf.Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cfg) == 0 {
		return nil
	}
	return a.cfg[len(a.cfg)-1]
}

// logs records log lines.
type logs struct {
	mu    sync.Mutex
	lines []slog.Record
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.lines = append(l.lines, r)
	l.mu.Unlock()
	return nil
}
func (l *logs) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logs) WithGroup(string) slog.Handler      { return l }

// count returns how many lines hold msg, at each level.
func (l *logs) count(msg string) map[slog.Level]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[slog.Level]int{}
	for _, r := range l.lines {
		if strings.Contains(r.Message, msg) {
			out[r.Level]++
		}
	}
	return out
}

func testConfig(addr string, l *logs, reg prometheus.Registerer) Config {
	c := DefaultConfig()
	c.ServerURL = addr
	c.NodeID = "rls-test"
	c.NodeMetadata = map[string]string{"region": "eu-1", "pod": "rls-0"}
	c.Headers = map[string]string{"Authorization": "Bearer t0ken"}
	c.RetryInterval = 30 * time.Millisecond
	c.BackoffInitial = 5 * time.Millisecond
	c.BackoffMax = 40 * time.Millisecond
	c.Logger = slog.New(l)
	c.Registerer = reg
	return c
}

// run starts s.Run and returns a stop that cancels it and checks it
// returned nil.
func run(t *testing.T, s *Subscriber, apply func(*envoyconf.Config) error) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, apply) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v, want nil", err)
				}
			case <-time.After(within):
				t.Error("Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func metric(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if result != "" && !hasLabel(m, "result", result) {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s{result=%q} not found", name, result)
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

func edge(n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		desc("path", "/api", policy(rlsconfv3.RateLimitUnit_MINUTE, n)),
	}}
}

func limitOf(c *envoyconf.Config, domain string, entries ...envoyconf.Entry) (uint32, error) {
	if c == nil {
		return 0, errors.New("nothing applied")
	}
	m, ok := c.Match(domain, entries)
	if !ok {
		return 0, fmt.Errorf("no limit for %s %v (domains %v)", domain, entries, c.Domains())
	}
	return m.Limit.RequestsPerUnit, nil
}

// TestSubscriberLifecycle follows one server through updates, a rejected
// update, its going away and a new server in its place.
func TestSubscriberLifecycle(t *testing.T) {
	x := startServer(t, "127.0.0.1:0")
	var l logs
	reg := prometheus.NewRegistry()
	s, err := New(testConfig(x.addr, &l, reg))
	if err != nil {
		t.Fatal(err)
	}
	if v := s.Version(); v != "" {
		t.Fatalf("Version before Run %q, want empty", v)
	}
	a := &applied{t: t}
	stop := run(t, s, a.apply)
	api := envoyconf.Entry{Key: "path", Value: "/api"}

	// Version 1.
	x.set(t, "rls-test", "1", edge(10))
	wait.Until(t, within, func() error {
		if v := s.Version(); v != "1" {
			return fmt.Errorf("version %q, want 1", v)
		}
		return nil
	})
	if n, err := limitOf(a.last(), "edge", api); err != nil || n != 10 {
		t.Fatalf("v1: limit %d, %v; want 10", n, err)
	}
	wait.Until(t, within, func() error { // the ACK
		for _, r := range x.requests() {
			if r.req.GetVersionInfo() == "1" && r.req.GetResponseNonce() != "" && r.req.GetErrorDetail() == nil {
				return nil
			}
		}
		return errors.New("no ACK of version 1")
	})
	first := x.requests()[0].req
	if first.GetTypeUrl() != resource.RateLimitConfigType || first.GetTypeUrl() != TypeURL {
		t.Errorf("type_url %q, want %q", first.GetTypeUrl(), resource.RateLimitConfigType)
	}
	if first.GetNode().GetId() != "rls-test" || len(first.GetResourceNames()) != 0 || first.GetVersionInfo() != "" {
		t.Errorf("first request: node %q, names %v, version %q; want rls-test, wildcard, empty", first.GetNode().GetId(), first.GetResourceNames(), first.GetVersionInfo())
	}
	md := first.GetNode().GetMetadata().GetFields()
	if md["region"].GetStringValue() != "eu-1" || md["pod"].GetStringValue() != "rls-0" {
		t.Errorf("node metadata %v, want region=eu-1 pod=rls-0", md)
	}
	x.mu.Lock()
	if got := x.headers[0].Get("authorization"); !slices.Equal(got, []string{"Bearer t0ken"}) {
		t.Errorf("authorization header %v, want [Bearer t0ken]", got)
	}
	x.mu.Unlock()
	if got := metric(t, reg, "allot_envoy_xds_connected", ""); got != 1 {
		t.Errorf("connected %v, want 1", got)
	}

	// Version 2: a changed limit and a second domain.
	mail := &rlsconfv3.RateLimitConfig{Name: "mail", Domain: "mail", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		desc("to", "", policy(rlsconfv3.RateLimitUnit_DAY, 500)),
	}}
	x.set(t, "rls-test", "2", edge(20), mail)
	wait.Until(t, within, func() error {
		if v := s.Version(); v != "2" {
			return fmt.Errorf("version %q, want 2", v)
		}
		return nil
	})
	v2 := a.last()
	if n, err := limitOf(v2, "edge", api); err != nil || n != 20 {
		t.Fatalf("v2: edge limit %d, %v; want 20", n, err)
	}
	if n, err := limitOf(v2, "mail", envoyconf.Entry{Key: "to", Value: "bob"}); err != nil || n != 500 {
		t.Fatalf("v2: mail limit %d, %v; want 500", n, err)
	}
	if a.count() != 2 {
		t.Fatalf("applied %d times, want 2", a.count())
	}

	// Version 3 is invalid: NACKed with the last applied version, apply
	// not called, version 2 kept.
	bad := &rlsconfv3.RateLimitConfig{Name: "broken", Domain: "broken", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		desc("k", "", policy(rlsconfv3.RateLimitUnit_UNKNOWN, 1)),
	}}
	x.set(t, "rls-test", "3", edge(30), mail, bad)
	wait.Until(t, within, func() error {
		// The snapshot cache answers each NACK by resending version 3:
		// the second and later NACKs wait RetryInterval.
		if n := len(x.nacks()); n < 3 {
			return fmt.Errorf("%d NACKs, want 3", n)
		}
		return nil
	})
	nacks := x.nacks()
	for _, r := range nacks {
		if r.req.GetVersionInfo() != "2" || r.req.GetResponseNonce() == "" {
			t.Errorf("NACK version %q nonce %q, want the last applied version 2 and the response's nonce", r.req.GetVersionInfo(), r.req.GetResponseNonce())
		}
		if msg := r.req.GetErrorDetail().GetMessage(); !strings.Contains(msg, "xds:broken") || !strings.Contains(msg, "descriptors[0].rate_limit.unit") {
			t.Errorf("NACK message %q, want the resource and the field", msg)
		}
	}
	if gap := nacks[2].at.Sub(nacks[1].at); gap < 30*time.Millisecond {
		t.Errorf("NACKs of a resent configuration %v apart, want at least RetryInterval (30ms)", gap)
	}
	if v := s.Version(); v != "2" || a.count() != 2 || a.last() != v2 {
		t.Fatalf("after the NACK: version %q, %d applied; want 2 and 2", v, a.count())
	}
	if got := metric(t, reg, "allot_envoy_xds_updates_total", "rejected"); got < 3 {
		t.Errorf("rejected %v, want at least 3", got)
	}
	if got := metric(t, reg, "allot_envoy_xds_updates_total", "applied"); got != 2 {
		t.Errorf("applied %v, want 2", got)
	}
	if got := l.count("rejected the xDS configuration"); got[slog.LevelError] != 1 {
		t.Errorf("rejection lines by level %v, want one error line for one version", got)
	}

	// The server goes away: no apply, Run keeps retrying.
	x.stop()
	wait.Until(t, within, func() error {
		if got := l.count("unavailable"); got[slog.LevelWarn]+got[slog.LevelDebug] < 4 {
			return fmt.Errorf("%v unavailable lines, want 4 tries", got)
		}
		return nil
	})
	if got := l.count("unavailable"); got[slog.LevelWarn] != 1 {
		t.Errorf("unavailable lines by level %v, want one warning (the others held back)", got)
	}
	if got := metric(t, reg, "allot_envoy_xds_connected", ""); got != 0 {
		t.Errorf("connected %v while the server is away, want 0", got)
	}
	if got := metric(t, reg, "allot_envoy_xds_retries_total", ""); got < 4 {
		t.Errorf("allot_envoy_xds_retries_total %v after four failed tries, want ≥ 4", got)
	}
	if v := s.Version(); v != "2" || a.count() != 2 {
		t.Fatalf("server away: version %q, %d applied; want 2 and 2", v, a.count())
	}

	// A new server on the same address, with version 4.
	y := startServer(t, x.addr)
	y.set(t, "rls-test", "4", edge(40))
	wait.Until(t, within, func() error {
		if v := s.Version(); v != "4" {
			return fmt.Errorf("version %q, want 4", v)
		}
		return nil
	})
	if n, err := limitOf(a.last(), "edge", api); err != nil || n != 40 {
		t.Fatalf("v4: limit %d, %v; want 40", n, err)
	}
	if a.last().HasDomain("mail") {
		t.Error("v4 still has the mail domain")
	}
	if got := y.requests()[0].req.GetVersionInfo(); got != "2" {
		t.Errorf("first request to the new server has version %q, want the last applied 2", got)
	}
	if got := metric(t, reg, "allot_envoy_xds_connected", ""); got != 1 {
		t.Errorf("connected %v, want 1", got)
	}
	stop()
	if got := metric(t, reg, "allot_envoy_xds_connected", ""); got != 0 {
		t.Errorf("connected %v after Run returned, want 0", got)
	}
}

// TestSubscriberWaitsForServer: nothing listens at first; the
// subscriber retries until a server comes.
func TestSubscriberWaitsForServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	var l logs
	s, err := New(testConfig(addr, &l, nil))
	if err != nil {
		t.Fatal(err)
	}
	a := &applied{t: t}
	run(t, s, a.apply)
	wait.Until(t, within, func() error {
		if got := l.count("unavailable"); got[slog.LevelWarn]+got[slog.LevelDebug] < 3 {
			return fmt.Errorf("%v unavailable lines, want 3 tries", got)
		}
		return nil
	})
	if a.count() != 0 {
		t.Fatalf("applied %d times with no server", a.count())
	}
	x := startServer(t, addr)
	x.set(t, "rls-test", "7", edge(1))
	wait.Until(t, within, func() error {
		if v := s.Version(); v != "7" {
			return fmt.Errorf("version %q, want 7", v)
		}
		return nil
	})
}

// TestSubscriberResponses: what one response leads to.
func TestSubscriberResponses(t *testing.T) {
	sameDomain := func(name, key string) *rlsconfv3.RateLimitConfig {
		return &rlsconfv3.RateLimitConfig{Name: name, Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			desc(key, "", policy(rlsconfv3.RateLimitUnit_SECOND, 3)),
		}}
	}
	cases := []struct {
		name      string
		resources []*rlsconfv3.RateLimitConfig
		merge     bool
		applyErr  error
		nack      string   // the NACK's message holds it; "" when applied
		domains   []string // of the applied config
	}{
		{name: "two domains", resources: []*rlsconfv3.RateLimitConfig{edge(1), {Name: "mail", Domain: "mail"}}, domains: []string{"edge", "mail"}},
		{name: "no resource", domains: []string{}},
		{name: "one domain in two resources", resources: []*rlsconfv3.RateLimitConfig{sameDomain("a", "x"), sameDomain("b", "y")}, nack: "xds:b: domain: duplicate domain 'edge'"},
		{name: "merged", resources: []*rlsconfv3.RateLimitConfig{sameDomain("a", "x"), sameDomain("b", "y")}, merge: true, domains: []string{"edge"}},
		{name: "merged duplicate key", resources: []*rlsconfv3.RateLimitConfig{sameDomain("a", "x"), sameDomain("b", "x")}, merge: true, nack: "duplicate descriptor composite key 'edge.x'"},
		{name: "apply fails", resources: []*rlsconfv3.RateLimitConfig{edge(1)}, applyErr: errors.New("store down"), nack: "apply: store down"},
		{name: "empty domain", resources: []*rlsconfv3.RateLimitConfig{{Name: "nodomain"}}, nack: "xds:nodomain: domain: config file cannot have empty domain"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			x := startServer(t, "127.0.0.1:0")
			x.set(t, "rls-test", "1", tc.resources...)
			var l logs
			reg := prometheus.NewRegistry()
			cfg := testConfig(x.addr, &l, reg)
			cfg.Merge = tc.merge
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			a := &applied{t: t, err: tc.applyErr}
			stop := run(t, s, a.apply)
			if tc.nack == "" {
				wait.Until(t, within, func() error {
					if v := s.Version(); v != "1" {
						return fmt.Errorf("version %q, want 1", v)
					}
					return nil
				})
				if got := a.last().Domains(); !slices.Equal(got, tc.domains) {
					t.Errorf("domains %v, want %v", got, tc.domains)
				}
				stop()
				if n := len(x.nacks()); n != 0 {
					t.Errorf("%d NACKs, want none", n)
				}
				return
			}
			wait.Until(t, within, func() error {
				if len(x.nacks()) == 0 {
					return errors.New("no NACK")
				}
				return nil
			})
			stop()
			if msg := x.nacks()[0].req.GetErrorDetail().GetMessage(); !strings.Contains(msg, tc.nack) {
				t.Errorf("NACK %q, want it to hold %q", msg, tc.nack)
			}
			if v := s.Version(); v != "" || a.count() != 0 {
				t.Errorf("version %q, %d applied; want none", v, a.count())
			}
			if got := metric(t, reg, "allot_envoy_xds_updates_total", "applied"); got != 0 {
				t.Errorf("applied %v, want 0", got)
			}
		})
	}
}

func TestRunMisuse(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	var l logs
	s, err := New(testConfig(addr, &l, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background(), nil); err == nil {
		t.Error("Run with a nil apply returned nil")
	}
	a := &applied{t: t}
	run(t, s, a.apply)
	wait.Until(t, within, func() error {
		if len(l.count("unavailable")) == 0 {
			return errors.New("not running yet")
		}
		return nil
	})
	if err := s.Run(context.Background(), a.apply); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("a second Run returned %v, want already running", err)
	}
}
