package regional

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy"
)

// decodeErrors reads allot_state_decode_errors_total{kind} from reg.
func decodeErrors(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "allot_state_decode_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("allot_state_decode_errors_total{kind=%q} not exported", kind)
	return 0
}

// The pod's view follows budgets and the policy through the typed mirrors:
// records that do not decode are counted and leave the last good ones in
// force, and the records written after them still arrive.
func TestViewMirrorsReportDecodeErrors(t *testing.T) {
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p := startPodWith(t, etcdtest.Start(t), ms, nil, false)
	ctx := context.Background()
	v := p.s.view
	rate := func(tenant string) float64 {
		if te := v.tenant(tenant); te != nil {
			return te.budget.Rate
		}
		return -1
	}
	until := func(what string, ok func() bool) {
		t.Helper()
		wait.Until(t, 10*time.Second, func() error {
			if !ok() {
				return fmt.Errorf("the view has not %s", what)
			}
			return nil
		})
	}
	raw := func(key, val string) {
		t.Helper()
		if _, err := p.st.Client().Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.st.PutBudget(ctx, "t1", policy.Budget{Rate: "50/s", Burst: 10}, false, 0); err != nil {
		t.Fatal(err)
	}
	until("t1's budget", func() bool { return rate("t1") == 50 })

	raw(p.st.BudgetsPrefix()+"t1", `{"tenant": "t1", "rate": `) // over t1's good record
	raw(p.st.BudgetsPrefix()+"t2", `not json`)
	if _, err := p.st.PutBudget(ctx, "t3", policy.Budget{Rate: "70/s", Burst: 10}, false, 0); err != nil {
		t.Fatal(err)
	}
	until("t3's budget", func() bool { return rate("t3") == 70 })
	if got := rate("t1"); got != 50 {
		t.Errorf("after a bad write over t1's budget the pod enforces %v/s for it, want the last good 50/s", got)
	}
	if got := decodeErrors(t, p.reg, "budget"); got != 2 {
		t.Errorf("allot_state_decode_errors_total{kind=budget} = %v, want 2", got)
	}

	v.mu.RLock()
	before := v.policyVersion
	v.mu.RUnlock()
	raw(p.st.PolicyKey(), fmt.Sprintf(`{"version": %d, "document": "regions: [oops"}`, before+1))
	wait.Until(t, 10*time.Second, func() error {
		if got := decodeErrors(t, p.reg, "policy"); got != 1 {
			return fmt.Errorf("allot_state_decode_errors_total{kind=policy} = %v, want 1", got)
		}
		return nil
	})
	v.mu.RLock()
	if v.policyVersion != before || v.doc == nil {
		t.Errorf("after a policy that does not parse the pod is at version %d, want the last good %d", v.policyVersion, before)
	}
	v.mu.RUnlock()
	pol := `version: 1
regions: [us-east, eu-west]
default_tier: free
limits:
  - name: tenant
    descriptors: [tenant]
    rate: budget
tiers:
  free:
    budget: {rate: 5/s, burst: 3}
tenants:
  t9: {budget: {rate: 90/s, burst: 9}}
`
	pv, err := p.st.ApplyPolicy(ctx, []byte(pol), 0, "test")
	if err != nil {
		t.Fatal(err)
	}
	until("the next good policy", func() bool {
		v.mu.RLock()
		defer v.mu.RUnlock()
		return v.policyVersion == pv.Version
	})
	if got := rate("t9"); got != 90 {
		t.Errorf("after the next good policy t9's budget is %v/s, want 90/s", got)
	}
}
