package regional

import (
	"context"
	"testing"
)

// leaseSizesPolicy: two limits of one tenant leased in different sizes.
const leaseSizesPolicy = `version: 1
regions: [us-east, eu-west]
default_tier: big
limits:
  - name: tenant
    descriptors: [tenant]
    rate: budget
  - name: machine
    descriptors: [tenant, machine]
    rate: 100/h
    burst: 100
    lease: 10
  - name: key
    descriptors: [tenant, key]
    rate: 100/h
    burst: 100
    lease: 25
tiers:
  big:
    budget: {rate: 1000000/s, burst: 1000000, mode: pinned, home: us-east}
`

// The pod's one lease limiter serves each leased limit in its own policy
// size: 30 decisions naming both a machine and a key take three leases of
// 10 for the machine and two of 25 for the key, and each answer names the
// limit with fewer units left in its lease.
func TestLeasedLimitsOfDifferentSizes(t *testing.T) {
	p, _ := memPod(t)
	p.applyPolicy(t, leaseSizesPolicy, "t1", limits(3))
	// The leader enforces the budget: wait until it took up the big tier.
	waitBudget(t, p, "t1", 1e6, 1e6)
	ctx := context.Background()
	req := map[string]string{"tenant": "t1", "machine": "m1", "key": "k1"}
	for i := range 30 {
		machine, key := int64(9-i%10), int64(24-i%25)
		want, wantLimit := machine, "machine"
		if key < machine {
			want, wantLimit = key, "key"
		}
		d, err := p.s.Decide(ctx, req, 1)
		if err != nil || !d.Allowed || d.Limit != wantLimit || d.Remaining != want {
			t.Fatalf("decision %d: Decide = %+v, %v; want allowed by %s with %d left", i, d, err, wantLimit, want)
		}
	}
	if s := p.s.leases.Stats(); s.Leases != 5 || s.LeasedUnits != 3*10+2*25 || s.Served != 60 || s.Held != 20 {
		t.Fatalf("lease stats %+v, want 5 leases (3 × 10 + 2 × 25 units), 60 served, 20 held", s)
	}
}
