package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/wait"
)

// generous is the call timeout of tests that expect answers: -race on a
// shared 2-core machine. Tests of unavailability use the default.
const generous = 5 * time.Second

// slack is what the scheduler may add to a timeout on a loaded machine.
const slack = 250 * time.Millisecond

func newClient(t *testing.T, target string, timeout time.Duration) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig()
	cfg.Target, cfg.Insecure = target, true
	if timeout > 0 {
		cfg.Timeout = timeout
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// warm waits until c has reached the limiter once, so that a later failure
// is the limiter's, not a cold dial's.
func warm(t *testing.T, c *client.Client, tenant string) {
	t.Helper()
	wait.Until(t, 10*time.Second, func() error {
		_, err := c.Decide(context.Background(), map[string]string{"tenant": tenant}, 1)
		return err
	})
}

func TestConfigValidate(t *testing.T) {
	ok := client.DefaultConfig()
	ok.Target, ok.Insecure = "127.0.0.1:9090", true
	cases := []struct {
		name  string
		edit  func(*client.Config)
		field string // "" when valid
	}{
		{"insecure", func(*client.Config) {}, ""},
		{"tls", func(c *client.Config) { c.Insecure, c.TLS = false, &tls.Config{MinVersion: tls.VersionTLS13} }, ""},
		{"dial options", func(c *client.Config) {
			c.Insecure = false
			c.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		}, ""},
		{"no target", func(c *client.Config) { c.Target = " " }, "Target"},
		{"zero timeout", func(c *client.Config) { c.Timeout = 0 }, "Timeout"},
		{"negative timeout", func(c *client.Config) { c.Timeout = -time.Millisecond }, "Timeout"},
		{"tls and insecure", func(c *client.Config) { c.TLS = &tls.Config{MinVersion: tls.VersionTLS13} }, "TLS and Insecure"},
		{"no credentials", func(c *client.Config) { c.Insecure = false }, "TLS"},
		{"max batch 0", func(c *client.Config) { c.MaxBatch = 0 }, "MaxBatch"},
		{"max batch 257", func(c *client.Config) { c.MaxBatch = 257 }, "MaxBatch"},
		{"max batch 0, coalesce off", func(c *client.Config) { c.MaxBatch, c.Coalesce = 0, false }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.edit(&cfg)
			err := cfg.Validate()
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field+":")):
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.field)
			}
			c, err := client.New(cfg)
			if (err == nil) != (tc.field == "") {
				t.Fatalf("New() error = %v, want error: %v", err, tc.field != "")
			}
			if c != nil {
				_ = c.Close()
			}
		})
	}
	if got := client.DefaultConfig().Timeout; got != 20*time.Millisecond {
		t.Errorf("DefaultConfig().Timeout = %v, want 20ms", got)
	}
}

// New copies what it keeps: the caller's TLS config is not changed (gRPC
// adds "h2" to the NextProtos of the config it is given).
func TestNewDoesNotMutateConfig(t *testing.T) {
	tc := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: "allot"}
	cfg := client.DefaultConfig()
	cfg.Target, cfg.TLS = "127.0.0.1:9090", tc
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if tc.NextProtos != nil || cfg.TLS != tc || cfg.Timeout != client.DefaultTimeout {
		t.Errorf("after New: TLS.NextProtos = %v, Config = %+v; want both unchanged", tc.NextProtos, cfg)
	}
}

