package regional

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/coordinator"
	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/shares"
)

// At most one prompt report per interval, counted from the last one allowed.
func TestPromptGate(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	g := promptGate{every: 2 * time.Second}
	for _, st := range []struct {
		at   time.Duration
		want bool
	}{
		{0, true},
		{time.Millisecond, false},
		{1999 * time.Millisecond, false},
		{2 * time.Second, true},
		{3 * time.Second, false},
		{4500 * time.Millisecond, true},
		{4 * time.Second, false}, // the clock went back: still within the interval
		{10 * time.Second, true},
	} {
		if got := g.allow(t0.Add(st.at)); got != st.want {
			t.Errorf("allow(t0+%v) = %v, want %v", st.at, got, st.want)
		}
	}
}

// A pod that applies a shrink reports soon, not at its next tick, so that the
// leader can write the grow that waits for the acknowledgement; a grow
// triggers no such report. The pod's report interval is an hour here: only
// the prompt report can reach the leader.
func TestPromptReportAfterShrink(t *testing.T) {
	etcd := etcdtest.Start(t)
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p := startPodOn(t, etcd, ms, func(c *Config) { c.ReportInterval = time.Hour })
	ctx := context.Background()

	ccfg := coordinator.DefaultConfig()
	ccfg.ID, ccfg.Etcd = "c1", etcd.Client(t)
	ccfg.SessionTTL, ccfg.RebalanceInterval, ccfg.Lease = time.Second, 100*time.Millisecond, 1500*time.Millisecond
	ccfg.Shares.Interval = ccfg.RebalanceInterval
	ccfg.Reports = coordinator.ReportAuth{Insecure: true} // report auth: reportcheck_test.go
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ccfg.GRPCAddr = lis.Addr().String()
	coord, err := coordinator.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coord.RegisterGRPC(gs, coordinator.Auth{Insecure: true})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cctx, stopCoord := context.WithCancel(ctx)
	cdone := make(chan error, 1)
	go func() { cdone <- coord.Run(cctx) }()
	t.Cleanup(func() {
		stopCoord()
		if err := <-cdone; err != nil {
			t.Errorf("coordinator Run: %v", err)
		}
	})
	redistest.Eventually(t, 10*time.Second, func() error {
		// Leading, and a first rebalance done: the policy is loaded, so
		// reports are taken.
		st, err := coord.Status(ctx)
		if err != nil || !st.IsLeader || st.LastRebalance == "" {
			return fmt.Errorf("leader not ready: %+v, %w", st, err)
		}
		return nil
	})

	// Grants for a tenant the leader does not manage, written as a leader
	// would (the fence here is a compare that always holds).
	always := clientv3.Compare(clientv3.CreateRevision("/no-such-key"), "=", 0)
	write := func(epoch uint64, rate float64, burst int64) {
		t.Helper()
		c := shares.Change{Tenant: "t-prompt", Region: "us-east",
			Grant: shares.Grant{Rate: rate, Burst: burst, Epoch: epoch}, Ceiling: shares.Ceiling{Rate: rate, Burst: burst}}
		if _, err := p.st.WriteGrants(ctx, always, []shares.Change{c}); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, 10*time.Second, func() error {
			if got := p.s.view.applied(); got < epoch {
				return fmt.Errorf("pod applied epoch %d, want %d", got, epoch)
			}
			return nil
		})
	}
	accepted := func() float64 { return testutil.ToFloat64(p.s.m.reports.WithLabelValues("accepted")) }
	leaderSees := func() (uint64, int) {
		st, err := coord.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range st.Regions {
			if r.Region == "us-east" {
				return r.Applied, r.Pods
			}
		}
		return 0, 0
	}

	write(1, 50, 10) // a first grant: nothing to acknowledge promptly
	write(2, 60, 12) // a grow: likewise
	write(3, 20, 4)  // a shrink: report now
	redistest.Eventually(t, 10*time.Second, func() error {
		if applied, pods := leaderSees(); pods != 1 || applied != 3 {
			return fmt.Errorf("leader sees us-east with %d pods, applied %d; want 1 pod, applied 3", pods, applied)
		}
		if accepted() < 1 {
			return fmt.Errorf("the pod has not counted its report's answer yet")
		}
		return nil
	})
	if n := accepted(); n != 1 {
		t.Errorf("the pod sent %v accepted reports, want exactly 1 (the prompt report after the shrink)", n)
	}
}

// The grant mirror signals a shrink (a lower rate or burst than the tenant's
// previous grant), and nothing else: a first grant, a grow, or a replay of an
// older epoch.
func TestGrantMirrorSignalsShrinks(t *testing.T) {
	etcd := etcdtest.Start(t)
	cl := etcd.Client(t)
	st := state.New(cl, "")
	ctx := context.Background()
	always := clientv3.Compare(clientv3.CreateRevision("/no-such-key"), "=", 0)
	kv := func(tenant string, epoch uint64, rate float64, burst int64) *mvccpb.KeyValue {
		t.Helper()
		c := shares.Change{Tenant: tenant, Region: "us-east",
			Grant: shares.Grant{Rate: rate, Burst: burst, Epoch: epoch}, Ceiling: shares.Ceiling{Rate: rate, Burst: burst}}
		if _, err := st.WriteGrants(ctx, always, []shares.Change{c}); err != nil {
			t.Fatal(err)
		}
		r, err := cl.Get(ctx, st.GrantsPrefix("us-east"), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range r.Kvs {
			if got, err := st.DecodeGrant(x.Key, x.Value); err == nil && got.Tenant == tenant {
				return x
			}
		}
		t.Fatalf("grant of %s not found", tenant)
		return nil
	}
	v := newView("us-east", st, 0)
	m := grantMirror{v: v, now: time.Now}
	for i, step := range []struct {
		tenant string
		epoch  uint64
		rate   float64
		burst  int64
		want   bool
	}{
		{"a", 1, 50, 10, false}, // first grant
		{"a", 2, 60, 12, false}, // grow
		{"a", 3, 60, 12, false}, // unchanged
		{"a", 4, 40, 12, true},  // rate shrinks
		{"a", 5, 40, 8, true},   // burst shrinks
		{"b", 6, 10, 2, false},  // another tenant's first grant
		{"a", 7, 90, 20, false}, // grow
		{"a", 3, 10, 1, false},  // an older epoch: ignored
	} {
		m.Put(kv(step.tenant, step.epoch, step.rate, step.burst))
		got := false
		select {
		case <-v.shrunk:
			got = true
		default:
		}
		if got != step.want {
			t.Errorf("step %d: grant %s epoch %d %v/%d: signalled %v, want %v", i, step.tenant, step.epoch, step.rate, step.burst, got, step.want)
		}
	}
}
