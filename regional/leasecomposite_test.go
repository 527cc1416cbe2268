package regional

import (
	"context"
	"errors"
	"fmt"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra/keys"
)

// leaseCompositePolicy: a tenant budget the tests do not exhaust, a
// per-user limit of 3 units an hour decided in Redis with it, and a
// per-machine limit of 100 units an hour that pods lease 10 at a time.
// Nothing refills, and no key expires, during a test.
const leaseCompositePolicy = `version: 1
regions: [us-east, eu-west]
default_tier: big
limits:
  - name: tenant
    descriptors: [tenant]
    rate: budget
  - name: user
    descriptors: [tenant, user]
    rate: 1/h
    burst: 3
  - name: machine
    descriptors: [tenant, machine]
    rate: 1/h
    burst: 100
    lease: 10
tiers:
  big:
    budget: {rate: 1000/h, burst: 1000, mode: pinned, home: us-east}
`

// redisPod is a pod on a real redis-server, with a client to read its keys.
func redisPod(t *testing.T) (*pod, *redis.Client) {
	t.Helper()
	// Generous: a decision that missed the timeout would be a fallback.
	p, rc := redisPodPolicy(t, leaseCompositePolicy, 3, 5*time.Second)
	// The tenant limit must never bind here: give t1 the big tier's budget
	// as a record of its own, so that the leader grants it the whole budget
	// (pinned) before any traffic, and wait until the pod holds that grant.
	// (As a default-tier tenant seen for the first time, it would get a
	// zero grant while the old policy's larger cold floor still counts.)
	if _, err := p.st.PutBudget(context.Background(), "t1", policy.Budget{Rate: "1000/h", Burst: 1000, Mode: "pinned", Home: "us-east"}, false, 0); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		p.s.view.mu.RLock()
		g, ok := p.s.view.podFor("t1").Grant("t1")
		p.s.view.mu.RUnlock()
		if !ok || g.Rate < 1000.0/3600*(1-1e-9) || g.Burst < 1000 {
			return fmt.Errorf("the pod holds %+v (%v) for t1, want the whole budget", g, ok)
		}
		return nil
	})
	waitBudget(t, p, "t1", 1000.0/3600, 1000)
	return p, rc
}

