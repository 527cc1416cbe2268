package regional

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/internal/wait"
)

// leaseUnitsMetric reads allot_lease_units_total{limit,region="us-east",kind}.
func leaseUnitsMetric(t *testing.T, reg prometheus.Gatherer, limit, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "allot_lease_units_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["limit"] == limit && l["kind"] == kind && l["region"] == "us-east" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return math.NaN()
}

// allot_lease_units_total on real Redis: a lease of 10 taken and 4 of its
// units served counts 10 leased and 4 served; once the lease's TTL passes,
// the pod's sweep writes the other 6 off as stranded (leased − served).
// Decisions the user limit denies count nothing served.
func TestLeaseUnitsMetric(t *testing.T) {
	p, _ := redisPod(t)
	ctx := context.Background()
	for i := range 5 {
		d, err := p.s.Decide(ctx, map[string]string{"tenant": "t1", "user": "u", "machine": "m1"}, 1)
		if want := i < 3; err != nil || d.Allowed != want {
			t.Fatalf("decision %d = %+v, %v; want allowed=%v", i, d, err, want)
		}
	}
	if d, err := p.s.Decide(ctx, map[string]string{"tenant": "t1", "machine": "m1"}, 1); err != nil || !d.Allowed || d.Remaining != 6 {
		t.Fatalf("machine alone = %+v, %v; want allowed with 6 left in the lease", d, err)
	}
	for kind, want := range map[string]float64{"leased": 10, "served": 4, "stranded": 0} {
		if got := leaseUnitsMetric(t, p.reg, "machine", kind); got != want {
			t.Errorf("allot_lease_units_total{limit=machine,kind=%s} = %v, want %v", kind, got, want)
		}
	}
	if got := leaseUnitsMetric(t, p.reg, "user", "leased"); !math.IsNaN(got) {
		t.Errorf("allot_lease_units_total{limit=user} = %v, want no series for a limit that is not leased", got)
	}
	// The pod's Run sweeps once per lease TTL (1 s).
	wait.Until(t, 10*time.Second, func() error {
		if got := leaseUnitsMetric(t, p.reg, "machine", "stranded"); got != 6 {
			return fmt.Errorf("stranded = %v, want 6", got)
		}
		return nil
	})
	for kind, want := range map[string]float64{"leased": 10, "served": 4} {
		if got := leaseUnitsMetric(t, p.reg, "machine", kind); got != want {
			t.Errorf("after expiry: allot_lease_units_total{limit=machine,kind=%s} = %v, want %v", kind, got, want)
		}
	}
}
