package regional

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/redistest"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// While the leader's answers carry again_ms (a grow of the region waits for
// other regions' acknowledgements), the pod reports again that soon instead
// of at its next interval, and stops as soon as they no longer do.
func TestReportsAgainWhenTheLeaderAsks(t *testing.T) {
	etcd := etcdtest.Start(t)
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p := startPodWith(t, etcd, ms, func(c *Config) { c.ReportInterval = 2 * time.Second }, false)
	// The leader's first five answers ask for a report 40 ms later.
	var asked atomic.Int32
	ask := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if resp, ok := reply.(*allotv1.ReportResponse); ok && err == nil && resp.GetAccepted() && asked.Add(1) <= 5 {
			resp.AgainMs = 40
		}
		return err
	}
	r := p.s.rep
	r.mu.Lock()
	r.dial = func(addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithChainUnaryInterceptor(newAnswerCheck(p.s).intercept, ask))
	}
	r.mu.Unlock()
	startLeader(t, etcd, nil)
	polls := func() float64 { return testutil.ToFloat64(p.s.m.polls) }
	start := time.Now()
	redistest.Eventually(t, 10*time.Second, func() error {
		if n := polls(); n < 5 {
			return fmt.Errorf("%v early reports, want 5", n)
		}
		return nil
	})
	// Five polls 40 ms apart, not five intervals of 2 s (the first answer
	// may take up to one interval: the pod found no leader before).
	if d := time.Since(start); d > 2*time.Second+time.Second {
		t.Errorf("five early reports took %v, want about 200 ms after the first answer", d)
	}
	// Then the pod is back on its interval: no more early reports.
	time.Sleep(time.Second)
	if n := polls(); n != 5 {
		t.Errorf("%v early reports once the answers stopped asking, want 5", n)
	}
}
