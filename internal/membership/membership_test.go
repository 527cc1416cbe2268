package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/allot-dev/allot/internal/wait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testConfig(region, name string) Config {
	c := DefaultConfig()
	c.Region = region
	c.NodeName = name
	c.BindAddr = "127.0.0.1:0"
	c.JoinRetryInterval = 100 * time.Millisecond
	c.LeaveTimeout = time.Second
	return c
}

// node is one running Membership owned by a test.
type node struct {
	m      *Membership
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func start(t *testing.T, cfg Config) *node {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{m: m, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- m.Run(ctx) }()
	t.Cleanup(func() {
		if err := n.stop(); err != nil {
			t.Errorf("Run(%s) = %v", cfg.NodeName, err)
		}
	})
	select {
	case <-m.Ready():
	case err := <-n.done:
		t.Fatalf("Run(%s) = %v before ready", cfg.NodeName, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("Run(%s) not ready within 10s", cfg.NodeName)
	}
	return n
}

// stop cancels Run and waits for it to return (at most 10 s).
func (n *node) stop() error {
	n.once.Do(func() {
		n.cancel()
		select {
		case n.err = <-n.done:
		case <-time.After(10 * time.Second):
			n.err = errors.New("Run did not return within 10s of cancel")
		}
	})
	return n.err
}

// kill stops the node the way a crash would: no leave broadcast.
func (n *node) kill() error {
	n.m.noLeave.Store(true)
	return n.stop()
}

func wantPods(want int, nodes ...*node) func() error {
	return func() error {
		for _, n := range nodes {
			if got := n.m.LivePods(); got != want {
				return fmt.Errorf("%s: LivePods() = %d, want %d (members %v)", n.m.Name(), got, want, n.m.Members())
			}
		}
		return nil
	}
}

func joinTo(cfg Config, seeds ...*node) Config {
	for _, s := range seeds {
		cfg.Join = append(cfg.Join, s.m.Addr())
	}
	return cfg
}

// threeNodes starts a, then b and c joining a, and waits until all see 3.
func threeNodes(t *testing.T, region string, reg prometheus.Registerer) (a, b, c *node) {
	t.Helper()
	ca := testConfig(region, "a")
	ca.Registerer = reg
	a = start(t, ca)
	b = start(t, joinTo(testConfig(region, "b"), a))
	c = start(t, joinTo(testConfig(region, "c"), a))
	wait.Until(t, 5*time.Second, wantPods(3, a, b, c))
	for _, n := range []*node{a, b, c} {
		if got, want := n.m.Members(), []string{"a", "b", "c"}; !slices.Equal(got, want) {
			t.Fatalf("%s: Members() = %v, want %v", n.m.Name(), got, want)
		}
	}
	return a, b, c
}

func TestLeaveIsSeenQuickly(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	a, b, c := threeNodes(t, "us-east", reg)
	if err := c.stop(); err != nil {
		t.Fatalf("c: Run = %v", err)
	}
	if got := c.m.LivePods(); got != 1 {
		t.Errorf("stopped c: LivePods() = %d, want 1", got)
	}
	left := time.Now()
	wait.Until(t, 3*time.Second, wantPods(2, a, b))
	took := time.Since(left)
	t.Logf("graceful leave seen by both survivors after %v", took)
	if got := testutil.ToFloat64(eventsOf(reg, "join")); got != 2 {
		t.Errorf("a: events{join} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(eventsOf(reg, "leave")); got != 1 {
		t.Errorf("a: events{leave} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(eventsOf(reg, "fail")); got != 0 {
		t.Errorf("a: events{fail} = %v, want 0", got)
	}
}

func TestDeathIsSeenWithinSeconds(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	a, b, c := threeNodes(t, "us-east", reg)
	if err := c.kill(); err != nil {
		t.Fatalf("c: Run = %v", err)
	}
	// Default timings, three pods: probe within ~1 s, suspicion 1.5–4.5 s.
	killed := time.Now()
	wait.Until(t, 8*time.Second, wantPods(2, a, b))
	took := time.Since(killed)
	t.Logf("silent death seen by both survivors after %v", took)
	if got := testutil.ToFloat64(eventsOf(reg, "fail")); got != 1 {
		t.Errorf("a: events{fail} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(eventsOf(reg, "leave")); got != 0 {
		t.Errorf("a: events{leave} = %v, want 0", got)
	}
}

func joinsOf(reg *prometheus.Registry, region, result string) prometheus.Collector {
	return counterOf(reg, "allot_membership_join_attempts_total", prometheus.Labels{"region": region, "result": result})
}

func eventsOf(reg *prometheus.Registry, event string) prometheus.Collector {
	return counterOf(reg, "allot_membership_events_total", prometheus.Labels{"region": "us-east", "event": event})
}

// counterOf finds one series of a registered counter vector.
func counterOf(reg *prometheus.Registry, name string, labels prometheus.Labels) prometheus.Collector {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := len(m.GetLabel()) == len(labels)
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					match = false
				}
			}
			if match {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, m.GetCounter().GetValue)
			}
		}
	}
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, func() float64 { return -1 })
}

