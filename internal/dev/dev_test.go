package dev

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

// The whole system in one process: pods report, the leader rebalances, the
// grants reach the pods through etcd, and the world admits about what one
// global limiter would — never more than B + R·t.
func TestSharesFollowTraffic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HTTPListen = "127.0.0.1:0"
	cfg.RebalanceInterval = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan *Cluster, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, func(c *Cluster) { ready <- c }) }()
	var cl *Cluster
	select {
	case cl = <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("dev cluster not ready in 30s")
	}
	const R, B = 100.0, 20
	if _, err := cl.State.PutBudget(ctx, "t1", policy.Budget{Rate: "100/s", Burst: B}, false, 0); err != nil {
		t.Fatal(err)
	}
	// 150/s offered, 70/20/10.
	load := &Load{Tenant: "t1", Rates: Skewed(cfg.Regions, 1.5*R, time.Hour)}
	lctx, stop := context.WithCancel(ctx)
	go load.Run(lctx, cl.Regions)

	// Let shares converge (grants ordered like demand), then measure 3 s.
	wait.Until(t, 20*time.Second, func() error {
		v, err := cl.Coordinator.Shares(ctx, "t1", "")
		if err != nil {
			return err
		}
		g := map[string]float64{}
		for _, s := range v.Regions {
			g[s.Region] = s.Rate
		}
		if g["us-east"] > 2*g["eu-west"] && g["eu-west"] > g["ap-south"] {
			return nil
		}
		return fmt.Errorf("grants do not follow demand: %v", g)
	})
	<-time.After(time.Second)
	before := load.Counts()
	t0 := time.Now()
	<-time.After(3 * time.Second) // the measurement window
	after := load.Counts()
	el := time.Since(t0).Seconds()
	stop()

	admitted := 0.0
	for _, r := range cfg.Regions {
		admitted += float64(after[r][1] - before[r][1])
	}
	grants := map[string]float64{}
	v, err := cl.Coordinator.Shares(ctx, "t1", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range v.Regions {
		grants[s.Region] = s.Rate
	}
	t.Logf("admitted %.0f in %.2fs (%.1f/s of R %.0f/s); grants %v", admitted, el, admitted/el, R, grants)
	if admitted > B+R*el+1 {
		t.Errorf("admitted %.0f > B + R·t = %.0f", admitted, B+R*el)
	}
	if admitted < 0.85*R*el {
		t.Errorf("admitted %.0f < 85%% of R·t = %.0f: shares do not follow traffic", admitted, 0.85*R*el)
	}
	if !(grants["us-east"] > grants["eu-west"] && grants["eu-west"] > grants["ap-south"]) {
		t.Errorf("grants %v do not follow the 70/20/10 demand", grants)
	}
	st, err := cl.Coordinator.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Regions {
		if r.Pods != 1 || !r.LeaseValid {
			t.Errorf("region %s: %d pods, lease valid %v; want 1 pod with a valid lease", r.Region, r.Pods, r.LeaseValid)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(fmt.Errorf("Run: %w", err))
	}
}
