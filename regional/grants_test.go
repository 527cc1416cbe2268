package regional

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/allot-dev/allot/coordinator"
	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/policy"
)

// A grant the leader writes is applied on its watch event and enforced while
// the lease its answers renew is valid; when the leader goes away the lease
// lapses and the region drops to its floor.
func TestGrantAppliedAndLeaseLapse(t *testing.T) {
	etcd := etcdtest.Start(t)
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p := startPodOn(t, etcd, ms, func(c *Config) {
		c.ReportInterval = 100 * time.Millisecond
		c.Drift = 200 * time.Millisecond
	})
	ctx := context.Background()
	if _, err := p.st.PutBudget(ctx, "t9", policy.Budget{Rate: "100/s", Burst: 20}, false, 0); err != nil {
		t.Fatal(err)
	}
	budget := func() *tenantEntry { return p.s.view.tenant("t9") }
	// Before any grant or lease: the floor (10% of R over 2 regions).
	if r, _, leased := p.s.view.effective(time.Now(), "t9", budget().budget); leased || r != 5 {
		t.Fatalf("before the coordinator: effective %v/s leased %v, want the floor 5/s", r, leased)
	}

	ccfg := coordinator.DefaultConfig()
	ccfg.ID, ccfg.Etcd = "c1", etcd.Client(t)
	ccfg.SessionTTL, ccfg.RebalanceInterval, ccfg.Lease = time.Second, 100*time.Millisecond, 1500*time.Millisecond
	ccfg.Shares.Interval = ccfg.RebalanceInterval
	ccfg.Reports = coordinator.ReportAuth{Insecure: true} // report auth: reportcheck_test.go
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
	cctx, stopCoord := context.WithCancel(ctx)
	cdone := make(chan error, 1)
	go func() { cdone <- coord.Run(cctx) }()

	// Traffic in us-east only: the leader grants it most of the budget.
	redistest.Eventually(t, 15*time.Second, func() error {
		for range 20 {
			if _, err := p.s.Decide(ctx, map[string]string{"tenant": "t9"}, 1); err != nil {
				return err
			}
		}
		g, _, err := p.st.Grants(ctx, "us-east")
		if err != nil {
			return err
		}
		for _, c := range g {
			if c.Tenant != "t9" {
				continue
			}
			// Applied on its watch event, and enforced under a valid lease.
			got, ok := func() (float64, bool) {
				p.s.view.mu.RLock()
				defer p.s.view.mu.RUnlock()
				gr, ok := p.s.view.reg.Grant("t9")
				return gr.Rate, ok && gr.Epoch == c.Grant.Epoch
			}()
			r, _, leased := p.s.view.effective(time.Now(), "t9", budget().budget)
			if ok && leased && r == got && r > 5 {
				return nil
			}
			return fmt.Errorf("grant %v/s epoch %d in etcd; pod applied %v (%v), enforces %v/s leased %v", c.Grant.Rate, c.Grant.Epoch, got, ok, r, leased)
		}
		return errors.New("no grant for t9 yet")
	})

	// The leader goes away: no more renewals; the lease lapses and the
	// region enforces its floor again.
	stopCoord()
	if err := <-cdone; err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	redistest.Eventually(t, 5*time.Second, func() error {
		if r, _, leased := p.s.view.effective(time.Now(), "t9", budget().budget); leased || r != 5 {
			return fmt.Errorf("still enforcing %v/s leased %v", r, leased)
		}
		return nil
	})
	if el := time.Since(start); el > ccfg.Lease {
		t.Errorf("floors after %v, want within the lease %v", el, ccfg.Lease)
	}
	if p.s.Leased() {
		t.Error("Leased() = true after the lapse")
	}
}