func TestOthersAreNotCounted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(*Config)
		peer func(*Config)
	}{
		{"other region", nil, func(c *Config) { c.Region = "eu-west" }},
		{"other key", func(c *Config) { c.SecretKey = []byte("0123456789abcdef") }, func(c *Config) { c.SecretKey = []byte("fedcba9876543210") }},
		{"no key", func(c *Config) { c.SecretKey = []byte("0123456789abcdef") }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := func(name string, mod func(*Config)) Config {
				c := testConfig("us-east", name)
				if mod != nil {
					mod(&c)
				}
				return c
			}
			a := start(t, cfg("a", tt.mod))
			b := start(t, joinTo(cfg("b", tt.mod), a))
			wait.Until(t, 5*time.Second, wantPods(2, a, b))

			reg := prometheus.NewRegistry()
			xc := joinTo(cfg("x", tt.peer), a, b)
			xc.Registerer = reg
			x := start(t, xc)
			// x keeps trying and failing; by its third failed attempt a and
			// b have had every chance to let it in.
			wait.Until(t, 5*time.Second, func() error {
				if got := testutil.ToFloat64(joinsOf(reg, xc.Region, "error")); got < 3 {
					return fmt.Errorf("x: join errors = %v, want ≥ 3", got)
				}
				return nil
			})
			if err := wantPods(2, a, b)(); err != nil {
				t.Error(err)
			}
			if err := wantPods(1, x)(); err != nil {
				t.Error(err)
			}
			if got := a.m.Members(); slices.Contains(got, "x") {
				t.Errorf("a: Members() = %v, includes x", got)
			}
		})
	}
}

func TestSameKeyJoins(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	ca, cb := testConfig("us-east", "a"), testConfig("us-east", "b")
	ca.SecretKey, cb.SecretKey = key, key
	a := start(t, ca)
	b := start(t, joinTo(cb, a))
	wait.Until(t, 5*time.Second, wantPods(2, a, b))
}

func TestJoinRetriesUntilSeedAnswers(t *testing.T) {
	t.Parallel()
	seed := freeAddr(t)
	reg := prometheus.NewRegistry()
	cb := testConfig("us-east", "b")
	cb.Join = []string{seed}
	cb.Registerer = reg
	b := start(t, cb)
	wait.Until(t, 5*time.Second, func() error {
		if got := testutil.ToFloat64(joinsOf(reg, "us-east", "error")); got < 2 {
			return fmt.Errorf("b: join errors = %v, want ≥ 2", got)
		}
		return nil
	})
	if got := b.m.LivePods(); got != 1 {
		t.Fatalf("b alone: LivePods() = %d, want 1", got)
	}
	ca := testConfig("us-east", "a")
	ca.BindAddr = seed
	a := start(t, ca)
	wait.Until(t, 5*time.Second, wantPods(2, a, b))
}

// A seed list that includes the pod itself (a headless service resolving
// to every pod) is harmless.
func TestJoinIncludingSelf(t *testing.T) {
	t.Parallel()
	self := freeAddr(t)
	reg := prometheus.NewRegistry()
	ca := testConfig("us-east", "a")
	ca.BindAddr, ca.Join, ca.Registerer = self, []string{self}, reg
	ca.RejoinInterval = 100 * time.Millisecond
	a := start(t, ca)
	b := start(t, joinTo(testConfig("us-east", "b"), a))
	wait.Until(t, 5*time.Second, wantPods(2, a, b))
	// Several rejoins later: still two, no errors, b joined once.
	wait.Until(t, 5*time.Second, func() error {
		if got := testutil.ToFloat64(joinsOf(reg, "us-east", "ok")); got < 5 {
			return fmt.Errorf("a: successful joins = %v, want ≥ 5", got)
		}
		return nil
	})
	if got := testutil.ToFloat64(eventsOf(reg, "join")); got != 1 {
		t.Errorf("a: events{join} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(joinsOf(reg, "us-east", "error")); got != 0 {
		t.Errorf("a: join errors = %v, want 0", got)
	}
	if err := wantPods(2, a, b)(); err != nil {
		t.Error(err)
	}
}

func TestRejoinHealsSplit(t *testing.T) {
	t.Parallel()
	a := start(t, testConfig("us-east", "a"))
	cb := joinTo(testConfig("us-east", "b"), a)
	cb.RejoinInterval = 200 * time.Millisecond
	b := start(t, cb)
	wait.Until(t, 5*time.Second, wantPods(2, a, b))

	addr := a.m.Addr()
	if err := a.kill(); err != nil {
		t.Fatalf("a: Run = %v", err)
	}
	wait.Until(t, 8*time.Second, wantPods(1, b))
	// A new pod at the seed address knows nobody; b's rejoin finds it.
	ca := testConfig("us-east", "a2")
	ca.BindAddr = addr
	a2 := start(t, ca)
	wait.Until(t, 5*time.Second, wantPods(2, a2, b))
}

// freeAddr returns a loopback IP:port free for both TCP and UDP now.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		_ = l.Close()
		if err == nil {
			_ = u.Close()
			return addr
		}
	}
	t.Fatal("no free TCP+UDP port")
	return ""
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	a := start(t, testConfig("us-east", "a"))
	if err := a.m.Run(context.Background()); !errors.Is(err, ErrAlreadyRun) {
		t.Errorf("second Run = %v, want ErrAlreadyRun", err)
	}
	cb := testConfig("us-east", "b")
	cb.BindAddr = a.m.Addr()
	b, err := New(cb)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), a.m.Addr()) {
		t.Errorf("Run on a taken address = %v, want an error naming %s", err, a.m.Addr())
	}
	if got := b.LivePods(); got != 1 {
		t.Errorf("failed b: LivePods() = %d, want 1", got)
	}
}