// The seed's traced example (5/s, burst 3) through the client against a
// real regional service: allow, allow, allow, deny 200 ms; 250 ms later
// allow, then deny 150 ms.
func TestSeedTrace(t *testing.T) {
	l := startLimiter(t)
	c := newClient(t, l.Addr, generous)
	steps := []struct {
		advance time.Duration
		want    client.Decision
	}{
		{0, client.Decision{Allowed: true, Remaining: 2, ResetAfter: 200 * time.Millisecond}},
		{0, client.Decision{Allowed: true, Remaining: 1, ResetAfter: 400 * time.Millisecond}},
		{0, client.Decision{Allowed: true, Remaining: 0, ResetAfter: 600 * time.Millisecond}},
		{0, client.Decision{Allowed: false, Remaining: 0, RetryAfter: 200 * time.Millisecond, ResetAfter: 600 * time.Millisecond}},
		{250 * time.Millisecond, client.Decision{Allowed: true, Remaining: 0, ResetAfter: 550 * time.Millisecond}},
		{0, client.Decision{Allowed: false, Remaining: 0, RetryAfter: 150 * time.Millisecond, ResetAfter: 550 * time.Millisecond}},
	}
	for i, s := range steps {
		l.Clock.Add(s.advance)
		want := s.want
		want.Limit, want.Quota, want.Window = "tenant", 5, time.Second
		got, err := c.Decide(context.Background(), map[string]string{"tenant": "seed"}, 1)
		if err != nil || got != want {
			t.Errorf("step %d: Decide(tenant=seed, 1) = %+v, %v; want %+v", i, got, err, want)
		}
	}
}

func TestDecideBatch(t *testing.T) {
	l := startLimiter(t)
	c := newClient(t, l.Addr, generous)
	ctx := context.Background()
	got, err := c.DecideBatch(ctx, []client.Request{
		{Descriptors: map[string]string{"tenant": "b1"}, Cost: 2},
		{Descriptors: map[string]string{"tenant": "b1"}, Cost: 2},
		{Descriptors: map[string]string{"tenant": "b2"}, Cost: 1},
	})
	if err != nil {
		t.Fatalf("DecideBatch = %v", err)
	}
	type short struct {
		allowed   bool
		remaining int64
		retry     time.Duration
	}
	want := []short{{true, 1, 0}, {false, 1, 200 * time.Millisecond}, {true, 2, 0}}
	if len(got) != len(want) {
		t.Fatalf("DecideBatch = %d decisions, want %d", len(got), len(want))
	}
	for i, d := range got {
		if s := (short{d.Allowed, d.Remaining, d.RetryAfter}); s != want[i] {
			t.Errorf("DecideBatch()[%d] = %+v, want %+v", i, s, want[i])
		}
	}
	if got, err := c.DecideBatch(ctx, nil); got != nil || err != nil {
		t.Errorf("DecideBatch(nil) = %v, %v; want nil, nil", got, err)
	}
	bad := []struct {
		name string
		reqs []client.Request
		want string
	}{
		{"no tenant", []client.Request{
			{Descriptors: map[string]string{"tenant": "b3"}, Cost: 1},
			{Descriptors: map[string]string{"user": "7"}, Cost: 1},
		}, "requests[1]: descriptors.tenant"},
		{"cost 0", []client.Request{
			{Descriptors: map[string]string{"tenant": "b4"}, Cost: 1},
			{Descriptors: map[string]string{"tenant": "b4"}, Cost: 1},
			{Descriptors: map[string]string{"tenant": "b4"}},
		}, "requests[2]: cost"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			got, err := c.DecideBatch(ctx, b.reqs)
			if !errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), b.want) {
				t.Errorf("DecideBatch = %v, %v; want ErrInvalid naming %s", got, err, b.want)
			}
		})
	}
	// A batch the client rejects sends nothing: b4 still has its whole
	// burst. (One the service rejects while deciding — not for its form —
	// may have charged the others.)
	if d, err := c.Decide(ctx, map[string]string{"tenant": "b4"}, 3); err != nil || !d.Allowed {
		t.Errorf("Decide(b4, 3) after a batch rejected for a cost of 0 = %+v, %v; want allowed", d, err)
	}
}

