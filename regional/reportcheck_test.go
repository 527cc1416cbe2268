package regional

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/coordinator"
	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/internal/wait"
)

// logBuffer is a slog destination tests can read while pods write to it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startLeader runs a coordinator on etcd, serving gRPC on loopback, with
// the regional tests' timings (lease 1.5s), until the test ends; it returns
// once the coordinator leads and has rebalanced, so reports are taken.
func startLeader(t *testing.T, etcd *etcdtest.Server, adjust func(*coordinator.Config)) *coordinator.Coordinator {
	t.Helper()
	ccfg := coordinator.DefaultConfig()
	ccfg.ID, ccfg.Etcd = "c1", etcd.Client(t)
	ccfg.SessionTTL, ccfg.RebalanceInterval, ccfg.Lease = time.Second, 100*time.Millisecond, 1500*time.Millisecond
	ccfg.Reports = coordinator.ReportAuth{Insecure: true}
	if adjust != nil {
		adjust(&ccfg)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ccfg.GRPCAddr = lis.Addr().String() // pods find it through the election
	coord, err := coordinator.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coord.RegisterGRPC(gs, coordinator.Auth{Insecure: true})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- coord.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("coordinator Run: %v", err)
		}
	})
	wait.Until(t, 10*time.Second, func() error {
		st, err := coord.Status(ctx)
		if err != nil || !st.IsLeader || st.LastRebalance == "" {
			return fmt.Errorf("leader not ready: %+v, %w", st, err)
		}
		return nil
	})
	return coord
}

// A lease that, less the pod's drift, does not outlast its report interval
// lapses between reports: only the leader's answer shows it, and the pod
// says so once, naming the flags.
func TestShortLeaseWarned(t *testing.T) {
	etcd := etcdtest.Start(t)
	var logs logBuffer
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	// 1.5s lease − 1.3s drift = 200ms < 300ms between reports. The pod
	// starts with no leader (this test's is started next): not ready.
	p := startPodWith(t, etcd, ms, func(c *Config) {
		c.ReportInterval, c.Drift, c.Logger = 300*time.Millisecond, 1300*time.Millisecond, logs.logger()
	}, false)
	if p.s.Ready() {
		t.Fatal("pod ready before any leader answered it")
	}
	startLeader(t, etcd, nil)
	wait.Until(t, 15*time.Second, func() error {
		if n := testutil.ToFloat64(p.s.m.reports.WithLabelValues("accepted")); n < 3 {
			return fmt.Errorf("%v reports accepted, want 3", n)
		}
		return nil
	})
	// Answered: ready, though its lease lapses between reports.
	if !p.s.Ready() {
		t.Error("pod not ready after the leader answered it")
	}
	const msg = "lapses between reports"
	if n := strings.Count(logs.String(), msg); n != 1 {
		t.Errorf("pod logged %q %d times over several short leases, want once; logs:\n%s", msg, n, logs.String())
	}
	for _, flag := range []string{"--report-interval", "--lease-drift", "--lease"} {
		if !strings.Contains(logs.String(), flag) {
			t.Errorf("the warning does not name %s: %s", flag, logs.String())
		}
	}
}

// The default drift and a report interval well inside the lease: no warning.
func TestLeaseOutlastsReportsNoWarning(t *testing.T) {
	etcd := etcdtest.Start(t)
	var logs logBuffer
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p := startPodWith(t, etcd, ms, func(c *Config) {
		c.ReportInterval, c.Logger = 200*time.Millisecond, logs.logger()
	}, false)
	if p.s.Ready() {
		t.Fatal("pod ready before any leader answered it")
	}
	startLeader(t, etcd, nil)
	wait.Until(t, 15*time.Second, func() error {
		if n := testutil.ToFloat64(p.s.m.reports.WithLabelValues("accepted")); n < 3 {
			return fmt.Errorf("%v reports accepted, want 3", n)
		}
		return nil
	})
	if !p.s.Ready() || !p.s.Leased() {
		t.Errorf("pod after 3 accepted reports: ready %v, leased %v; want both", p.s.Ready(), p.s.Leased())
	}
	if strings.Contains(logs.String(), "lapses between reports") {
		t.Errorf("pod warned about a lease that outlasts its reports: %s", logs.String())
	}
}

// A pod sends its region token with every report; the coordinator takes the
// reports of a pod with its token, and refuses those without or with
// another, which the pod says at Warn with the coordinator's reason.
func TestReportToken(t *testing.T) {
	etcd := etcdtest.Start(t)
	pol, err := os.ReadFile("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := state.New(etcd.Client(t), "").ApplyPolicy(context.Background(), pol, 0, ""); err != nil {
		t.Fatal(err)
	}
	startLeader(t, etcd, func(c *coordinator.Config) { c.Reports = coordinator.ReportAuth{Token: "r3gion"} })
	cases := []struct {
		name   string
		token  string
		leased bool
		log    string
	}{
		{"same token", "r3gion", true, ""},
		{"no token", "", false, "--report-token-file"},
		{"wrong token", "guess", false, "not this coordinator's"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs logBuffer
			ms, err := memstore.New(memstore.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			// This test's leader checks tokens: no coordinator of
			// startPodOn's, and not ready until (unless) it answers.
			p := startPodWith(t, etcd, ms, func(cfg *Config) {
				cfg.Pod, cfg.ReportToken, cfg.ReportInterval, cfg.Logger = "pod-"+c.name, c.token, 100*time.Millisecond, logs.logger()
			}, false)
			result := "accepted"
			if !c.leased {
				result = "failed"
			}
			wait.Until(t, 15*time.Second, func() error {
				if n := testutil.ToFloat64(p.s.m.reports.WithLabelValues(result)); n < 3 {
					return fmt.Errorf("%v reports %s, want 3", n, result)
				}
				return nil
			})
			if p.s.Leased() != c.leased {
				t.Errorf("pod with token %q: Leased() = %v, want %v", c.token, p.s.Leased(), c.leased)
			}
			// A pod no leader ever answered enforces nothing for budget
			// limits and is not ready.
			if p.s.Ready() != c.leased {
				t.Errorf("pod with token %q: Ready() = %v, want %v", c.token, p.s.Ready(), c.leased)
			}
			if code, _ := get(t, p.http.URL+"/readyz"); (code == 200) != c.leased {
				t.Errorf("pod with token %q: /readyz = %d, want ready %v", c.token, code, c.leased)
			}
			if c.leased {
				if n := testutil.ToFloat64(p.s.m.reports.WithLabelValues("failed")); n != 0 {
					t.Errorf("%v reports failed with the right token", n)
				}
				return
			}
			if n := testutil.ToFloat64(p.s.m.reports.WithLabelValues("accepted")); n != 0 {
				t.Errorf("%v reports accepted with token %q", n, c.token)
			}
			if got := logs.String(); strings.Count(got, "refused this pod's report as unauthenticated") != 1 || !strings.Contains(got, c.log) {
				t.Errorf("pod logs = %s; want one warning with the coordinator's reason (%q)", got, c.log)
			}
		})
	}
}

func TestReportTokenValidated(t *testing.T) {
	etcd := etcdtest.Start(t)
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Region, cfg.Store, cfg.Etcd = "us-east", ms, etcd.Client(t)
	for _, tok := range []string{"a b", "a\n", "é"} {
		c := cfg
		c.ReportToken = tok
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ReportToken") {
			t.Errorf("Validate() with ReportToken %q = %v, want an error naming ReportToken", tok, err)
		}
	}
}
