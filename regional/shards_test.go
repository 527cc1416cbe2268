package regional

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/internal/coordtest"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/shares"
)

// shardTenants returns per tenants of each of n shards, named as operators
// name them.
func shardTenants(n, per int) []string {
	have := make([]int, n)
	var out []string
	for i := 0; len(out) < n*per; i++ {
		name := fmt.Sprintf("tenant-%d", i)
		if s := shares.ShardOf(name, n); have[s] < per {
			have[s]++
			out = append(out, name)
		}
	}
	return out
}

// With N coordinator shards (two replicas each) and two regions of two pods,
// every tenant is granted by its own shard's leader alone, and a crash of one
// shard's leader costs only that shard a new term: the other shards' terms
// and leases go on untouched, their tenants are granted throughout, and at
// no instant do the regions together enforce more than any tenant's
// budget, nor admit more than R·t + B over the run.
func TestShards(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d shards", n), func(t *testing.T) { testShards(t, n) })
	}
}

func testShards(t *testing.T, n int) {
	const R, B = 40.0, 4 // the default tier of shardsPolicy
	etcd := etcdtest.Start(t)
	coords := make([][]*coordtest.Coordinator, n)
	for s := range n {
		for range 2 {
			cfg := coordtest.Fast(etcd.Client(t))
			cfg.Shard, cfg.Shards = s, n
			// Eight coordinators, four pods and etcd in one process under
			// -race: a 1 s session can lapse for want of CPU alone, which
			// the test would take for the crash's doing.
			cfg.SessionTTL, cfg.Lease = 2*time.Second, 2500*time.Millisecond
			coords[s] = append(coords[s], coordtest.Start(t, cfg))
		}
	}
	leaders.Store(etcd, true)
	regions := []string{"us-east", "eu-west"}
	pods := map[string][]*pod{}
	for _, region := range regions {
		ms, err := memstore.New(memstore.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			pods[region] = append(pods[region], startPodWith(t, etcd, ms, func(c *Config) { c.Region = region }, false))
		}
	}
	if _, err := pods["us-east"][0].st.ApplyPolicy(context.Background(), []byte(shardsPolicy), 0, "test"); err != nil {
		t.Fatal(err)
	}
	all := append(append([]*pod{}, pods["us-east"]...), pods["eu-west"]...)
	wait.Until(t, 20*time.Second, func() error {
		for i, p := range all {
			if !p.s.Ready() || p.s.view.shards() != n {
				return fmt.Errorf("pod %d not ready with %d shards (has %d)", i, n, p.s.view.shards())
			}
		}
		return nil
	})
	leaderOf := func(s int) *coordtest.Coordinator {
		for _, c := range coords[s] {
			if c.IsLeader() {
				return c
			}
		}
		return nil
	}
	tenants := shardTenants(n, 2)

	// Load on every pod, for every tenant: far more than the budget.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	admitted := make([]atomic.Int64, len(tenants))
	for _, p := range all {
		for i, tenant := range tenants {
			wg.Go(func() {
				tick := time.NewTicker(10 * time.Millisecond) // 100/s per pod
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					if d, err := p.s.Decide(ctx, map[string]string{"tenant": tenant}, 1); err == nil && d.Allowed {
						admitted[i].Add(1)
					}
				}
			})
		}
	}
	// Σ enforced per tenant, sampled, against R.
	var worst atomic.Int64 // ‰ of R
	sample := func() {
		now := time.Now()
		for _, tenant := range tenants {
			var sum float64
			for _, region := range regions {
				var most float64
				for _, p := range pods[region] {
					if te := p.s.view.tenant(tenant); te != nil {
						r, _, _ := p.s.view.tenantEffective(now, te)
						most = max(most, r)
					}
				}
				sum += most
			}
			if v := int64(sum / R * 1000); v > worst.Load() {
				worst.Store(v)
			}
		}
	}
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				sample()
			}
		}
	})
	start := time.Now()

	// Every tenant reaches its own shard's leader, and only it.
	wait.Until(t, 10*time.Second, func() error {
		for s := range n {
			l := leaderOf(s)
			if l == nil {
				return fmt.Errorf("shard %d has no leader", s)
			}
			st, err := l.Status(context.Background())
			if err != nil {
				return err
			}
			if st.Tenants != 2 || st.Shard != s || st.Shards != n || len(st.ShardLeaders) != n {
				return fmt.Errorf("shard %d's leader: %d tenants (want its 2), shard %d of %d, %d shard leaders", s, st.Tenants, st.Shard, st.Shards, len(st.ShardLeaders))
			}
			for _, tenant := range tenants {
				v, err := l.Shares(context.Background(), tenant, "")
				if err != nil {
					return err
				}
				granted := false
				for _, r := range v.Regions {
					granted = granted || r.Granted
				}
				if own := shares.ShardOf(tenant, n) == s; granted != own || own != (v.Source == "leader") || v.Shard != shares.ShardOf(tenant, n) {
					return fmt.Errorf("shard %d's leader on %s: source %s, shard %d, granted %v", s, tenant, v.Source, v.Shard, granted)
				}
				if v.Source == "other_shard" && (v.ShardLeader == nil || v.ShardLeader.Shard != v.Shard) {
					return fmt.Errorf("shard %d's leader on %s names no leader of shard %d: %+v", s, tenant, v.Shard, v.ShardLeader)
				}
			}
		}
		return nil
	})
	// Crash shard 1's leader. Its standby takes over once its session
	// expires; the others keep their terms.
	terms := make([]uint64, n)
	for s := range n {
		st, err := leaderOf(s).Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		terms[s] = st.Term
	}
	killed := leaderOf(1)
	killed.Crash()
	failedAt := time.Now()
	var leaseGaps atomic.Int64 // samples where a pod's lease of another shard had lapsed
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for time.Since(failedAt) < 3*time.Second {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now := time.Now()
			for _, p := range all {
				p.s.view.mu.RLock()
				for s, sp := range p.s.view.pods {
					if s != 1 && !sp.Leased(now) {
						leaseGaps.Add(1)
					}
				}
				p.s.view.mu.RUnlock()
			}
		}
	})
	wait.Until(t, 15*time.Second, func() error {
		l := leaderOf(1)
		if l == nil || l == killed {
			return fmt.Errorf("shard 1 has no new leader yet")
		}
		st, err := l.Status(context.Background())
		if err != nil || st.Learning || st.Term == terms[1] {
			return fmt.Errorf("shard 1's new leader learns (%v) or keeps the old term: %w", st.Learning, err)
		}
		return nil
	})
	newTermAt := time.Since(failedAt)
	// The new leader grants shard 1's tenants under load: each admits
	// another half second of its budget.
	ofShard1 := func() (sum int64) {
		for i, tenant := range tenants {
			if shares.ShardOf(tenant, n) == 1 {
				sum += admitted[i].Load()
			}
		}
		return sum
	}
	before := ofShard1()
	wait.Until(t, 10*time.Second, func() error {
		if got := ofShard1() - before; got < int64(R) {
			return fmt.Errorf("shard 1's tenants admitted %d since the new term, want %v", got, R)
		}
		return nil
	})
	cancel()
	wg.Wait()
	elapsed := time.Since(start).Seconds()

	for s := range n {
		if s == 1 {
			continue
		}
		l := leaderOf(s)
		if l == nil {
			t.Errorf("shard %d has no leader after shard 1's leader died", s)
			continue
		}
		st, err := l.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Term != terms[s] {
			t.Errorf("shard %d started a new term (%d, was %d) when shard 1's leader died", s, st.Term, terms[s])
		}
	}
	if g := leaseGaps.Load(); g > 0 {
		t.Errorf("%d samples saw a pod's lease of another shard lapse while shard 1 failed over", g)
	}
	if w := float64(worst.Load()) / 1000; w > 1+1e-9 {
		t.Errorf("the regions together enforced %.3f of a tenant's budget at one instant", w)
	}
	for i, tenant := range tenants {
		// Two regions, each a memstore bucket: at most R·t + B across them.
		if got, most := float64(admitted[i].Load()), R*elapsed+B; got > most {
			t.Errorf("%s (shard %d): admitted %v in %.1f s, more than R·t + B = %.1f", tenant, shares.ShardOf(tenant, n), got, elapsed, most)
		} else if shares.ShardOf(tenant, n) != 1 && got < 0.5*R*elapsed {
			// (Shard 1's tenants lost the failover; that its new leader
			// grants them is the wait above.)
			t.Errorf("%s (shard %d): admitted %v in %.1f s, under half the budget: its shard did not grant", tenant, shares.ShardOf(tenant, n), got, elapsed)
		}
	}
	t.Logf("%d shards: shard 1's new leader granted %v after the kill; peak Σ enforced %.3f of R; admitted %v of R·t = %.0f",
		n, newTermAt.Round(time.Millisecond), float64(worst.Load())/1000, func() []int64 {
			out := make([]int64, len(tenants))
			for i := range admitted {
				out[i] = admitted[i].Load()
			}
			return out
		}(), R*elapsed)
}

var shardsPolicy = tierPolicy("us-east, eu-west", "40/s", 4)
