package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/internal/coordtest"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/regional"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

// fakeClock is the limiter's clock (the in-memory store's), moved by hand.
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

// limiter is a real regional service (package regional) on embedded etcd
// with the in-memory store on a fake clock, serving allot.v1.Limiter on a
// loopback port: what `allot regional` serves, minus Redis.
type limiter struct {
	// Addr is the gRPC address, a Config.Target.
	Addr  string
	Clock *fakeClock
	gs    *grpc.Server
}

// Stop stops the gRPC server: the limiter becomes unreachable.
func (l *limiter) Stop() { l.gs.Stop() }

// startLimiter starts a limiter with testdata/policy.yaml applied and waits
// until it is ready; everything stops when tb ends. opts configure its gRPC
// server (TLS).
func startLimiter(tb testing.TB, opts ...grpc.ServerOption) *limiter {
	tb.Helper()
	pol, err := os.ReadFile("testdata/policy.yaml")
	if err != nil {
		tb.Fatalf("policy: %v", err)
	}
	etcd := etcdtest.Start(tb)
	ec := etcd.Client(tb)
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	mcfg := memstore.DefaultConfig()
	mcfg.Clock = clock.Now
	store, err := memstore.New(mcfg)
	if err != nil {
		tb.Fatalf("memstore: %v", err)
	}
	// A leader answers the pod's reports: it enforces budgets only with
	// what a leader told it.
	coordtest.Start(tb, coordtest.Fast(ec))
	cfg := regional.DefaultConfig()
	cfg.Region, cfg.Store, cfg.Etcd = "us-east", store, ec
	cfg.ReportInterval = 100 * time.Millisecond
	svc, err := regional.New(cfg)
	if err != nil {
		tb.Fatalf("regional.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("regional Run: %v", err)
		}
	})
	if _, err := state.New(ec, "").ApplyPolicy(ctx, pol, 0, "client tests"); err != nil {
		tb.Fatalf("apply policy: %v", err)
	}
	wait.Until(tb, 10*time.Second, func() error {
		if !svc.Ready() {
			return errors.New("regional service not ready")
		}
		return nil
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	gs := grpc.NewServer(opts...)
	svc.RegisterGRPC(gs)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	tb.Cleanup(func() { gs.Stop(); <-served })
	return &limiter{Addr: lis.Addr().String(), Clock: clock, gs: gs}
}

// blackHole is a TCP listener that accepts connections and never answers: a
// stalled limiter (a pod stopped by SIGSTOP, a half-dead network path). It
// returns its address.
func blackHole(tb testing.TB) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		_ = lis.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return lis.Addr().String()
}

// closedPort returns a loopback address nothing listens on.
func closedPort(tb testing.TB) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// exampleT lets the examples, which have no *testing.T, use the same
// fixtures as the tests. Only the methods the fixtures call are defined;
// any other panics (the embedded testing.TB is nil).
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (e *exampleT) Helper()                   {}
func (e *exampleT) Cleanup(f func())          { e.cleanups = append(e.cleanups, f) }
func (e *exampleT) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (e *exampleT) Errorf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

func (e *exampleT) TempDir() string {
	d, err := os.MkdirTemp("", "allot-client-example-")
	if err != nil {
		panic(err)
	}
	e.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// stop runs the cleanups, last first.
func (e *exampleT) stop() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// startExampleLimiter starts a limiter for an example and returns its
// address and a function that stops it.
func startExampleLimiter() (addr string, stop func()) {
	t := &exampleT{}
	l := startLimiter(t)
	return l.Addr, t.stop
}
