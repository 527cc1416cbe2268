package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
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
		if !n.c.IsLeader() {
			return errors.New("not leading")
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
