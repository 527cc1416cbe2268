package regional

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/internal/coordtest"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy"
)

// eventsPolicy names the regions; the tenants under test have budgets of
// their own.
func eventsPolicy(regions string) string { return tierPolicy(regions, "5/s", 3) }

// tierPolicy names the regions and one limit on the default tier's budget.
func tierPolicy(regions, rate string, burst int) string {
	return fmt.Sprintf(`version: 1
regions: [%s]
default_tier: free
limits:
  - name: tenant
    descriptors: [tenant]
    rate: budget
tiers:
  free:
    budget: {rate: %s, burst: %d}
`, regions, rate, burst)
}

// eventsRig is a coordinator that rebalances only every 2 s (as in
// production) and pods that report every 2 s, so that what happens sooner
// is the event-driven protocol's doing: early reports of steps, rebalances
// as they arrive, pushes.
type eventsRig struct {
	etcd  *etcdtest.Server
	coord *coordtest.Coordinator
	pods  map[string][]*pod // by region
}

func newEventsRig(t *testing.T, regions []string, podsPer map[string]int) *eventsRig {
	t.Helper()
	return newEventsRigEvery(t, regions, podsPer, 2*time.Second)
}

// newEventsRigEvery is newEventsRig with pods that report every interval.
func newEventsRigEvery(t *testing.T, regions []string, podsPer map[string]int, interval time.Duration) *eventsRig {
	t.Helper()
	etcd := etcdtest.Start(t)
	cfg := coordtest.Fast(etcd.Client(t))
	cfg.RebalanceInterval, cfg.Lease = 2*time.Second, 6*time.Second
	cfg.Shares.Interval = cfg.RebalanceInterval
	leaders.Store(etcd, true)
	r := &eventsRig{etcd: etcd, coord: coordtest.Start(t, cfg), pods: map[string][]*pod{}}
	for _, region := range regions {
		ms, err := memstore.New(memstore.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		for range podsPer[region] {
			p := startPodWith(t, etcd, ms, func(c *Config) {
				c.Region, c.ReportInterval = region, interval
			}, false)
			r.pods[region] = append(r.pods[region], p)
		}
	}
	first := r.pods[regions[0]][0]
	if _, err := first.st.ApplyPolicy(context.Background(), []byte(eventsPolicy(joinRegions(regions))), 0, "test"); err != nil {
		t.Fatal(err)
	}
	r.waitReady(t, len(regions))
	return r
}

func joinRegions(rs []string) string {
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += ", "
		}
		out += r
	}
	return out
}

// waitReady waits until the leader's term of the policy's regions has
// learnt, and every pod holds that term's grants under a lease.
func (r *eventsRig) waitReady(t *testing.T, regions int) {
	t.Helper()
	wait.Until(t, 30*time.Second, func() error {
		st, err := r.coord.Status(context.Background())
		if err != nil {
			return err
		}
		if !st.IsLeader || st.Learning || len(st.Regions) != regions {
			return fmt.Errorf("the leader is learning (%v), or leads %d regions, not %d", st.Learning, len(st.Regions), regions)
		}
		for region, ps := range r.pods {
			for i, p := range ps {
				p.s.view.mu.RLock()
				current := p.s.view.pods[0].Synced() && p.s.view.pods[0].Held() == nil
				p.s.view.mu.RUnlock()
				if !current || !p.s.view.leaseUntil().After(time.Now()) {
					return fmt.Errorf("pod %d of %s holds no lease of the leader's term yet", i, region)
				}
			}
		}
		return nil
	})
}

// budget writes tenant's budget and waits until the leader and every pod
// have it.
func (r *eventsRig) budget(t *testing.T, tenant string, b policy.Budget, rate float64) {
	t.Helper()
	var any *pod
	for _, ps := range r.pods {
		any = ps[0]
	}
	if _, err := any.st.PutBudget(context.Background(), tenant, b, false, 0); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		if b, ok := r.coord.LeaderBudget(tenant); !ok || b.Rate != rate {
			return fmt.Errorf("the leader rebalances %s under %+v, not its budget yet", tenant, b)
		}
		for region, ps := range r.pods {
			for _, p := range ps {
				if te := p.s.view.tenant(tenant); te == nil || te.budget.Rate != rate {
					return fmt.Errorf("a pod of %s has not mirrored %s's budget", region, tenant)
				}
			}
		}
		return nil
	})
}

