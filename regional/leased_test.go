package regional

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/allot-dev/allot/internal/wait"
)

// leasedTestPolicy: a tenant budget nothing exhausts and a per-machine
// limit of 100 units an hour that pods lease 10 at a time.
const leasedTestPolicy = `version: 1
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
tiers:
  big:
    budget: {rate: 1000000/s, burst: 1000000, mode: pinned, home: us-east}
`

// A leased limit is decided from the pod's leases beside the composite of
// the others: the answer names whichever limit has fewer units left, every
// unit of the burst is admitted through ten leases, and the leased limit
// then denies and is counted as the limiting one.
func TestLeasedLimit(t *testing.T) {
	p, _ := memPod(t)
	p.applyPolicy(t, leasedTestPolicy, "t1", limits(2))
	// The leader enforces the budget: wait until it took up the big tier.
	waitBudget(t, p, "t1", 1e6, 1e6)
	ctx := context.Background()
	req := map[string]string{"tenant": "t1", "machine": "m1"}
	for i := range 100 {
		d, err := p.s.Decide(ctx, req, 1)
		if err != nil || !d.Allowed || d.Limit != "machine" || d.Remaining != int64(9-i%10) {
			t.Fatalf("decision %d: Decide = %+v, %v; want allowed by machine with %d left in the lease", i, d, err, 9-i%10)
		}
	}
	d, err := p.s.Decide(ctx, req, 1)
	if err != nil || d.Allowed || d.Limit != "machine" || d.RetryAfter <= 0 {
		t.Fatalf("101st decision = %+v, %v; want denied by machine with a retry-after", d, err)
	}
	if s := p.s.leases.Stats(); s.Leases != 10 || s.Served != 100 || s.Held != 0 || s.Denied != 1 {
		t.Fatalf("lease stats %+v, want 10 leases, 100 served, none held, 1 denied", s)
	}
	for result, want := range map[string]float64{"allowed": 100, "denied": 1} {
		if got := testutil.ToFloat64(p.s.m.decisions.WithLabelValues("machine", "us-east", result)); got != want {
			t.Errorf("allot_decisions_total{limit=machine,result=%s} = %v, want %v", result, got, want)
		}
	}
	// A request without a machine is the tenant budget alone.
	if d, err := p.s.Decide(ctx, map[string]string{"tenant": "t1"}, 1); err != nil || !d.Allowed || d.Limit != "tenant" {
		t.Fatalf("tenant only: Decide = %+v, %v; want allowed by tenant", d, err)
	}
}

// A lease is taken from the store under the pod's protections: when the
// store stops answering, a leased decision gives up after the store
// timeout and is decided by the limit's on_failure (fail-open: the local
// fallback, which starts empty, admits at the limit's rate), counted as a
// store error, instead of waiting for the caller's deadline. The machine
// limit here is 10/s (burst 100, leased 10 at a time), so that its fallback
// admits within the test.
func TestLeaseUnderStoreTimeout(t *testing.T) {
	p, _, cs := countingPodWith(t, func(c *Config) { c.StoreTimeout = 50 * time.Millisecond })
	pol := strings.Replace(leasedTestPolicy, "rate: 100/h", "rate: 10/s", 1)
	p.applyPolicy(t, pol, "t1", func(te *tenantEntry) bool {
		return len(te.resolved.Limits) == 2 && te.resolved.Limits[1].Rate.Count == 10
	})
	// The tenant budget decided beside it needs the big tier from the
	// leader, and a fail-open share (else it would deny: no share).
	waitBudget(t, p, "t1", 1e6, 1e6)
	waitShare(t, p, 1)
	stall := "machine"
	cs.stall.Store(&stall)
	// The caller's own deadline is far: only the store timeout ends the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	const interval = 100 * time.Millisecond // the machine limit's 10/s over one pod
	rate := newRateCheck(t, interval)
	decide := func() Decision {
		t.Helper()
		start := time.Now()
		d, err := p.s.Decide(ctx, map[string]string{"tenant": "t1", "machine": "m1"}, 1)
		if el := time.Since(start); el > 2*time.Second {
			t.Fatalf("a leased decision against a stalled store took %v; the store timeout is 50ms", el)
		}
		if err != nil || !d.Fallback || d.Closed {
			t.Fatalf("leased decision with the store stalled = %+v, %v; want a fail-open fallback decision", d, err)
		}
		rate.add(d.Allowed)
		return d
	}
	// The first is denied by the machine's empty fallback bucket, for one
	// unit's time at its rate.
	if d := decide(); d.Allowed || d.Limit != "machine" || d.RetryAfter <= 0 || d.RetryAfter > interval {
		t.Fatalf("first leased decision with the store stalled = %+v; want denied by machine's fallback for at most %v", d, interval)
	}
	wait.Until(t, 10*time.Second, func() error {
		if d := decide(); !d.Allowed {
			return fmt.Errorf("not admitted: %+v", d)
		}
		return nil
	})
	if got := testutil.ToFloat64(p.s.m.storeErrors.WithLabelValues("timeout")); got < 1 {
		t.Errorf("allot store errors{reason=timeout} = %v, want the lease's timeout counted", got)
	}
}
