package regional

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/coordinator"
	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/coordtest"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy"
)

// namedPolicy gives one tenant two global budgets: requests (its budget)
// and tokens (a named one), told apart by the kind descriptor.
const namedPolicy = `version: 1
regions: [us-east, eu-west, ap-south]
default_tier: llm
limits:
  - name: requests
    descriptors: [tenant, kind]
    match: {kind: request}
    rate: budget
  - name: tokens
    descriptors: [tenant, kind]
    match: {kind: tokens}
    rate: budget.tokens
tiers:
  llm:
    budget: {rate: 60/s, burst: 10}
    budgets:
      tokens: {rate: 3000/s, burst: 300}
tenants:
  t1: {}
`

// startThreeRegions starts etcd, a coordinator rebalancing every 250 ms
// (adjust changes its config), and us-east, eu-west and ap-south, each a
// redis-server of its own and two pods, then applies doc. It returns the
// coordinator and the pods, by region and all.
func startThreeRegions(t *testing.T, doc string, adjust func(*coordinator.Config)) (*coordtest.Coordinator, map[string][]*pod, []*pod) {
	t.Helper()
	etcd := etcdtest.Start(t)
	cfg := coordtest.Fast(etcd.Client(t))
	cfg.RebalanceInterval = 250 * time.Millisecond
	cfg.Shares.Interval = cfg.RebalanceInterval
	if adjust != nil {
		adjust(&cfg)
	}
	coord := coordtest.Start(t, cfg)
	leaders.Store(etcd, true)
	pods := map[string][]*pod{}
	var all []*pod
	for _, region := range []string{"us-east", "eu-west", "ap-south"} {
		rs := redistest.Start(t)
		rc := redis.NewClient(redistest.ClientOptions(rs.Addr))
		t.Cleanup(func() { _ = rc.Close() })
		store, err := redisstore.New(rc)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			p := startPodWith(t, etcd, store, func(c *Config) { c.Region = region }, false)
			pods[region] = append(pods[region], p)
			all = append(all, p)
		}
	}
	if _, err := all[0].st.ApplyPolicy(context.Background(), []byte(doc), 0, "test"); err != nil {
		t.Fatal(err)
	}
	return coord, pods, all
}

