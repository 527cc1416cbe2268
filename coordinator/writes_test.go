package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/shares"
)

// etcd writes per rebalance grow with the grants that change, not with the
// number of tenants: with 300 steady tenants a rebalance writes nothing, and
// when one tenant's demand shifts only that tenant's grants are written.
func TestWritesScaleWithChanges(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := state.New(srv.Client(t), "")
	ctx := context.Background()
	if _, err := admin.ApplyPolicy(ctx, examplePolicy(t), 0, ""); err != nil {
		t.Fatal(err)
	}
	// A fake clock and a hand-driven ticker: every step is one rebalance
	// interval with exactly one report per region.
	var clock atomic.Int64
	clock.Store(time.Unix(1_800_000_000, 0).UnixNano())
	tick := make(chan time.Time)
	n := startNodeWith(t, srv, "solo", func(c *Coordinator) {
		c.cfg.Now = func() time.Time { return time.Unix(0, clock.Load()) }
		c.ticks = func(time.Duration) (<-chan time.Time, func()) { return tick, func() {} }
	})
	eventually(t, 10*time.Second, func() error {
		// Leading, and the first rebalance (which loads the policy) done:
		// reports are taken from then on.
		if !n.c.IsLeader() || testutil.ToFloat64(n.c.m.rebalances) < 1 {
			return errors.New("not leading yet")
		}
		return nil
	})
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
	// Pods apply every grant at once: each reports the newest epoch stored
	// for its region.
	reportAll := func(u map[string]map[string]shares.Usage) {
		applied, err := appliedEpochs(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range regions {
			if _, err := n.c.Report(ctx, PodReport{Region: r, Pod: r + "-0", Interval: interval, Applied: applied[r], Usage: u[r]}); err != nil {
				t.Fatal(err)
			}
		}
	}
	writes := func() float64 { return testutil.ToFloat64(n.c.m.grantWrites) }
	rebalances := func() float64 { return testutil.ToFloat64(n.c.m.rebalances) }
	// step advances the clock one interval, reports, and rebalances.
	step := func(u map[string]map[string]shares.Usage) {
		clock.Add(int64(interval))
		reportAll(u)
		r0 := rebalances()
		tick <- time.Time{}
		eventually(t, 10*time.Second, func() error {
			if rebalances() <= r0 {
				return errors.New("rebalance not done")
			}
			return nil
		})
	}

	// Converge (the allocator's EWMA settles within ~10 intervals), then
	// watch 10 rebalances of steady traffic.
	steady := usage(false)
	for range 20 {
		step(steady)
	}
	total := writes()
	for range 10 {
		step(steady)
	}
	if w := writes() - total; w != 0 {
		t.Fatalf("10 rebalances of steady traffic from %d tenants wrote %v grants, want 0", tenants, w)
	}
	t.Logf("%d tenants: %v grant writes to converge, then 0 over 10 steady rebalances", tenants, total)

	// Shift one tenant: only its grants are written.
	shifted := usage(true)
	w0 := writes()
	for range 15 {
		step(shifted)
	}
	got := writes() - w0
	if got == 0 || got > 15*float64(len(regions)) {
		t.Fatalf("one tenant's shift wrote %v grants over 15 rebalances; want some, at most %d (that tenant's regions only)", got, 15*len(regions))
	}
	g, _, err := admin.Grants(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("shift of one tenant: %v grant writes over 15 rebalances (%d grants stored)", got, len(g))
	rates := map[string]float64{}
	for _, c := range g {
		if c.Tenant == "t000" {
			rates[c.Region] = c.Grant.Rate
		}
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

// appliedEpochs returns the newest grant epoch stored per region.
func appliedEpochs(ctx context.Context, s *state.Store) (map[string]uint64, error) {
	g, _, err := s.Grants(ctx, "")
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, c := range g {
		out[c.Region] = max(out[c.Region], c.Grant.Epoch)
	}
	return out, nil
}

// A grow that waits for a shrink's acknowledgement is written as soon as the
// report carrying that acknowledgement arrives, before the next tick: the
// report handler wakes the leader loop, which writes it (fenced, like every
// write) without a rebalance.
func TestGrowBeforeNextTick(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := state.New(srv.Client(t), "")
	ctx := context.Background()
	if _, err := admin.ApplyPolicy(ctx, examplePolicy(t), 0, ""); err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(time.Unix(1_800_000_000, 0).UnixNano())
	tick := make(chan time.Time)
	n := startNodeWith(t, srv, "solo", func(c *Coordinator) {
		c.cfg.Now = func() time.Time { return time.Unix(0, clock.Load()) }
		c.ticks = func(time.Duration) (<-chan time.Time, func()) { return tick, func() {} }
	})
	eventually(t, 10*time.Second, func() error {
		// Leading, and the first rebalance (which loads the policy) done:
		// reports are taken from then on.
		if !n.c.IsLeader() || testutil.ToFloat64(n.c.m.rebalances) < 1 {
			return errors.New("not leading yet")
		}
		return nil
	})
	regions := []string{"us-east", "eu-west", "ap-south"}
	const interval = 2 * time.Second
	usage := func(r string, split []float64) map[string]shares.Usage {
		// 150/s against the 100/s tier budget.
		x := 150 * interval.Seconds() * split[slices.Index(regions, r)]
		return map[string]shares.Usage{"t1": {Offered: x, Admitted: x}}
	}
	report := func(r string, split []float64, applied uint64) {
		t.Helper()
		if _, err := n.c.Report(ctx, PodReport{Region: r, Pod: r + "-0", Interval: interval, Applied: applied, Usage: usage(r, split)}); err != nil {
			t.Fatal(err)
		}
	}
	rebalances := func() float64 { return testutil.ToFloat64(n.c.m.rebalances) }
	tickOnce := func() {
		t.Helper()
		r0 := rebalances()
		tick <- time.Time{}
		eventually(t, 10*time.Second, func() error {
			if rebalances() <= r0 {
				return errors.New("rebalance not done")
			}
			return nil
		})
	}
	grant := func(region string) shares.Change {
		t.Helper()
		g, _, err := admin.Grants(ctx, region)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range g {
			if c.Tenant == "t1" {
				return c
			}
		}
		return shares.Change{}
	}
	before, after := []float64{0.7, 0.2, 0.1}, []float64{0.1, 0.2, 0.7}
	// Converge, every pod applying every grant at once.
	for range 15 {
		clock.Add(int64(interval))
		applied, err := appliedEpochs(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range regions {
			report(r, before, applied[r])
		}
		tickOnce()
	}
	// The shift is reported, but no pod has applied anything new: the
	// rebalance shrinks us-east and defers ap-south's grow.
	applied, err := appliedEpochs(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	east0, south0 := grant("us-east"), grant("ap-south")
	clock.Add(int64(interval))
	for _, r := range regions {
		report(r, after, applied[r])
	}
	tickOnce()
	shrink, south1 := grant("us-east"), grant("ap-south")
	if shrink.Grant.Rate >= east0.Grant.Rate-10 {
		t.Fatalf("after the shift us-east holds %+v (was %.1f/s), want a shrink", shrink.Grant, east0.Grant.Rate)
	}
	if south1.Grant.Rate > south0.Grant.Rate+1 {
		t.Fatalf("ap-south grew to %.1f/s (from %.1f/s) before us-east acknowledged its shrink", south1.Grant.Rate, south0.Grant.Rate)
	}
	// us-east's pod applies the shrink and reports it, between two ticks.
	r0 := rebalances()
	clock.Add(int64(interval / 4))
	report("us-east", after, shrink.Grant.Epoch)
	eventually(t, 10*time.Second, func() error {
		if g := grant("ap-south"); g.Grant.Rate < south1.Grant.Rate+15 {
			return fmt.Errorf("ap-south holds %.1f/s, want a grow above %.1f/s", g.Grant.Rate, south1.Grant.Rate+15)
		}
		return nil
	})
	if got := rebalances(); got != r0 {
		t.Fatalf("rebalances %v → %v: the grow was written by a rebalance, want it before the next tick", r0, got)
	}
	// The counter moves just after the write the test has seen.
	eventually(t, 5*time.Second, func() error {
		if got := testutil.ToFloat64(n.c.m.earlyGrows); got != 1 {
			return fmt.Errorf("allot_early_grows_total = %v, want 1", got)
		}
		return nil
	})
	// Σ of what each region may enforce stays within the budget: us-east
	// acknowledged its shrink, so its ceiling is the shrunk grant.
	var sum float64
	for _, r := range regions {
		g := grant(r)
		if r == "us-east" {
			sum += g.Grant.Rate
		} else {
			sum += g.Ceiling.Rate
		}
	}
	if sum > 100*(1+1e-9) {
		t.Errorf("Σ ceilings after the early grow = %.3f/s, want ≤ 100/s", sum)
	}
	t.Logf("us-east %.1f → %.1f/s; ap-south %.1f → %.1f/s before the next tick", east0.Grant.Rate, shrink.Grant.Rate, south1.Grant.Rate, grant("ap-south").Grant.Rate)
}
