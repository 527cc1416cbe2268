package regional

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/internal/redistest"
)

// decideBenchPolicy: a tenant budget, a per-user limit (a request naming a
// user is a composite of two) and a per-machine limit, all generous enough
// that no benchmark is denied.
const decideBenchPolicy = `version: 1
regions: [us-east, eu-west]
default_tier: bench
limits:
  - name: tenant
    descriptors: [tenant]
    rate: budget
  - name: user
    descriptors: [tenant, user]
    rate: 1000000/s
    burst: 1000000
  - name: login
    descriptors: [tenant, route]
    match: {route: /login}
    rate: 1/m
    burst: 1
tiers:
  bench:
    budget: {rate: 1000000/s, burst: 1000000, mode: pinned, home: us-east}
`

// decideLeasedPolicy: the tenant budget leased 1,000 units at a time.
const decideLeasedPolicy = `version: 1
regions: [us-east, eu-west]
default_tier: bench
limits:
  - name: tenant
    descriptors: [tenant]
    rate: budget
    lease: 1000
tiers:
  bench:
    budget: {rate: 1000000/s, burst: 1000000, mode: pinned, home: us-east}
`

// benchDecidePod starts a pod over an in-memory store (no network between
// the pod and its store; no coalescing, so only the decide path is timed)
// with policy, and waits until it enforces it.
func benchDecidePod(b *testing.B, policy string) *pod {
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	p := startPod(b, ms, func(c *Config) { c.Coalesce = false; c.StoreTimeout = time.Second })
	if _, err := p.st.ApplyPolicy(context.Background(), []byte(policy), 0, "bench"); err != nil {
		b.Fatal(err)
	}
	redistest.Eventually(b, 10*time.Second, func() error {
		if te := p.s.view.tenant("bench-0"); te == nil || te.budget.Rate < 1e5 {
			return errors.New("bench policy not loaded")
		}
		return nil
	})
	return p
}

// BenchmarkDecide times Service.Decide in process over an in-memory store:
// the pod's own CPU cost per decision (descriptor checks, policy lookup,
// key building, plan, store call through the breaker, counters, metrics),
// with -benchmem its allocations. Tenants rotate over 1,024; descriptor maps
// are built before timing (a transport builds them). Cases: one budget
// limit; a composite of the budget and a per-user limit; the budget served
// from leases of 1,000 units.
func BenchmarkDecide(b *testing.B) {
	plain := benchDecidePod(b, decideBenchPolicy)
	leased := benchDecidePod(b, decideLeasedPolicy)
	const tenants = 1024
	budget := make([]map[string]string, tenants)
	user := make([]map[string]string, tenants)
	for i := range tenants {
		t := "bench-" + strconv.Itoa(i)
		budget[i] = map[string]string{"tenant": t}
		user[i] = map[string]string{"tenant": t, "user": strconv.Itoa(i % 97)}
	}
	cases := []struct {
		name string
		p    *pod
		ds   []map[string]string
	}{
		{"budget", plain, budget},
		{"tenant+user", plain, user},
		{"leased", leased, budget},
	}
	for _, c := range cases {
		s := c.p.s
		b.Run(c.name+"/serial", func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if d, err := s.Decide(ctx, c.ds[i%tenants], 1); err != nil || !d.Allowed || d.Fallback {
					b.Fatalf("Decide = %+v, %v", d, err)
				}
				i++
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			var seq atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				i := int(seq.Add(389))
				for pb.Next() {
					if d, err := s.Decide(ctx, c.ds[i%tenants], 1); err != nil || !d.Allowed || d.Fallback {
						b.Errorf("Decide = %+v, %v", d, err)
						return
					}
					i++
				}
			})
		})
	}
}