// Bad requests are ErrInvalid (never ErrUnavailable), naming the field;
// those the limiter rejected keep their InvalidArgument status.
func TestInvalid(t *testing.T) {
	l := startLimiter(t)
	c := newClient(t, l.Addr, generous)
	many := map[string]string{"tenant": "t"}
	for i := range 16 {
		many[fmt.Sprintf("d%d", i)] = "v"
	}
	cases := []struct {
		name   string
		d      map[string]string
		cost   int64
		field  string
		remote bool // rejected by the limiter, not by the client
	}{
		{"no tenant", map[string]string{"user": "7"}, 1, "descriptors.tenant", true},
		{"no descriptors", nil, 1, "descriptors", true},
		{"cost 0", map[string]string{"tenant": "t"}, 0, "cost", false},
		{"negative cost", map[string]string{"tenant": "t"}, -1, "cost", false},
		{"cost above burst", map[string]string{"tenant": "t"}, 4, "cost", true},
		{"too many descriptors", many, 1, "descriptors", true},
		{"tenant too long", map[string]string{"tenant": strings.Repeat("x", 300)}, 1, "descriptors.tenant", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := c.Decide(context.Background(), tc.d, tc.cost)
			if !errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("Decide = %+v, %v; want ErrInvalid", d, err)
			}
			if !strings.Contains(err.Error(), tc.field+":") {
				t.Errorf("Decide error %q does not name %s", err, tc.field)
			}
			if tc.remote && status.Code(err) != codes.InvalidArgument {
				t.Errorf("status.Code(%v) = %v, want InvalidArgument", err, status.Code(err))
			}
		})
	}
}

// An unreachable or stalled limiter costs a call at most its timeout and
// answers ErrUnavailable (never ErrInvalid).
func TestUnavailable(t *testing.T) {
	cases := []struct {
		name string
		// setup returns the client and, if the timeout comes from the
		// caller's context, that context's deadline.
		setup    func(t *testing.T) (*client.Client, time.Duration)
		deadline bool // the error must say the deadline passed
	}{
		{"limiter stopped", func(t *testing.T) (*client.Client, time.Duration) {
			l := startLimiter(t)
			c := newClient(t, l.Addr, 0)
			warm(t, c, "warm")
			l.Stop()
			return c, 0
		}, false},
		{"nothing listening", func(t *testing.T) (*client.Client, time.Duration) {
			return newClient(t, closedPort(t), 0), 0
		}, false},
		{"limiter stalled", func(t *testing.T) (*client.Client, time.Duration) {
			return newClient(t, blackHole(t), 0), 0
		}, true},
		{"caller's deadline first", func(t *testing.T) (*client.Client, time.Duration) {
			return newClient(t, blackHole(t), time.Minute), 30 * time.Millisecond
		}, true},
		{"client closed", func(t *testing.T) (*client.Client, time.Duration) {
			c := newClient(t, closedPort(t), 0)
			_ = c.Close()
			return c, 0
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, callerDeadline := tc.setup(t)
			bound := client.DefaultTimeout
			ctx := context.Background()
			if callerDeadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, callerDeadline)
				defer cancel()
				bound = callerDeadline
			}
			for i := range 3 {
				start := time.Now()
				d, err := c.Decide(ctx, map[string]string{"tenant": "t1"}, 1)
				took := time.Since(start)
				if !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrInvalid) {
					t.Fatalf("call %d: Decide = %+v, %v; want ErrUnavailable", i, d, err)
				}
				if took > bound+slack {
					t.Errorf("call %d: Decide took %v, want within the timeout %v (+%v scheduling slack)", i, took, bound, slack)
				}
				if tc.deadline && (!errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded) {
					t.Errorf("call %d: Decide error %v (code %v), want it to wrap context.DeadlineExceeded with code DeadlineExceeded", i, err, status.Code(err))
				}
				if callerDeadline > 0 {
					break // the caller's context has ended
				}
			}
		})
	}
}

// A meter settles once, with what was added; without a token it says so.
func TestMeterWithoutToken(t *testing.T) {
	m := client.Decision{Allowed: true}.Meter()
	m.Add(5)
	if _, err := m.Finish(context.Background()); !errors.Is(err, client.ErrNotReserved) {
		t.Fatalf("Finish without a token: %v, want ErrNotReserved", err)
	}
	if _, err := m.Finish(context.Background()); !errors.Is(err, client.ErrSettleGone) {
		t.Fatalf("a second Finish: %v, want ErrSettleGone", err)
	}
}
