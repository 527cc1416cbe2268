package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/allot-dev/allot/shares"
)

// Tenants without a budget record or a policy entry are forgotten after
// TenantIdleTimeout without traffic, their grants dropped at every pod of
// every region (two per region); the leader tracks at most MaxTenants and
// counts the usage it drops; a forgotten tenant that comes back is granted
// again.
func TestIdleTenantsForgottenAndCapped(t *testing.T) {
	const idle = 20 * time.Second
	k := startTicked(t, func(c *Coordinator) {
		c.cfg.TenantIdleTimeout = idle
		c.cfg.MaxTenants = 5 // the policy's three, and two more
	})
	n, now := k.n, k.now
	regions := []string{"us-east", "eu-west", "ap-south"}
	const interval = 2 * time.Second
	var pods []*tpod
	for _, r := range regions {
		pods = append(pods, newTPod(r, r+"-0"), newTPod(r, r+"-1"))
	}
	round := func(tenants ...string) {
		t.Helper()
		k.advance(interval)
		use := map[string]shares.Usage{}
		for _, tn := range tenants {
			use[tn] = shares.Usage{Offered: 20, Admitted: 20}
		}
		for _, p := range pods {
			if _, err := p.report(n.c, now(), interval, use, true); err != nil {
				t.Fatal(err)
			}
		}
		k.rebalance(t)
		for _, p := range pods {
			if _, err := p.report(n.c, now(), interval/4, use, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	holders := func(tenant string) int {
		h := 0
		for _, p := range pods {
			if _, ok := p.st.Grant(tenant); ok {
				h++
			}
		}
		return h
	}
	// Learn, then grant: two reported tenants beside the policy's three;
	// a third is beyond the cap (new tenants of one report join in name
	// order).
	for range 12 {
		round("a-idle", "b-busy", "z-capped")
	}
	if got := testutil.ToFloat64(n.c.m.tenants); got != 5 {
		t.Fatalf("allot_coordinator_tenants = %v, want 5 (the cap)", got)
	}
	if got := testutil.ToFloat64(n.c.m.tenantsDropped); got < 1 {
		t.Fatalf("allot_coordinator_tenants_dropped_total = %v, want ≥ 1 (z-capped)", got)
	}
	if h := holders("a-idle"); h != len(pods) {
		t.Fatalf("%d of %d pods hold a grant of a-idle", h, len(pods))
	}
	if h := holders("z-capped"); h != 0 {
		t.Fatalf("%d pods hold a grant of z-capped, beyond the cap", h)
	}
	// a-idle stops; b-busy goes on. Past the idle timeout, a-idle is
	// forgotten and every pod drops its grant; t42 (a policy entry) and
	// b-busy stay.
	start := now()
	for now().Sub(start) < idle+10*interval && testutil.ToFloat64(n.c.m.tenantsForgotten) < 1 {
		round("b-busy")
	}
	if got := testutil.ToFloat64(n.c.m.tenantsForgotten); got != 1 {
		t.Fatalf("allot_coordinator_tenants_forgotten_total = %v after %v idle, want 1", got, now().Sub(start))
	}
	if d := now().Sub(start); d < idle {
		t.Fatalf("a-idle forgotten after %v, before the idle timeout %v", d, idle)
	}
	round("b-busy") // the tombstones' acknowledgement reached every pod
	if h := holders("a-idle"); h != 0 {
		t.Fatalf("%d pods still hold a grant of forgotten a-idle", h)
	}
	for _, tn := range []string{"b-busy", "t42"} {
		if h := holders(tn); h != len(pods) {
			t.Fatalf("%d of %d pods hold a grant of %s, want all", h, len(pods), tn)
		}
	}
	if got := testutil.ToFloat64(n.c.m.tenants); got != 4 {
		t.Fatalf("allot_coordinator_tenants = %v after forgetting a-idle, want 4", got)
	}
	// Its place is free: z-capped is tracked now.
	for range 4 {
		round("b-busy", "z-capped")
	}
	if h := holders("z-capped"); h != len(pods) {
		t.Fatalf("%d of %d pods hold a grant of z-capped once a place was free", h, len(pods))
	}
	st, err := n.c.Status(context.Background())
	if err != nil || st.Tenants != 5 {
		t.Fatalf("status: %d tenants, %v; want 5", st.Tenants, err)
	}
	t.Logf("a-idle forgotten after %v without traffic (timeout %v); %s", now().Sub(start), idle,
		fmt.Sprintf("dropped usage reports %v", testutil.ToFloat64(n.c.m.tenantsDropped)))
}