func TestNotRunning(t *testing.T) {
	t.Parallel()
	m, err := New(testConfig("us-east", "solo"))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.LivePods(); got != 1 {
		t.Errorf("LivePods() = %d, want 1", got)
	}
	if got := m.Members(); !slices.Equal(got, []string{"solo"}) {
		t.Errorf("Members() = %v, want [solo]", got)
	}
	if got := m.Addr(); got != "" {
		t.Errorf("Addr() = %q, want empty", got)
	}
}

func TestLogsReachSlog(t *testing.T) {
	t.Parallel()
	h := &recorder{}
	cfg := testConfig("us-east", "a")
	cfg.Logger = slog.New(h)
	n := start(t, cfg)
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	// memberlist logs its chosen port at DEBUG on a :0 bind.
	r, ok := h.find("Using dynamic bind port")
	if !ok {
		t.Fatalf("no memberlist record; got %v", h.messages())
	}
	if r.Level != slog.LevelDebug || r.attrs["component"] != "memberlist" || r.attrs["region"] != "us-east" || r.attrs["node"] != "a" {
		t.Errorf("record = %+v, want level DEBUG, component memberlist, region us-east, node a", r)
	}
	if _, ok := h.find("membership stopped"); !ok {
		t.Errorf("no stop record; got %v", h.messages())
	}
}

func TestNewCopiesConfig(t *testing.T) {
	t.Parallel()
	cfg := testConfig("us-east", "a")
	cfg.Join = []string{"127.0.0.1:1"}
	cfg.SecretKey = []byte("0123456789abcdef")
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Join[0] = "changed"
	cfg.SecretKey[0] = 'X'
	if m.cfg.Join[0] != "127.0.0.1:1" || m.cfg.SecretKey[0] != '0' {
		t.Errorf("New kept the caller's slices: Join %v, SecretKey %q", m.cfg.Join, m.cfg.SecretKey)
	}
	if cfg.Logger != nil {
		t.Error("New set the caller's Logger")
	}
	mc := m.memberlistConfig()
	if mc.Label != "allot-region:us-east" || mc.ProbeInterval != 500*time.Millisecond || mc.BindAddr != "127.0.0.1" || mc.BindPort != 0 {
		t.Errorf("memberlist config: label %q, probe %v, bind %s:%d", mc.Label, mc.ProbeInterval, mc.BindAddr, mc.BindPort)
	}
}

func TestDefaultName(t *testing.T) {
	t.Parallel()
	m1, err1 := New(testConfig("us-east", ""))
	m2, err2 := New(testConfig("us-east", ""))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if m1.Name() == "" || m1.Name() == m2.Name() {
		t.Errorf("default names %q and %q: want distinct, non-empty", m1.Name(), m2.Name())
	}
}