// A tenant's two global budgets are shared across three regions
// independently: the requests budget follows the region whose callers send
// requests, the tokens budget the region whose callers spend tokens, and
// neither admits more than its R·t + B across the regions, under load in
// every region. Each region has its own redis-server and two pods; etcd and
// the coordinator are real.
func TestNamedBudgetsSharedIndependently(t *testing.T) {
	const (
		reqR, reqB = 60.0, 10.0
		tokR, tokB = 3000.0, 300.0
		tokCost    = 20
	)
	regions := []string{"us-east", "eu-west", "ap-south"}
	_, pods, all := startThreeRegions(t, namedPolicy, nil)
	wait.Until(t, 30*time.Second, func() error {
		for i, p := range all {
			te := p.s.view.tenant("t1")
			if !p.s.Ready() || te == nil || len(te.resolved.Limits) != 2 || te.resolved.Limits[1].Budget != "tokens" {
				return fmt.Errorf("pod %d has not loaded the policy with named budgets, or is not ready", i)
			}
		}
		return nil
	})

	// Requests mostly in eu-west, tokens mostly in us-east; some of each
	// everywhere. Per pod, per second: what each region's two pods offer.
	offer := map[string]map[string]int{ // region → kind → decisions/s per pod
		"us-east":  {"request": 5, "tokens": 100},
		"eu-west":  {"request": 60, "tokens": 5},
		"ap-south": {"request": 5, "tokens": 5},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var reqs, toks atomic.Int64 // units admitted
	var errs atomic.Int64
	t.Cleanup(func() { cancel(); wg.Wait() }) // (before the pods stop)
	start := time.Now()
	for _, region := range regions {
		for _, p := range pods[region] {
			for kind, per := range offer[region] {
				cost := int64(1)
				if kind == "tokens" {
					cost = tokCost
				}
				wg.Go(func() {
					tick := time.NewTicker(time.Second / time.Duration(per))
					defer tick.Stop()
					d := map[string]string{"tenant": "t1", "kind": kind}
					for {
						select {
						case <-ctx.Done():
							return
						case <-tick.C:
						}
						dec, err := p.s.Decide(ctx, d, cost)
						switch {
						case err != nil && ctx.Err() == nil:
							errs.Add(1)
						case err == nil && dec.Allowed && kind == "tokens":
							toks.Add(cost)
						case err == nil && dec.Allowed:
							reqs.Add(cost)
						}
					}
				})
			}
		}
	}

	// Each budget's grants follow its own demand.
	grant := func(region, name string) float64 {
		var most float64
		for _, p := range pods[region] {
			if te := p.s.view.tenant("t1"); te != nil {
				r, _, _ := p.s.view.budgetEffective(time.Now(), te, name)
				most = max(most, r)
			}
		}
		return most
	}
	var shares string
	wait.Until(t, 20*time.Second, func() error {
		tu, te, ta := grant("us-east", "tokens"), grant("eu-west", "tokens"), grant("ap-south", "tokens")
		ru, re, ra := grant("us-east", ""), grant("eu-west", ""), grant("ap-south", "")
		shares = fmt.Sprintf("tokens us-east %.0f eu-west %.0f ap-south %.0f; requests us-east %.1f eu-west %.1f ap-south %.1f", tu, te, ta, ru, re, ra)
		if tu < 0.6*tokR || re < 0.5*reqR {
			return fmt.Errorf("grants not there yet: %s", shares)
		}
		return nil
	})
	// Σ enforced per budget, at this instant, within R.
	for _, c := range []struct {
		name string
		R    float64
	}{{"", reqR}, {"tokens", tokR}} {
		if sum := grant("us-east", c.name) + grant("eu-west", c.name) + grant("ap-south", c.name); sum > c.R*(1+1e-9) {
			t.Errorf("budget %q: the regions together enforce %.1f/s, more than R = %.0f", c.name, sum, c.R)
		}
	}
	// Keep the load on a while longer, so that the bound below covers a
	// run with both budgets saturated.
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
	<-lctx.Done()
	lcancel()
	cancel()
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if n := errs.Load(); n > 0 {
		t.Errorf("%d decisions failed", n)
	}
	if got, most := float64(reqs.Load()), reqR*elapsed+reqB; got > most {
		t.Errorf("requests: admitted %v in %.1f s across three regions, more than R·t + B = %.1f", got, elapsed, most)
	}
	if got, most := float64(toks.Load()), tokR*elapsed+tokB; got > most {
		t.Errorf("tokens: admitted %v in %.1f s across three regions, more than R·t + B = %.1f", got, elapsed, most)
	}
	t.Logf("after %.1f s: %s; admitted requests %d (R·t+B %.0f), tokens %d (R·t+B %.0f)",
		elapsed, shares, reqs.Load(), reqR*elapsed+reqB, toks.Load(), tokR*elapsed+tokB)
}

// A named budget set through the admin API replaces the policy's for that
// tenant and that name alone; a name the policy has not is refused, naming
// the field, with nothing stored.
func TestNamedBudgetRecord(t *testing.T) {
	etcd := etcdtest.Start(t)
	coordtest.Start(t, coordtest.Fast(etcd.Client(t)))
	leaders.Store(etcd, true)
	ms, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p := startPodWith(t, etcd, ms, func(c *Config) { c.Region = "us-east" }, false)
	if _, err := p.st.ApplyPolicy(context.Background(), []byte(namedPolicy), 0, "test"); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		if te := p.s.view.tenant("t1"); te == nil || len(te.resolved.Limits) != 2 {
			return fmt.Errorf("policy not loaded")
		}
		return nil
	})
	ctx := context.Background()
	if _, err := p.st.PutBudget(ctx, "t1/tokens", policy.Budget{Rate: "900/s", Burst: 90}, false, 0); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		te := p.s.view.tenant("t1")
		if l := te.resolved.Limits[1]; l.Rate.PerSecond() != 900 || l.Burst != 90 {
			return fmt.Errorf("tokens limit resolves to %v burst %d, not the record's 900/s burst 90", l.Rate, l.Burst)
		}
		if l := te.resolved.Limits[0]; l.Rate.PerSecond() != 60 || l.Burst != 10 {
			t.Fatalf("the requests budget changed with the tokens record: %v burst %d", l.Rate, l.Burst)
		}
		return nil
	})
	for _, c := range []struct {
		id, field string
	}{
		{"t1/images", "budget"},
		{"t1/Bad.Name", "tenant"},
	} {
		_, err := p.st.PutBudget(ctx, c.id, policy.Budget{Rate: "5/s", Burst: 5}, false, 0)
		var fe *policy.FieldError
		if err == nil || !errors.As(err, &fe) || fe.Path != c.field {
			t.Errorf("PutBudget(%s): %v, want an error naming %s", c.id, err, c.field)
		}
		if _, gerr := p.st.Budget(ctx, c.id); gerr == nil {
			t.Errorf("PutBudget(%s) refused, yet a record was stored", c.id)
		}
	}
}

