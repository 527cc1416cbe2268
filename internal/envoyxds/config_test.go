package envoyxds

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Config{ServerURL: "localhost:18000", NodeID: "default", RetryInterval: 3 * time.Second,
		BackoffInitial: 10 * time.Second, BackoffMax: 60 * time.Second, BackoffRandomFactor: 0.5, Jitter: true}
	if c.ServerURL != want.ServerURL || c.NodeID != want.NodeID || c.RetryInterval != want.RetryInterval ||
		c.BackoffInitial != want.BackoffInitial || c.BackoffMax != want.BackoffMax ||
		c.BackoffRandomFactor != want.BackoffRandomFactor || c.Jitter != want.Jitter || c.Merge || c.MaxMsgSize != 0 {
		t.Errorf("DefaultConfig %+v, want the original's defaults %+v", c, want)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*Config)
		field string // "" when valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"empty node id", func(c *Config) { c.NodeID = "" }, ""},
		{"headers", func(c *Config) {
			c.Headers = map[string]string{"Authorization": "Bearer x", "x-token-bin": "\x00\xff", "a.b_c-d": "v"}
		}, ""},
		{"no server", func(c *Config) { c.ServerURL = " " }, "ServerURL"},
		{"retry interval", func(c *Config) { c.RetryInterval = 0 }, "RetryInterval"},
		{"backoff initial", func(c *Config) { c.BackoffInitial = -time.Second }, "BackoffInitial"},
		{"backoff max below initial", func(c *Config) { c.BackoffMax = time.Second }, "BackoffMax"},
		{"random factor above 1", func(c *Config) { c.BackoffRandomFactor = 1.5 }, "BackoffRandomFactor"},
		{"random factor negative", func(c *Config) { c.BackoffRandomFactor = -0.1 }, "BackoffRandomFactor"},
		{"random factor NaN", func(c *Config) { c.BackoffRandomFactor = math.NaN() }, "BackoffRandomFactor"},
		{"max msg size", func(c *Config) { c.MaxMsgSize = -1 }, "MaxMsgSize"},
		{"empty header key", func(c *Config) { c.Headers = map[string]string{"": "v"} }, "Headers"},
		{"header key with a space", func(c *Config) { c.Headers = map[string]string{"x y": "v"} }, "Headers"},
		{"reserved header", func(c *Config) { c.Headers = map[string]string{"grpc-timeout": "1S"} }, "Headers"},
		{"header value with a newline", func(c *Config) { c.Headers = map[string]string{"x": "a\nb"} }, "Headers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "envoy xds config: "+tc.field+":") {
				t.Fatalf("Validate: %v, want an error naming %s", err, tc.field)
			}
			if _, err := New(c); err == nil {
				t.Error("New accepted what Validate rejects")
			}
		})
	}
}

func TestNewChecksTarget(t *testing.T) {
	c := DefaultConfig()
	c.ServerURL = "%zz" // not a URL gRPC parses
	if _, err := New(c); err == nil || !strings.Contains(err.Error(), "ServerURL") {
		t.Errorf("New: %v, want an error naming ServerURL", err)
	}
}

func TestNewRegistersOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := DefaultConfig()
	c.Registerer = reg
	for range 2 {
		if _, err := New(c); err != nil {
			t.Fatalf("New: %v (two Subscribers share one registry)", err)
		}
	}
}

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name   string
		jitter bool
		factor float64
		r      float64 // what rand returns
		want   []time.Duration
	}{
		{"doubles to max", false, 0.5, 0, []time.Duration{10 * ms, 20 * ms, 40 * ms, 60 * ms, 60 * ms}},
		{"jitter low", true, 0.5, 0, []time.Duration{5 * ms, 10 * ms, 20 * ms, 30 * ms, 30 * ms}},
		{"jitter high stays at most max", true, 0.5, 1, []time.Duration{15 * ms, 30 * ms, 60 * ms, 60 * ms, 60 * ms}},
		{"jitter middle", true, 0.5, 0.5, []time.Duration{10 * ms, 20 * ms, 40 * ms, 60 * ms}},
		{"factor 0", true, 0, 0, []time.Duration{10 * ms, 20 * ms, 40 * ms, 60 * ms}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.BackoffInitial, c.BackoffMax, c.BackoffRandomFactor, c.Jitter = 10*ms, 60*ms, tc.factor, tc.jitter
			b := newBackoff(c)
			b.rand = func() float64 { return tc.r }
			for i, w := range tc.want {
				if got := b.wait(); got != w {
					t.Fatalf("wait %d: %v, want %v", i, got, w)
				}
			}
			b.reset()
			if got := b.wait(); got != tc.want[0] {
				t.Errorf("after reset: %v, want %v", got, tc.want[0])
			}
		})
	}
	// A huge max does not overflow.
	b := &backoff{initial: time.Hour, max: math.MaxInt64, next: time.Hour, rand: func() float64 { return 0 }}
	prev := time.Duration(0)
	for range 80 {
		d := b.wait()
		if d < prev {
			t.Fatalf("wait went down from %v to %v", prev, d)
		}
		prev = d
	}
}

func TestLimiter(t *testing.T) {
	l := limiter{every: time.Minute}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at   time.Duration
		ok   bool
		held int
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{30 * time.Second, false, 0},
		{time.Minute, true, 2},
		{time.Minute + time.Second, false, 0},
		{3 * time.Minute, true, 1},
	}
	for i, s := range steps {
		ok, held := l.allow(t0.Add(s.at))
		if ok != s.ok || held != s.held {
			t.Errorf("step %d: allow %v held %d, want %v %d", i, ok, held, s.ok, s.held)
		}
	}
}