func TestRegistererConflict(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "allot_membership_events_total", Help: "not ours"}))
	cfg := testConfig("us-east", "a")
	cfg.Registerer = reg
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "Registerer") {
		t.Errorf("New with a conflicting metric = %v, want an error naming Registerer", err)
	}
	// Two Memberships sharing one registry (allot dev) is fine.
	reg2 := prometheus.NewRegistry()
	for _, name := range []string{"a", "b"} {
		c := testConfig("us-east", name)
		c.Registerer = reg2
		if _, err := New(c); err != nil {
			t.Errorf("New(%s) sharing a registry: %v", name, err)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field string
		mod   func(*Config)
	}{
		{"", func(*Config) {}},
		{"", func(c *Config) { c.BindAddr = ":7946" }},
		{"", func(c *Config) { c.BindAddr = "[::1]:0"; c.AdvertiseAddr = "10.0.0.1" }},
		{"", func(c *Config) { c.AdvertiseAddr = "10.0.0.1:7000"; c.RejoinInterval = 0; c.PushPullInterval = 0 }},
		{"", func(c *Config) { c.SecretKey = make([]byte, 24); c.Join = []string{"allot-us.svc:7946", "10.0.0.2"} }},
		{"Region", func(c *Config) { c.Region = "" }},
		{"Region", func(c *Config) { c.Region = string(make([]byte, 201)) }},
		{"NodeName", func(c *Config) { c.NodeName = string(make([]byte, 129)) }},
		{"BindAddr", func(c *Config) { c.BindAddr = "" }},
		{"BindAddr", func(c *Config) { c.BindAddr = "127.0.0.1" }},
		{"BindAddr", func(c *Config) { c.BindAddr = "localhost:7946" }},
		{"BindAddr", func(c *Config) { c.BindAddr = "127.0.0.1:70000" }},
		{"BindAddr", func(c *Config) { c.BindAddr = "127.0.0.1:x" }},
		{"AdvertiseAddr", func(c *Config) { c.AdvertiseAddr = "pod.local" }},
		{"AdvertiseAddr", func(c *Config) { c.AdvertiseAddr = "10.0.0.1:-1" }},
		{"Join[1]", func(c *Config) { c.Join = []string{"a", ""} }},
		{"SecretKey", func(c *Config) { c.SecretKey = []byte("short") }},
		{"JoinRetryInterval", func(c *Config) { c.JoinRetryInterval = 0 }},
		{"RejoinInterval", func(c *Config) { c.RejoinInterval = -time.Second }},
		{"LeaveTimeout", func(c *Config) { c.LeaveTimeout = 0 }},
		{"ProbeInterval", func(c *Config) { c.ProbeInterval = 0 }},
		{"ProbeTimeout", func(c *Config) { c.ProbeTimeout = 0 }},
		{"ProbeTimeout", func(c *Config) { c.ProbeTimeout = c.ProbeInterval }},
		{"IndirectChecks", func(c *Config) { c.IndirectChecks = -1 }},
		{"SuspicionMult", func(c *Config) { c.SuspicionMult = 0 }},
		{"SuspicionMaxTimeoutMult", func(c *Config) { c.SuspicionMaxTimeoutMult = 0 }},
		{"AwarenessMaxMultiplier", func(c *Config) { c.AwarenessMaxMultiplier = 0 }},
		{"GossipInterval", func(c *Config) { c.GossipInterval = 0 }},
		{"GossipNodes", func(c *Config) { c.GossipNodes = 0 }},
		{"RetransmitMult", func(c *Config) { c.RetransmitMult = 0 }},
		{"GossipToTheDeadTime", func(c *Config) { c.GossipToTheDeadTime = 0 }},
		{"PushPullInterval", func(c *Config) { c.PushPullInterval = -1 }},
		{"TCPTimeout", func(c *Config) { c.TCPTimeout = 0 }},
	}
	for i, tt := range tests {
		t.Run(strconv.Itoa(i)+"/"+tt.field, func(t *testing.T) {
			c := DefaultConfig()
			c.Region = "us-east"
			tt.mod(&c)
			err := c.Validate()
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.field != "" && (err == nil || !strings.Contains(err.Error(), "membership config: "+tt.field+":")):
				t.Errorf("Validate() = %v, want an error naming %s", err, tt.field)
			}
			if _, nerr := New(c); (nerr == nil) != (err == nil) {
				t.Errorf("New() = %v, Validate() = %v", nerr, err)
			}
		})
	}
}

// recorder is a slog.Handler keeping every record with its attributes.
type recorder struct {
	mu      sync.Mutex
	records []rec
	attrs   []slog.Attr
	root    *recorder
}

type rec struct {
	Level slog.Level
	Msg   string
	attrs map[string]string
}

func (h *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *recorder) Handle(_ context.Context, r slog.Record) error {
	root := h.rootOf()
	m := map[string]string{}
	for _, a := range h.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	root.mu.Lock()
	root.records = append(root.records, rec{r.Level, r.Message, m})
	root.mu.Unlock()
	return nil
}

func (h *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &recorder{attrs: append(slices.Clone(h.attrs), as...), root: h.rootOf()}
}

func (h *recorder) WithGroup(string) slog.Handler { return h }

func (h *recorder) rootOf() *recorder {
	if h.root != nil {
		return h.root
	}
	return h
}

func (h *recorder) find(prefix string) (rec, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if strings.HasPrefix(r.Msg, prefix) {
			return r, true
		}
	}
	return rec{}, false
}

func (h *recorder) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		out = append(out, r.Msg)
	}
	return out
}
