package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy"
)

const cachePolicy = `version: 1
regions: [us-east, eu-west]
default_tier: free
limits:
  - name: tenant
    descriptors: [tenant]
    rate: budget
tiers:
  free:
    budget: {rate: 5/s, burst: 3}
`

func applyCachePolicy(tb testing.TB, st *state.Store) {
	tb.Helper()
	if _, err := st.ApplyPolicy(context.Background(), []byte(cachePolicy), 0, "test"); err != nil {
		tb.Fatal(err)
	}
}

// The cache follows etcd through a real watch: records put, changed and
// deleted after the first sync show up, sorted; before its first sync it
// says so (the leader then reads etcd).
func TestBudgetCacheFollowsEtcd(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	st := state.New(cli, "")
	ctx := context.Background()
	applyCachePolicy(t, st)
	put := func(tenant, rate string) {
		t.Helper()
		if _, err := st.PutBudget(ctx, tenant, policy.Budget{Rate: rate, Burst: 10}, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	put("b", "10/s")
	put("a", "20/s")
	bc := newBudgetCache()
	if _, _, ok := bc.snapshot(); ok {
		t.Fatal("snapshot before the first sync says synced")
	}
	mcfg := state.DefaultMirrorConfig()
	mcfg.Retry = 100 * time.Millisecond
	bm, err := state.NewBudgetMirror(st, bc, mcfg)
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- bm.Run(mctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Mirror = %v, want context.Canceled", err)
		}
	}()
	expect := func(want string) {
		t.Helper()
		wait.Until(t, 10*time.Second, func() error {
			recs, _, ok := bc.snapshot()
			got := fmt.Sprint(ok)
			for _, r := range recs {
				got += " " + r.Tenant + "=" + r.Rate
			}
			if got != want {
				return fmt.Errorf("cache = %q, want %q", got, want)
			}
			return nil
		})
	}
	expect("true a=20/s b=10/s")
	put("c", "30/s")
	put("a", "25/s")
	expect("true a=25/s b=10/s c=30/s")
	if err := st.DeleteBudget(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	expect("true a=25/s c=30/s")
}

// BenchmarkBudgetsRead: what the cache saves the leader every rebalance,
// the prefix read of every budget record from etcd, against the cache's
// snapshot, for 2,000 records.
func BenchmarkBudgetsRead(b *testing.B) {
	etcd := etcdtest.Start(b)
	cli := etcd.Client(b)
	st := state.New(cli, "")
	ctx := context.Background()
	applyCachePolicy(b, st)
	const n = 2000
	for i := range n {
		if _, err := st.PutBudget(ctx, fmt.Sprintf("tenant-%05d", i), policy.Budget{Rate: "100/s", Burst: 10}, false, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("source=etcd", func(b *testing.B) {
		for b.Loop() {
			recs, _, err := st.Budgets(ctx)
			if err != nil || len(recs) != n {
				b.Fatalf("Budgets = %d records, %v", len(recs), err)
			}
		}
	})
	b.Run("source=cache", func(b *testing.B) {
		bc := newBudgetCache()
		recs, rev, err := st.Budgets(ctx)
		if err != nil {
			b.Fatal(err)
		}
		byTenant := make(map[string]state.BudgetRecord, len(recs))
		for _, r := range recs {
			byTenant[r.Tenant] = r
		}
		bc.ResetBudgets(byTenant, rev)
		for b.Loop() {
			if recs, _, ok := bc.snapshot(); !ok || len(recs) != n {
				b.Fatalf("snapshot = %d records, %v", len(recs), ok)
			}
		}
	})
}
