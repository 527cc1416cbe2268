package coordinator

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/shares"
)

// The leader writes nothing to etcd per grant, and the grants it changes
// (and sends pods) grow with the grants that change, not with the number of
// tenants: with 300 steady tenants a rebalance changes nothing and answers
// carry no grant, and when one tenant's demand shifts only that tenant's
// grants change. Two pods per region.
func TestWritesScaleWithChanges(t *testing.T) {
	// A fake clock and a hand-driven ticker: every step is one rebalance
	// interval with exactly one report per region.
	k := startTicked(t, nil)
	n := k.n
	const tenants = 300
	regions := []string{"us-east", "eu-west", "ap-south"}
	const interval = 2 * time.Second
	usage := func(shift bool) map[string]map[string]shares.Usage {
		out := map[string]map[string]shares.Usage{}
		for i, r := range regions {
			u := map[string]shares.Usage{}
			for k := range tenants {
				// 100/s tier budget; demand 150/s skewed 70/20/10 (in a
				// 100 ms report interval: units per interval).
				share := []float64{0.7, 0.2, 0.1}[i]
				if shift && k == 0 {
					share = []float64{0.1, 0.2, 0.7}[i]
				}
				x := 150 * interval.Seconds() * share
				u[fmt.Sprintf("t%03d", k)] = shares.Usage{Offered: x, Admitted: x}
			}
			out[r] = u
		}
		return out
	}
	// Two pods per region, each reporting half of its region's traffic and
	// applying every answer.
	var pods []*tpod
	for _, r := range regions {
		pods = append(pods, newTPod(r, r+"-0"), newTPod(r, r+"-1"))
	}
	answered := 0
	reportAll := func(u map[string]map[string]shares.Usage) {
		now := k.now()
		for _, p := range pods {
			half := map[string]shares.Usage{}
			for k, v := range u[p.region] {
				half[k] = shares.Usage{Offered: v.Offered / 2, Admitted: v.Admitted / 2}
			}
			ans, err := p.report(n.c, now, interval, half, true)
			if err != nil {
				t.Fatal(err)
			}
			answered += len(ans.Entries)
		}
	}
	writes := func() float64 { return testutil.ToFloat64(n.c.m.grantWrites) }
	// step advances the clock one interval, reports, and rebalances.
	step := func(u map[string]map[string]shares.Usage) {
		k.advance(interval)
		reportAll(u)
		k.rebalance(t)
	}

	// Converge (the allocator's EWMA settles within ~10 intervals), then
	// watch 10 rebalances of steady traffic.
	steady := usage(false)
	for range 25 { // (the first few in the learning period)
		step(steady)
	}
	total := writes()
	rev0 := etcdRev(t, k.srv)
	sent := answered
	for range 10 {
		step(steady)
	}
	if w := writes() - total; w != 0 {
		t.Fatalf("10 rebalances of steady traffic from %d tenants changed %v grants, want 0", tenants, w)
	}
	if a := answered - sent; a != 0 {
		t.Fatalf("10 rounds of steady reports were answered with %d grants, want 0 (nothing changed)", a)
	}
	if rev := etcdRev(t, k.srv); rev != rev0 {
		t.Fatalf("etcd revision %d → %d over 10 rebalances: the leader wrote to etcd", rev0, rev)
	}
	t.Logf("%d tenants: %v grant changes to converge, then 0 over 10 steady rebalances and no etcd write", tenants, total)

	// Shift one tenant: only its grants are written.
	shifted := usage(true)
	w0 := writes()
	for range 15 {
		step(shifted)
	}
	got := writes() - w0
	if got == 0 || got > 15*float64(len(regions)) {
		t.Fatalf("one tenant's shift changed %v grants over 15 rebalances; want some, at most %d (that tenant's regions only)", got, 15*len(regions))
	}
	t.Logf("shift of one tenant: %v grant changes over 15 rebalances", got)
	rates := map[string]float64{}
	for _, p := range pods {
		g, _ := p.st.Grant("t000")
		rates[p.region] = g.Rate
	}
	t.Logf("t000 grants after the shift: %v", rates)
	// The status page charts the busiest tenants over time.
	rec := httptest.NewRecorder()
	n.c.Handler(Auth{Insecure: true}, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/?tenant=t000", nil))
	if body := rec.Body.String(); !strings.Contains(body, "Over time: t000") || strings.Count(body, "<polyline") != 9 {
		t.Errorf("status page lacks t000's chart (3 regions × admitted, offered, grant):\n%.2000s", body)
	}
	if !(rates["ap-south"] > rates["eu-west"] && rates["eu-west"] > rates["us-east"]) {
		t.Errorf("t000 grants after the shift = %v, want ap-south > eu-west > us-east", rates)
	}
}

// etcdRev is etcd's current revision.
func etcdRev(t *testing.T, srv *etcdtest.Server) int64 {
	t.Helper()
	r, err := srv.Client(t).Get(context.Background(), "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// A grow that waits for a shrink's acknowledgement is made as soon as the
// report carrying the last awaited acknowledgement arrives, before the next
// tick: the report handler wakes the leader loop, which grows without a
// rebalance. With two pods in the shrinking region, the first pod's
// acknowledgement is not enough.
func TestGrowBeforeNextTick(t *testing.T) {
	k := startTicked(t, nil)
	n, now := k.n, k.now
	regions := []string{"us-east", "eu-west", "ap-south"}
	const interval = 2 * time.Second
	usage := func(r string, split []float64) map[string]shares.Usage {
		// 150/s against the 100/s tier budget, half per pod.
		x := 150 * interval.Seconds() * split[slices.Index(regions, r)] / 2
		return map[string]shares.Usage{"t1": {Offered: x, Admitted: x}}
	}
	pods := map[string][2]*tpod{}
	for _, r := range regions {
		pods[r] = [2]*tpod{newTPod(r, r+"-0"), newTPod(r, r+"-1")}
	}
	report := func(p *tpod, split []float64, apply bool) {
		t.Helper()
		if _, err := p.report(n.c, now(), interval, usage(p.region, split), apply); err != nil {
			t.Fatal(err)
		}
	}
	rebalances := k.rebalances
	tickOnce := func() { t.Helper(); k.rebalance(t) }
	leaderGrant := func(region string) shares.Grant {
		n.c.mu.Lock()
		defer n.c.mu.Unlock()
		return n.c.term.lead.Allocator().Grants("t1")[region]
	}
	before, after := []float64{0.7, 0.2, 0.1}, []float64{0.1, 0.2, 0.7}
	// Learn, then converge, every pod applying every answer.
	for range 20 {
		k.advance(interval)
		for _, r := range regions {
			report(pods[r][0], before, true)
			report(pods[r][1], before, true)
		}
		tickOnce()
		for _, r := range regions {
			report(pods[r][0], before, true)
			report(pods[r][1], before, true)
		}
	}
	east0, south0 := leaderGrant("us-east"), leaderGrant("ap-south")
	// The shift is reported; the rebalance shrinks us-east and defers
	// ap-south's grow.
	k.advance(interval)
	for _, r := range regions {
		report(pods[r][0], after, true)
		report(pods[r][1], after, true)
	}
	tickOnce()
	shrink, south1 := leaderGrant("us-east"), leaderGrant("ap-south")
	if shrink.Rate >= east0.Rate-10 {
		t.Fatalf("after the shift us-east holds %+v (was %.1f/s), want a shrink", shrink, east0.Rate)
	}
	if south1.Rate > south0.Rate+1 {
		t.Fatalf("ap-south grew to %.1f/s (from %.1f/s) before us-east acknowledged its shrink", south1.Rate, south0.Rate)
	}
	// us-east's pods learn the shrink from their next answers; only the
	// first acknowledges it: no grow.
	k.advance(interval / 8)
	report(pods["us-east"][0], after, true)
	report(pods["us-east"][1], after, true)
	r0 := rebalances()
	report(pods["us-east"][0], after, true)
	// The leader loop grows only what the leader says is growable: nothing
	// is, and ap-south holds what it held.
	n.c.mu.Lock()
	growable := n.c.term.lead.Growable()
	n.c.mu.Unlock()
	if g := leaderGrant("ap-south"); growable || g.Rate > south1.Rate+1 {
		t.Fatalf("ap-south at %.1f/s (growable %v) when one of us-east's two pods acknowledged the shrink", g.Rate, growable)
	}
	// The second acknowledges: ap-south grows before the next tick.
	report(pods["us-east"][1], after, true)
	wait.Until(t, 10*time.Second, func() error {
		if g := leaderGrant("ap-south"); g.Rate < south1.Rate+15 {
			return fmt.Errorf("ap-south holds %.1f/s, want a grow above %.1f/s", g.Rate, south1.Rate+15)
		}
		return nil
	})
	if got := rebalances(); got != r0 {
		t.Fatalf("rebalances %v → %v: the grow came from a rebalance, want it before the next tick", r0, got)
	}
	wait.Until(t, 5*time.Second, func() error {
		if got := testutil.ToFloat64(n.c.m.earlyGrows); got < 1 {
			return fmt.Errorf("allot_early_grows_total = %v, want ≥ 1", got)
		}
		return nil
	})
	// What every pod may enforce (once they apply the grow) stays within
	// the budget.
	for _, r := range regions {
		report(pods[r][0], after, true)
		report(pods[r][1], after, true)
	}
	var sum float64
	for _, r := range regions {
		sum += max(pods[r][0].enforced(now(), "t1"), pods[r][1].enforced(now(), "t1"))
	}
	if sum > 100*(1+1e-9) {
		t.Errorf("Σ enforced after the early grow = %.3f/s, want ≤ 100/s", sum)
	}
	t.Logf("us-east %.1f → %.1f/s; ap-south %.1f → %.1f/s before the next tick", east0.Rate, shrink.Rate, south1.Rate, leaderGrant("ap-south").Rate)
}
