package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/wait"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// rpcs counts the client's RPCs by method and the decisions they carried,
// and can hold the first ones until released.
type rpcs struct {
	decide, batch, batched atomic.Int64
	held                   atomic.Int64
	hold                   chan struct{} // closed: nothing is held
	holdFirst              int64         // how many RPCs to hold
	seen                   atomic.Int64
	mu                     sync.Mutex
	sizes                  []int
}

func (r *rpcs) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch q := req.(type) {
	case *allotv1.DecideRequest:
		r.decide.Add(1)
	case *allotv1.DecideBatchRequest:
		r.batch.Add(1)
		r.batched.Add(int64(len(q.GetRequests())))
		r.mu.Lock()
		r.sizes = append(r.sizes, len(q.GetRequests()))
		r.mu.Unlock()
	}
	if r.hold != nil && r.seen.Add(1) <= r.holdFirst {
		r.held.Add(1)
		<-r.hold
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func coalescingClient(t *testing.T, target string, r *rpcs) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig()
	cfg.Target, cfg.Insecure, cfg.Timeout = target, true, generous
	cfg.DialOptions = []grpc.DialOption{grpc.WithUnaryInterceptor(r.interceptor)}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestCoalescedAnswersReachTheirCallers: 64 goroutines deciding at once,
// each for its own tenant (burst 3), get exactly their own answers — three
// admissions then denials — while most decisions travel in DecideBatch RPCs.
func TestCoalescedAnswersReachTheirCallers(t *testing.T) {
	l := startLimiter(t)
	var r rpcs
	c := coalescingClient(t, l.Addr, &r)
	warm(t, c, "warm")
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			tenant := fmt.Sprintf("co-%d", g)
			for i := range 5 {
				d, err := c.Decide(context.Background(), map[string]string{"tenant": tenant}, 1)
				if err != nil {
					t.Errorf("%s decision %d: %v", tenant, i, err)
					return
				}
				// The limiter's clock stands still: burst 3, then denials.
				if want := i < 3; d.Allowed != want || (want && d.Remaining != int64(2-i)) {
					t.Errorf("%s decision %d = %+v, want allowed %v (remaining %d)", tenant, i, d, want, 2-i)
				}
			}
		})
	}
	wg.Wait()
	if r.batch.Load() == 0 || r.batched.Load() < 64 {
		t.Errorf("%d DecideBatch RPCs carried %d decisions (and %d Decide RPCs): want most of the 320 merged",
			r.batch.Load(), r.batched.Load(), r.decide.Load())
	}
	r.mu.Lock()
	for _, n := range r.sizes {
		if n > client.DefaultMaxBatch {
			t.Errorf("a DecideBatch of %d, MaxBatch %d", n, client.DefaultMaxBatch)
		}
	}
	r.mu.Unlock()
	t.Logf("%d Decide RPCs, %d DecideBatch RPCs carrying %d decisions", r.decide.Load(), r.batch.Load(), r.batched.Load())
}

// TestCoalescedBadRequestFailsAlone: a bad request merged with good ones
// gets ErrInvalid naming its field; the others are decided.
func TestCoalescedBadRequestFailsAlone(t *testing.T) {
	l := startLimiter(t)
	r := rpcs{hold: make(chan struct{}), holdFirst: client.InFlight}
	c := coalescingClient(t, l.Addr, &r)
	var wg sync.WaitGroup
	// Occupy every RPC slot so that the next callers queue together.
	for i := range client.InFlight {
		wg.Go(func() {
			if _, err := c.Decide(context.Background(), map[string]string{"tenant": fmt.Sprintf("fill-%d", i)}, 1); err != nil {
				t.Errorf("filler: %v", err)
			}
		})
	}
	wait.Until(t, 10*time.Second, func() error {
		if n := r.held.Load(); n < client.InFlight {
			return fmt.Errorf("%d of %d RPCs held", n, client.InFlight)
		}
		return nil
	})
	type result struct {
		d   client.Decision
		err error
	}
	results := make([]result, 3)
	descs := []map[string]string{{"tenant": "good-1"}, {"user": "no-tenant"}, {"tenant": "good-2"}}
	for i, d := range descs {
		wg.Go(func() { results[i].d, results[i].err = c.Decide(context.Background(), d, 1) })
	}
	wait.Until(t, 10*time.Second, func() error {
		if n := client.Queued(c); n < 3 {
			return fmt.Errorf("%d of 3 callers queued", n)
		}
		return nil
	})
	close(r.hold)
	wg.Wait()
	if r.batch.Load() != 1 || r.batched.Load() != 3 {
		t.Errorf("%d DecideBatch RPCs carrying %d decisions, want the 3 queued callers in one", r.batch.Load(), r.batched.Load())
	}
	for _, i := range []int{0, 2} {
		if results[i].err != nil || !results[i].d.Allowed {
			t.Errorf("good request %d = %+v, %v; want allowed", i, results[i].d, results[i].err)
		}
	}
	if err := results[1].err; !errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "descriptors.tenant") {
		t.Errorf("bad request = %v, want ErrInvalid naming descriptors.tenant", err)
	}
}

// TestCoalesceOff: with Coalesce off every decision is its own Decide RPC.
func TestCoalesceOff(t *testing.T) {
	l := startLimiter(t)
	var r rpcs
	cfg := client.DefaultConfig()
	cfg.Target, cfg.Insecure, cfg.Timeout, cfg.Coalesce = l.Addr, true, generous, false
	cfg.DialOptions = []grpc.DialOption{grpc.WithUnaryInterceptor(r.interceptor)}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for range 4 {
				if _, err := c.Decide(context.Background(), map[string]string{"tenant": fmt.Sprintf("off-%d", g)}, 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if r.batch.Load() != 0 || r.decide.Load() != 64 {
		t.Errorf("Coalesce off: %d Decide and %d DecideBatch RPCs, want 64 and 0", r.decide.Load(), r.batch.Load())
	}
}