// redisKeys reads every key of the Redis and its value (a TAT).
func redisKeys(t *testing.T, rc *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	iter := rc.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		v, err := rc.Get(ctx, iter.Val()).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired since the scan
		}
		if err != nil {
			t.Fatalf("GET %s: %v", iter.Val(), err)
		}
		out[iter.Val()] = v
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A decision that any of its limits denies charges none, on real Redis:
// the user limit (in Redis) denies while the machine's lease holds units,
// and every key in Redis and the lease stay as they were; then the
// machine's lease denies while the user limit would admit, and again no
// key in Redis changes (the store is not asked for the user and tenant).
func TestLeasedCompositeDenialChargesNothing(t *testing.T) {
	p, rc := redisPod(t)
	ctx := context.Background()
	class := &p.s.m.forLimit("machine").lease
	decide := func(step, user string, wantAllowed bool, wantLimit string) Decision {
		t.Helper()
		d, err := p.s.Decide(ctx, map[string]string{"tenant": "t1", "user": user, "machine": "m1"}, 1)
		if err != nil || d.Allowed != wantAllowed || (wantLimit != "" && d.Limit != wantLimit) || d.Fallback {
			t.Fatalf("%s: Decide(user %s) = %+v, %v; want allowed=%v by %s, not a fallback", step, user, d, err, wantAllowed, wantLimit)
		}
		return d
	}
	for i := range 3 {
		if d := decide("u1 within its burst", "u1", true, "user"); d.Remaining != int64(2-i) {
			t.Fatalf("decision %d: remaining %d, want %d (the user limit has fewer left than the lease)", i, d.Remaining, 2-i)
		}
	}
	before, held := redisKeys(t, rc), p.s.leases.Stats().Held
	served := class.Stats().Served
	if d := decide("u1 past its burst", "u1", false, "user"); d.RetryAfter <= 0 {
		t.Fatalf("denied without a retry-after: %+v", d)
	}
	if after := redisKeys(t, rc); !maps.Equal(before, after) {
		t.Fatalf("the user limit denied, yet Redis changed:\nbefore %v\nafter  %v", before, after)
	}
	if s := p.s.leases.Stats(); s.Held != held || class.Stats().Served != served {
		t.Fatalf("the user limit denied, yet the lease moved: held %d → %d, served %d → %d", held, s.Held, served, class.Stats().Served)
	}

	// The machine's other 97 units, each to a new user.
	for i := range 97 {
		decide("the machine's burst", "v"+strconv.Itoa(i), true, "")
	}
	before = redisKeys(t, rc)
	d := decide("machine spent", "w", false, "machine")
	if d.RetryAfter <= 0 {
		t.Fatalf("denied without a retry-after: %+v", d)
	}
	if after := redisKeys(t, rc); !maps.Equal(before, after) {
		t.Fatalf("the leased limit denied, yet Redis changed:\nbefore %v\nafter  %v", before, after)
	}
	userW, err := keys.Key("t1", "user", keys.Descriptor{Name: "user", Value: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := before[userW]; ok {
		t.Fatalf("user w's key %s exists before its first admitted decision", userW)
	}
	// User w was charged nothing: all three of its units are there.
	for i := range 3 {
		if d, err := p.s.Decide(ctx, map[string]string{"tenant": "t1", "user": "w"}, 1); err != nil || !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("user w without a machine, decision %d = %+v, %v; want allowed with %d left", i, d, err, 2-i)
		}
	}
	if st := class.Stats(); st.Leased != 100 || st.Served != 100 || st.Stranded != 0 {
		t.Fatalf("machine lease units %+v, want 100 leased and served, none stranded", st)
	}
}

// Many goroutines decide one tenant's requests over 40 users (3 units
// each, in Redis) and two machines (leased, 100 units each) on real Redis,
// until both kinds of limit deny: every key's charge, read from its TAT, is
// exactly what was admitted through it — users exactly their admissions,
// machines their admissions plus what the leases strand or still hold — so
// no denied decision charged a limit, and no unit given back to a lease
// was served twice.
func TestLeasedCompositeConcurrent(t *testing.T) {
	p, rc := redisPod(t)
	ctx := context.Background()
	users := make([]string, 40)
	for i := range users {
		users[i] = "u" + strconv.Itoa(i)
	}
	machines := []string{"m0", "m1"}
	admittedUser := make([]atomic.Int64, len(users))
	admittedMachine := make([]atomic.Int64, len(machines))
	var deniedBy sync.Map // limit → *atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 12))
			for range 100 { // 1,600 decisions: each machine's 100 units run out whatever the interleaving
				u, m := r.IntN(len(users)), r.IntN(len(machines))
				desc := map[string]string{"tenant": "t1", "machine": machines[m]}
				if r.IntN(4) != 0 { // most requests carry a user, some are the machine alone
					desc["user"] = users[u]
				}
				d, err := p.s.Decide(ctx, desc, 1)
				if err != nil || d.Fallback {
					t.Errorf("Decide(%v) = %+v, %v", desc, d, err)
					return
				}
				if !d.Allowed {
					n, _ := deniedBy.LoadOrStore(d.Limit, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
					continue
				}
				if _, ok := desc["user"]; ok {
					admittedUser[u].Add(1)
				}
				admittedMachine[m].Add(1)
			}
		})
	}
	wg.Wait()
	for _, limit := range []string{"user", "machine"} {
		if n, ok := deniedBy.Load(limit); !ok || n.(*atomic.Int64).Load() == 0 {
			t.Fatalf("no decision was denied by %s: the test did not exercise it", limit)
		}
	}
	now, err := rc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	const T = int64(time.Hour / time.Microsecond) // 1/h
	charged := func(limit, name, value string) int64 {
		t.Helper()
		k, err := keys.Key("t1", limit, keys.Descriptor{Name: name, Value: value})
		if err != nil {
			t.Fatal(err)
		}
		v, err := rc.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		tat, err := strconv.ParseInt(strings.SplitN(v, ":", 2)[0], 10, 64) // TAT:T:B
		if err != nil {
			t.Fatalf("TAT of %s = %q: %v", k, v, err)
		}
		// TAT = (first admission's now) + charged·T, T an hour: the
		// seconds the test took round away.
		return int64(math.Round(float64(tat-now.UnixMicro()) / float64(T)))
	}
	for i, u := range users {
		if got, want := charged("user", "user", u), admittedUser[i].Load(); got != want {
			t.Errorf("user %s: Redis charged %d units, %d were admitted", u, got, want)
		}
	}
	s := p.s.leases.Stats()
	var machineCharged, machineAdmitted int64
	for i, m := range machines {
		machineCharged += charged("machine", "machine", m)
		machineAdmitted += admittedMachine[i].Load()
	}
	if machineCharged != machineAdmitted+s.Stranded+s.Held {
		t.Errorf("machines: Redis charged %d units; admitted %d + stranded %d + held %d = %d",
			machineCharged, machineAdmitted, s.Stranded, s.Held, machineAdmitted+s.Stranded+s.Held)
	}
	st := p.s.m.forLimit("machine").lease.Stats()
	if st.Leased-st.Served-st.Stranded != s.Held || st.Served+s.FallbackUnits != machineAdmitted {
		t.Errorf("machine lease units %+v, lease stats %+v: want leased − served − stranded = held and served + fallback units = admitted %d", st, s, machineAdmitted)
	}
	var userAdmitted int64
	for i := range admittedUser {
		userAdmitted += admittedUser[i].Load()
	}
	t.Logf("users admitted %d, machines admitted %d of %d charged; lease stats %+v", userAdmitted, machineAdmitted, machineCharged, s)
}

