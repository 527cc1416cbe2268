package coordinator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/internal/wait"
)

// policyAt is the example policy with the default tier's rate set to rate.
func policyAt(t *testing.T, rate string) []byte {
	t.Helper()
	p := string(examplePolicy(t))
	const free = "budget: {rate: 100/s, burst: 20}"
	if !strings.Contains(p, free) {
		t.Fatalf("the example policy no longer has %q", free)
	}
	return []byte(strings.Replace(p, free, "budget: {rate: "+rate+", burst: 20}", 1))
}

// The leader takes the policy from its mirror, not from etcd at each tick:
// a change reaches it without a tick (so no later than a tick would have
// read it), versions only go forward, and a stored policy that does not
// parse is counted and leaves the last good one in force while the leader
// goes on rebalancing.
func TestPolicyReachesTheLeaderWithoutATick(t *testing.T) {
	reg := prometheus.NewRegistry()
	k := startTicked(t, func(c *Coordinator) {
		c.cfg.Registerer = reg
		if err := c.mirrors(); err != nil {
			t.Fatal(err)
		}
	})
	st := state.New(k.srv.Client(t), "")
	ctx := context.Background()
	defaultRate := func() float64 {
		b, ok := k.n.c.LeaderBudget("someone-new")
		if !ok {
			return 0
		}
		return b.Rate
	}
	until := func(rate float64) {
		t.Helper()
		wait.Until(t, 10*time.Second, func() error {
			if got := defaultRate(); got != rate {
				return fmt.Errorf("the leader's default budget is %v/s, want %v/s", got, rate)
			}
			return nil
		})
	}
	until(100)
	r0 := k.rebalances()
	if _, err := st.ApplyPolicy(ctx, policyAt(t, "200/s"), 0, "test"); err != nil {
		t.Fatal(err)
	}
	until(200) // no tick was sent
	if r := k.rebalances(); r <= r0 {
		t.Errorf("rebalances %v → %v: the new policy was not rebalanced as it arrived", r0, r)
	}

	// Several applies in a row: the leader may skip some, never go back.
	var mu sync.Mutex
	var seen []float64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			r := defaultRate()
			mu.Lock()
			if len(seen) == 0 || seen[len(seen)-1] != r {
				seen = append(seen, r)
			}
			mu.Unlock()
		}
	}()
	for _, rate := range []string{"300/s", "400/s", "500/s", "600/s"} {
		if _, err := st.ApplyPolicy(ctx, policyAt(t, rate), 0, "test"); err != nil {
			t.Fatal(err)
		}
	}
	until(600)
	close(stop)
	<-done
	mu.Lock()
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			t.Errorf("the leader's default budget went %v: back from %v to %v", seen, seen[i-1], seen[i])
		}
	}
	mu.Unlock()

	// A current-policy record whose document does not parse.
	pv, _, err := st.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bad := fmt.Sprintf(`{"version": %d, "document": "regions: [oops"}`, pv.Version+1)
	if _, err := k.srv.Client(t).Put(ctx, st.PolicyKey(), bad); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		if got := decodeErrors(t, reg, "policy"); got != 1 {
			return fmt.Errorf("allot_state_decode_errors_total{kind=policy} = %v, want 1", got)
		}
		return nil
	})
	k.rebalance(t) // (before, a rebalance failed while the stored policy did not parse)
	if got := defaultRate(); got != 600 {
		t.Errorf("after a policy that does not parse the leader's default budget is %v/s, want the last good 600/s", got)
	}
	if _, err := st.ApplyPolicy(ctx, policyAt(t, "700/s"), 0, "test"); err != nil {
		t.Fatal(err)
	}
	until(700)
}

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