// enforced is the largest rate any pod of region enforces for tenant: what
// the region's store admits.
func (r *eventsRig) enforced(region, tenant string) float64 {
	var most float64
	for _, p := range r.pods[region] {
		if te := p.s.view.tenant(tenant); te != nil {
			rate, _, _ := p.s.view.tenantEffective(time.Now(), te)
			most = max(most, rate)
		}
	}
	return most
}

// drive offers tenant's traffic in region at the rate rate holds (units per
// second, evenly, over the region's pods in turn) until ctx ends, counting
// denials.
func (r *eventsRig) drive(ctx context.Context, wg *sync.WaitGroup, region, tenant string, rate *atomic.Int64, denied *atomic.Int64) {
	wg.Go(func() {
		ps := r.pods[region]
		next := time.Now()
		for k := 0; ctx.Err() == nil; k++ {
			per := rate.Load()
			if per <= 0 {
				next = time.Now().Add(10 * time.Millisecond)
			} else {
				next = next.Add(time.Second / time.Duration(per))
			}
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			if per <= 0 {
				continue
			}
			d, err := ps[k%len(ps)].s.Decide(ctx, map[string]string{"tenant": tenant}, 1)
			if err == nil && !d.Allowed && denied != nil {
				denied.Add(1)
			}
		}
	})
}

