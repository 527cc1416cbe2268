package redisstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/keys"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
)

// countHook counts commands sent to Redis, pipelines included.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// I3 on a real three-master Redis Cluster: one tenant's keys share a slot
// (CLUSTER KEYSLOT), its composite decision is one script call and is all
// or nothing; keys of two tenants in one composite are refused (CROSSSLOT)
// as ErrRejected.
func TestClusterComposite(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	ctx := context.Background()
	st := newStore(t, cc)

	tenantKey, _ := keys.Key("t42", "tenant")
	userKey, _ := keys.Key("t42", "user", keys.Descriptor{Name: "user", Value: "7"})
	routeKey, _ := keys.Key("t42", "route", keys.Descriptor{Name: "route", Value: "/v1/chat:completions"})
	var slots []int64
	for _, k := range []string{tenantKey, userKey, routeKey} {
		s, err := cc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, s)
	}
	if slots[0] != slots[1] || slots[1] != slots[2] {
		t.Fatalf("CLUSTER KEYSLOT of one tenant's keys = %v, want one slot", slots)
	}

	// Warm the cluster client's slot map and the script cache, then count.
	// Slow limits: no key refills or expires while the test looks at it.
	tenant := limit(t, gcra.PerHour(1000), 200)
	user := limit(t, gcra.PerMinute(50), 2)
	route := limit(t, gcra.PerHour(100), 10)
	reqs := []gcra.Request{
		{Key: tenantKey, Limit: tenant, Cost: 1},
		{Key: userKey, Limit: user, Cost: 1},
		{Key: routeKey, Limit: route, Cost: 1},
	}
	if d, err := st.Decide(ctx, reqs); err != nil || !d.Allowed {
		t.Fatalf("composite on the cluster = %+v, %v", d, err)
	}
	hook := &countHook{}
	cc.AddHook(hook)
	d, err := st.Decide(ctx, reqs)
	if err != nil || !d.Allowed || d.Remaining != 0 || d.Limiting != 1 {
		t.Fatalf("second composite = %+v, %v; want allowed, 0 remaining, limited by the user key", d, err)
	}
	if n := hook.n.Load(); n != 1 {
		t.Fatalf("composite decision sent %d commands, want 1", n)
	}

	// The user key is spent: the next composite is denied and charges nothing.
	before := map[string]string{}
	for _, k := range []string{tenantKey, userKey, routeKey} {
		before[k] = cc.Get(ctx, k).Val()
	}
	d, err = st.Decide(ctx, reqs)
	if err != nil || d.Allowed || d.Limiting != 1 {
		t.Fatalf("third composite = %+v, %v; want denied by the user key", d, err)
	}
	for k, v := range before {
		if got := cc.Get(ctx, k).Val(); got != v {
			t.Errorf("key %s after a denied composite = %q, want unchanged %q", k, got, v)
		}
	}

	// Pipelined decisions over several tenants on several masters.
	var batch [][]gcra.Request
	masters := map[string]bool{}
	for _, tn := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		k1, _ := keys.Key(tn, "tenant")
		k2, _ := keys.Key(tn, "user", keys.Descriptor{Name: "user", Value: "1"})
		batch = append(batch, []gcra.Request{{Key: k1, Limit: tenant, Cost: 1}, {Key: k2, Limit: user, Cost: 1}})
		m, err := cc.MasterForKey(ctx, k1)
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("test tenants all map to one master %v; pick others", masters)
	}
	for i, a := range st.DecideMany(ctx, batch) {
		if a.Err != nil || !a.Allowed {
			t.Fatalf("pipelined composite %d on the cluster = %+v", i, a)
		}
	}

	// Two tenants in one composite cannot run in one slot.
	other, _ := keys.Key("t43", "tenant")
	_, err = st.Decide(ctx, []gcra.Request{{Key: tenantKey, Limit: tenant, Cost: 1}, {Key: other, Limit: tenant, Cost: 1}})
	if !errors.Is(err, redisstore.ErrRejected) {
		t.Fatalf("cross-tenant composite = %v, want ErrRejected (CROSSSLOT)", err)
	}
}