// A global limit keyed by more than the tenant (per user) is shared across
// regions key by key: each user's traffic, wherever it comes from, admits
// at most the limit's R·t + B across three regions with load in every
// region; a user whose callers sit in one region gets most of its rate
// there; once idle, the coordinator forgets the keys. Real Redis per
// region, two pods each, real etcd and coordinator.
func TestGlobalPerUserLimit(t *testing.T) {
	const R, B = 50.0, 10.0
	const doc = `version: 1
regions: [us-east, eu-west, ap-south]
default_tier: free
limits:
  - name: user
    descriptors: [tenant, user]
    rate: 50/s
    burst: 10
    scope: global
tiers:
  free:
    budget: {rate: 1000/s, burst: 100}
`
	regions := []string{"us-east", "eu-west", "ap-south"}
	coord, pods, all := startThreeRegions(t, doc, func(c *coordinator.Config) { c.TenantIdleTimeout = time.Second })
	wait.Until(t, 30*time.Second, func() error {
		for i, p := range all {
			te := p.s.view.tenant("t1")
			if !p.s.Ready() || te == nil || len(te.resolved.Limits) != 1 || !te.resolved.Limits[0].Global {
				return fmt.Errorf("pod %d has not loaded the policy, or is not ready", i)
			}
		}
		return nil
	})
	// "everywhere" is offered far more than R from every pod; "local" only
	// from eu-west (a little elsewhere).
	offer := map[string]map[string]int{ // region → user → decisions/s per pod
		"us-east":  {"everywhere/1": 40, "local": 2},
		"eu-west":  {"everywhere/1": 40, "local": 60},
		"ap-south": {"everywhere/1": 40, "local": 2},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	admitted := map[string]*atomic.Int64{"everywhere/1": {}, "local": {}}
	var errs atomic.Int64
	start := time.Now()
	for _, region := range regions {
		for _, p := range pods[region] {
			for user, per := range offer[region] {
				wg.Go(func() {
					tick := time.NewTicker(time.Second / time.Duration(per))
					defer tick.Stop()
					d := map[string]string{"tenant": "t1", "user": user}
					for {
						select {
						case <-ctx.Done():
							return
						case <-tick.C:
						}
						dec, err := p.s.Decide(ctx, d, 1)
						switch {
						case err != nil && ctx.Err() == nil:
							errs.Add(1)
						case err == nil && dec.Allowed:
							admitted[user].Add(1)
						}
					}
				})
			}
		}
	}
	share := func(region, user string) float64 {
		var most float64
		id := keyShareIDFor("t1", "user", user)
		for _, p := range pods[region] {
			if te := p.s.view.tenant("t1"); te != nil {
				r, _, _, _ := p.s.view.effectiveKey(time.Now(), te, id, &te.limits[0])
				most = max(most, r)
			}
		}
		return most
	}
	var seen string
	wait.Until(t, 20*time.Second, func() error {
		seen = fmt.Sprintf("local: us-east %.1f eu-west %.1f ap-south %.1f; everywhere: %.1f %.1f %.1f",
			share("us-east", "local"), share("eu-west", "local"), share("ap-south", "local"),
			share("us-east", "everywhere/1"), share("eu-west", "everywhere/1"), share("ap-south", "everywhere/1"))
		if share("eu-west", "local") < 0.6*R {
			return fmt.Errorf("eu-west's share of user local not there yet: %s", seen)
		}
		return nil
	})
	for _, user := range []string{"local", "everywhere/1"} {
		if sum := share("us-east", user) + share("eu-west", user) + share("ap-south", user); sum > R*(1+1e-9) {
			t.Errorf("user %s: the regions together enforce %.1f/s, more than R = %.0f", user, sum, R)
		}
	}
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
	<-lctx.Done()
	lcancel()
	cancel()
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if n := errs.Load(); n > 0 {
		t.Errorf("%d decisions failed", n)
	}
	for user, a := range admitted {
		if got, most := float64(a.Load()), R*elapsed+B; got > most {
			t.Errorf("user %s: admitted %v in %.1f s across three regions, more than R·t + B = %.1f", user, got, elapsed, most)
		}
	}
	if got := float64(admitted["everywhere/1"].Load()); got < 0.5*R*elapsed {
		t.Errorf("user everywhere/1: admitted %v in %.1f s, under half of R·t: its key was not granted", got, elapsed)
	}
	t.Logf("after %.1f s: %s; admitted everywhere/1 %d, local %d (R·t + B = %.0f)",
		elapsed, seen, admitted["everywhere/1"].Load(), admitted["local"].Load(), R*elapsed+B)
	// Idle keys are forgotten: the leader tracks nothing once the load
	// stopped for longer than the idle timeout.
	wait.Until(t, 15*time.Second, func() error {
		st, err := coord.Status(context.Background())
		if err != nil {
			return err
		}
		if st.Tenants != 0 {
			return fmt.Errorf("the leader still tracks %d budgets", st.Tenants)
		}
		return nil
	})
}

// keyShareIDFor is keyShareID for a limit keyed by tenant and one value.
func keyShareIDFor(tenant, limit, value string) string {
	return keyShareID(tenant, &policy.ResolvedLimit{Name: limit, Descriptors: []string{"tenant", "x"}}, map[string]string{"x": value})
}