// When demand moves from one region to the other, the region that gained
// it is granted its share within a second, though the leader rebalances
// and the pods report only every two seconds: its pods report the step at
// once, the leader rebalances as the reports arrive and pushes the shrink
// and the grow; at no instant do the regions together enforce more than
// the budget. Two pods per region, on real etcd, coordinator and gRPC.
func TestShiftFollowsWithinASecond(t *testing.T) {
	regions := []string{"us-east", "eu-west"}
	r := newEventsRig(t, regions, map[string]int{"us-east": 2, "eu-west": 2})
	const R = 300.0
	r.budget(t, "t1", policy.Budget{Rate: "300/s", Burst: 30}, R)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var east, west atomic.Int64
	east.Store(400)
	west.Store(20)
	r.drive(ctx, &wg, "us-east", "t1", &east, nil)
	r.drive(ctx, &wg, "eu-west", "t1", &west, nil)

	// I4 throughout: sampled every 5 ms.
	var worst atomic.Int64 // Σ enforced, milli-units per second
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			s := r.enforced("us-east", "t1") + r.enforced("eu-west", "t1")
			if m := int64(s * 1000); m > worst.Load() {
				worst.Store(m)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	wait.Until(t, 15*time.Second, func() error {
		if g := r.enforced("us-east", "t1"); g < 250 {
			return fmt.Errorf("us-east enforces %.1f/s, want most of R (≥ 250) before the shift", g)
		}
		return nil
	})

	// us-east 400 → 20/s, eu-west 20 → 400/s: eu-west's fair share is
	// 400·R/420 = 286/s; with floors, the allocator gives it 281/s.
	east.Store(20)
	west.Store(400)
	shifted := time.Now()
	var took time.Duration
	wait.Until(t, 10*time.Second, func() error {
		if g := r.enforced("eu-west", "t1"); g < 0.9*281 {
			return fmt.Errorf("eu-west enforces %.1f/s %v after the shift, want ≥ %.0f/s", g, time.Since(shifted).Round(time.Millisecond), 0.9*281)
		}
		took = time.Since(shifted)
		return nil
	})
	cancel()
	wg.Wait()
	t.Logf("eu-west reached 90%% of its share %v after the shift (rebalance and report interval 2s); peak Σ enforced %.1f/s of %.0f",
		took.Round(time.Millisecond), float64(worst.Load())/1000, R)
	if took > 1500*time.Millisecond {
		t.Errorf("eu-west took %v to reach 90%% of its share, want under 1.5 s (the protocol's clock is 2 s)", took)
	}
	if s := float64(worst.Load()) / 1000; s > R*(1+1e-9) {
		t.Errorf("the regions together enforced %.2f/s at one instant, above R = %.0f", s, R)
	}
	var pushes, steps float64
	for _, ps := range r.pods {
		for _, p := range ps {
			pushes += testutil.ToFloat64(p.s.m.pushes.WithLabelValues("applied"))
			steps += testutil.ToFloat64(p.s.m.earlyReports.WithLabelValues("step"))
		}
	}
	if pushes == 0 || steps == 0 {
		t.Errorf("pushes applied %v, early reports of steps %v: want both", pushes, steps)
	}
}

// A tenant that has never been seen is never denied below its budget in a
// deployment of one region: the region's floor is the whole budget, and its
// pod asks for a grant with its first request. With three regions a pod
// that holds no grant made from the tenant's demand decides at a floor (the
// default tier's cold floor, or the tenant's floor split three ways: 3.3/s,
// burst 1), which the first request spends; the pod's first request asks
// for a grant at once, and the leader grows the region into what no region
// enforces, pushing it to the region's other pods. So a request is denied
// only (a) by a pod that does not hold that grant yet (the first request's
// round trip), or (b) as the first decision of the region's key under the
// new grant, which restates what the floor's request spent without minting
// (gcra.Convert): it waits at most one emission interval of the new grant.
// Requests at 12/s against 100/s burst 10.
func TestNewTenantNotDenied(t *testing.T) {
	for _, c := range []struct {
		name    string
		regions []string
	}{
		{"one region", []string{"us-east"}},
		{"three regions", []string{"us-east", "eu-west", "ap-south"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			per := map[string]int{"us-east": 2, "eu-west": 1, "ap-south": 1}
			r := newEventsRig(t, c.regions, per)
			r.budget(t, "fresh", policy.Budget{Rate: "100/s", Burst: 10}, 100)
			ps := r.pods["us-east"]
			start := time.Now()
			var before, restated, late int
			var prevRate float64 // the rate the region's key was last decided under
			pace := time.NewTicker(time.Second / 12)
			defer pace.Stop()
			for k := range 36 { // 3 s at 12/s
				if k > 0 {
					<-pace.C
				}
				p := ps[k%len(ps)]
				rate, _, _ := p.s.view.tenantEffective(time.Now(), p.s.view.tenant("fresh"))
				d, err := p.s.Decide(context.Background(), map[string]string{"tenant": "fresh"}, 1)
				if err != nil {
					t.Fatal(err)
				}
				was := prevRate
				prevRate = rate
				if d.Allowed {
					continue
				}
				at := time.Since(start).Round(time.Millisecond)
				switch {
				case len(c.regions) > 1 && rate < 12:
					before++
					t.Logf("request %d, %v after the first: denied at %.2f/s, before the pod held a grant made from the demand", k, at, rate)
				case len(c.regions) > 1 && was != rate && d.RetryAfter <= time.Duration(float64(time.Second)/rate)+time.Millisecond:
					restated++
					t.Logf("request %d, %v after the first: the key's first decision under %.2f/s (was %.2f/s) waits %v", k, at, rate, was, d.RetryAfter)
				default:
					late++
					t.Errorf("request %d, %v after the first, decided at %.2f/s: denied %+v", k, at, rate, d)
				}
			}
			t.Logf("%s: %d of 36 requests denied before the pod held the grant, %d as the key's first decision under it, %d otherwise",
				c.name, before, restated, late)
		})
	}
}

// A pod that has just got its first answer of a term (it started, or a new
// leader took over) is pushed the region's next changes at once: it says
// which epoch it holds right after applying that full answer, rather than
// with its next periodic report, up to an interval later. Here pods report
// every 4 s (their lease is 6 s), so for the few seconds after they got
// ready the second pod of us-east can learn of its region's step (on the
// first pod) only from a push.
func TestPushReachesPodAfterItsFirstAnswer(t *testing.T) {
	r := newEventsRigEvery(t, []string{"us-east", "eu-west"}, map[string]int{"us-east": 2, "eu-west": 1}, 4*time.Second)
	r.budget(t, "fresh", policy.Budget{Rate: "100/s", Burst: 10}, 100)
	first, second := r.pods["us-east"][0], r.pods["us-east"][1]
	grant := func(p *pod) float64 {
		p.s.view.mu.RLock()
		defer p.s.view.mu.RUnlock()
		g, _ := p.s.view.podFor("fresh").Grant("fresh")
		return g.Rate
	}
	// Demand on the first pod alone: 20 requests in 200 ms.
	start := time.Now()
	for range 20 {
		if _, err := first.s.Decide(context.Background(), map[string]string{"tenant": "fresh"}, 1); err != nil {
			t.Fatal(err)
		}
	}
	wait.Until(t, 5*time.Second, func() error {
		if g := grant(first); g < 12 {
			return fmt.Errorf("the first pod holds %.2f/s, not yet a grant made from its demand", g)
		}
		return nil
	})
	var at time.Duration
	wait.Until(t, 5*time.Second, func() error {
		if g := grant(second); g < 12 {
			return fmt.Errorf("the second pod holds %.2f/s: the step's grant was not pushed to it", g)
		}
		at = time.Since(start)
		return nil
	})
	if at > time.Second {
		t.Errorf("the second pod held the region's new grant %v after the step: want it pushed within a second, not with its next report", at)
	}
	t.Logf("the second pod held the region's new grant %v after the step", at.Round(time.Millisecond))
}