// DecideMany decides requests with leased limits exactly as Decide decides
// them one by one (two pods on identical stores and clocks): reserved
// before the pipeline, after the tenant's earlier requests, settled after
// it. Each round uses tenants of its own, so no lease lives across rounds
// (leases expire on the real clock).
func TestDecideManyLeasedMatchesDecide(t *testing.T) {
	batched, bclock, bstore := countingPod(t)
	single, sclock, _ := countingPod(t)
	batched.applyPolicy(t, leaseCompositePolicy, "t1", limits(3))
	single.applyPolicy(t, leaseCompositePolicy, "t1", limits(3))
	// Both pods must enforce the same budget for every tenant: each
	// round's new tenants get their leader's cold floor, the whole pinned
	// budget, as do their grants later (pinned: floors are the whole split).
	waitBudget(t, batched, "t1", 1000.0/3600, 1000)
	waitBudget(t, single, "t1", 1000.0/3600, 1000)
	ctx := context.Background()
	// Every round's tenants are met first, one unit each on both pods,
	// and the rounds wait until both pods hold each one's whole budget
	// as a leased grant: a new tenant's first grant may be a zero one
	// for a round trip (the leader still counts the cold floor of the
	// policy the pods started with, higher than this one's), and a round
	// must not straddle it on one pod and not the other.
	const rounds = 30
	for round := range rounds {
		for _, tenant := range []string{fmt.Sprintf("r%d-t0", round), fmt.Sprintf("r%d-t1", round)} {
			for _, p := range []*pod{batched, single} {
				if _, err := p.s.Decide(ctx, map[string]string{"tenant": tenant}, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	wait.Until(t, 20*time.Second, func() error {
		for round := range rounds {
			for _, tenant := range []string{fmt.Sprintf("r%d-t0", round), fmt.Sprintf("r%d-t1", round)} {
				for _, p := range []*pod{batched, single} {
					p.s.view.mu.RLock()
					g, ok := p.s.view.pods[0].Grant(tenant)
					p.s.view.mu.RUnlock()
					if !ok || g.Rate < 1000.0/3600*(1-1e-9) || g.Burst < 1000 || !p.s.Leased() {
						return fmt.Errorf("%s: grant %+v (held %v, leased %v), want the whole budget", tenant, g, ok, p.s.Leased())
					}
				}
			}
		}
		return nil
	})
	r := rand.New(rand.NewPCG(12, 1))
	denied := map[string]int{}
	for round := range rounds {
		reqs := make([]Request, 40+r.IntN(60))
		for i := range reqs {
			d := map[string]string{"tenant": fmt.Sprintf("r%d-t%d", round, r.IntN(2)*r.IntN(2))}
			if r.IntN(4) != 0 {
				d["machine"] = "m0"
			}
			if r.IntN(3) == 0 {
				d["user"] = fmt.Sprintf("u%d", r.IntN(3))
			}
			cost := int64(1 + r.IntN(5)) // above the user's burst of 3: refused
			if r.IntN(10) == 0 {
				cost = 11 // above the lease: the machine limit is decided in the composite
			}
			reqs[i] = Request{Descriptors: d, Cost: cost}
		}
		got := batched.s.DecideMany(ctx, reqs)
		for i, q := range reqs {
			want, werr := single.s.Decide(ctx, q.Descriptors, q.Cost)
			if (werr == nil) != (got[i].Err == nil) || (werr != nil && werr.Error() != got[i].Err.Error()) {
				t.Fatalf("round %d request %d %v: DecideMany error %v, Decide error %v", round, i, q, got[i].Err, werr)
			}
			if got[i].Decision != want {
				t.Fatalf("round %d request %d %v:\nDecideMany %+v\nDecide     %+v", round, i, q, got[i].Decision, want)
			}
			if werr == nil && !want.Allowed {
				denied[want.Limit]++
			}
		}
		step := time.Duration(r.IntN(400)) * time.Millisecond
		bclock.Add(step)
		sclock.Add(step)
	}
	if denied["user"] == 0 || denied["machine"] == 0 || bstore.manyElems.Load() == 0 {
		t.Fatalf("denials by limit %v, %d requests pipelined: the test did not exercise both limits and batching", denied, bstore.manyElems.Load())
	}
	if a, b := batched.s.leases.Stats(), single.s.leases.Stats(); a != b {
		t.Fatalf("lease stats differ:\nDecideMany %+v\nDecide     %+v", a, b)
	}
}
