package regional

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/internal/coordtest"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy"
)

// Until a leader answers it, a pod enforces nothing for budget limits (and
// is not ready). The leader's answers carry the region's grants and renew
// the lease; when the leader goes away the lease lapses and the pod enforces
// the floor the leader gave it. Two pods in the region.
func TestGrantAppliedAndLeaseLapse(t *testing.T) {
	etcd := etcdtest.Start(t)
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	adjust := func(c *Config) { c.Drift = 200 * time.Millisecond }
	p := startPodWith(t, etcd, ms, adjust, false)
	q := startPodWith(t, etcd, ms, adjust, false)
	ctx := context.Background()
	if _, err := p.st.PutBudget(ctx, "t9", policy.Budget{Rate: "100/s", Burst: 20}, false, 0); err != nil {
		t.Fatal(err)
	}
	budget := func() *tenantEntry { return p.s.view.tenant("t9") }
	wait.Until(t, 5*time.Second, func() error {
		if budget().budget.Rate != 100 {
			return errors.New("budget not mirrored yet")
		}
		return nil
	})
	// Several reports went out, none answered.
	wait.Until(t, 5*time.Second, func() error {
		if n := testutil.ToFloat64(p.s.m.reports.WithLabelValues("no_leader")); n < 2 {
			return fmt.Errorf("%v reports found no leader, want 2", n)
		}
		return nil
	})
	if r, _, _ := p.s.view.tenantEffective(time.Now(), budget()); r != 0 || p.s.Ready() {
		t.Fatalf("before any leader: effective %v/s, ready %v; want 0 and not ready", r, p.s.Ready())
	}
	if d, err := p.s.Decide(ctx, map[string]string{"tenant": "t9"}, 1); err != nil || d.Allowed {
		t.Fatalf("before any leader: decide = %+v, %v; want a denial", d, err)
	}

	coord := coordtest.Start(t, coordtest.Fast(etcd.Client(t)))
	// Traffic in us-east only: the leader grants it most of the budget.
	wait.Until(t, 15*time.Second, func() error {
		for range 20 {
			if _, err := p.s.Decide(ctx, map[string]string{"tenant": "t9"}, 1); err != nil {
				return err
			}
		}
		if !p.s.Ready() || !q.s.Ready() {
			return errors.New("pods not ready")
		}
		r, _, leased := p.s.view.tenantEffective(time.Now(), budget())
		rq, _, _ := q.s.view.tenantEffective(time.Now(), budget())
		if !leased || r <= 5 || r != rq {
			return fmt.Errorf("pods enforce %v/s (leased %v) and %v/s; want the same leased grant above the floor", r, leased, rq)
		}
		return nil
	})

	// The leader goes away: no more renewals; the lease lapses and each pod
	// enforces the leader's floor (10% of R over 2 regions).
	coord.Stop()
	start := time.Now()
	wait.Until(t, 5*time.Second, func() error {
		if r, _, leased := p.s.view.tenantEffective(time.Now(), budget()); leased || r != 5 {
			return fmt.Errorf("still enforcing %v/s leased %v", r, leased)
		}
		return nil
	})
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Errorf("floors after %v, want within the lease 1.5s", el)
	}
	if p.s.Leased() {
		t.Error("Leased() = true after the lapse")
	}
}
