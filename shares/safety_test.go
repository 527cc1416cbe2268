package shares_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/shares"
)

// world drives one leader (replaced on failover) and several Regions through
// random demand, random message delays and orders, lost reports and
// renewals, a region cut off and a leader failover, on a fake clock. After
// every event it checks the invariants against what the Regions themselves
// enforce (never the allocator's beliefs), and each region enforces its
// effective limits with the GCRA twin against greedy traffic, so the world's
// admitted units can be checked against the envelope B + R·Δ.
type world struct {
	t       *testing.T
	rng     *rand.Rand
	cfg     shares.Config
	budgets map[string]shares.Budget
	names   []string // tenants, sorted
	regions []*wregion
	leader  *shares.Allocator // nil during a failover gap
	t0      time.Time
	now     time.Duration
	tick    time.Duration

	maxDelay  time.Duration // report, renewal and grant delays are uniform in [0, maxDelay]
	lossRate  float64       // probability a report or a renewal is lost
	cutFrom   time.Duration // one region cut off from the leader and etcd in [cutFrom, cutTo)
	cutTo     time.Duration
	cutRegion int
	etcdLag   time.Duration
	failAt    time.Duration // the leader dies at failAt; a new one restores at failAt+failGap
	failGap   time.Duration
	failed    bool

	persisted map[[2]string]shares.Change // the latest grant per (tenant, region), as in etcd
	reports   []inflightReport
	checks    int
	writes    int

	// envelope per tenant: admitted units per tick
	admitted map[string][]int64
}

type inflightReport struct {
	at     time.Duration
	gen    int // leader generation it was sent to
	region int
	sentAt time.Duration
	rep    shares.Report
}

type inflightRenewal struct {
	at     time.Duration
	sentAt time.Duration
	rn     shares.Renewal
}

type inflightGrant struct {
	at time.Duration
	c  shares.Change
}

type wregion struct {
	name     string
	idx      int
	reg      *shares.Region
	phase    time.Duration
	grants   []inflightGrant // FIFO, as an etcd watch delivers
	renewals []inflightRenewal
	lastAt   time.Duration // delivery time of the last queued grant (keeps FIFO)
	keys     map[string]gcra.State
	demand   map[string]float64 // offered units per second
	offered  map[string]float64 // since the last report
	admitted map[string]float64
}

func (w *world) at(d time.Duration) time.Time { return w.t0.Add(d) }

func (w *world) delay() time.Duration {
	if w.maxDelay <= 0 {
		return 0
	}
	return time.Duration(w.rng.Int64N(int64(w.maxDelay) + 1))
}

// cut reports whether region i is cut off from the leader at at.
func (w *world) cut(i int, at time.Duration) bool {
	return i == w.cutRegion && at >= w.cutFrom && at < w.cutTo
}

// cutEtcd reports whether region i is cut off from etcd at at: it comes
// back to etcd later than to the leader, so a renewal can come before the
// grants written meanwhile.
func (w *world) cutEtcd(i int, at time.Duration) bool {
	return i == w.cutRegion && at >= w.cutFrom && at < w.cutTo+w.etcdLag
}

func (w *world) gen(at time.Duration) int {
	if w.failAt > 0 && at >= w.failAt {
		return 1
	}
	return 0
}

func (w *world) leaderUp(at time.Duration) bool {
	return w.failAt <= 0 || at < w.failAt || at >= w.failAt+w.failGap
}

// persist records changes as etcd would and queues them for their regions.
func (w *world) persist(cs []shares.Change) {
	for _, c := range cs {
		if c.Grant.Rate < 0 || c.Grant.Burst < 0 {
			w.t.Fatalf("at %v: negative grant %+v", w.now, c)
		}
		if c.Grant.Rate > 0 && c.Grant.Burst < 1 {
			w.t.Fatalf("at %v: grant %+v has a rate but no burst", w.now, c)
		}
		w.persisted[[2]string{c.Tenant, c.Region}] = c
		w.writes++
		for _, r := range w.regions {
			if r.name != c.Region {
				continue
			}
			at := max(w.now+w.delay(), r.lastAt)
			r.lastAt = at
			r.grants = append(r.grants, inflightGrant{at: at, c: c})
		}
	}
}

func (w *world) persistedList() []shares.Change {
	keys := make([][2]string, 0, len(w.persisted))
	for k := range w.persisted {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	out := make([]shares.Change, 0, len(keys))
	for _, k := range keys {
		out = append(out, w.persisted[k])
	}
	return out
}

// check asserts the invariants at w.now from the regions' own states.
func (w *world) check(what string) {
	w.checks++
	now := w.at(w.now)
	for _, name := range w.names {
		b := w.budgets[name]
		var sumR float64
		var sumB int64
		for _, r := range w.regions {
			rate, burst, _ := r.reg.Effective(now, name, b)
			fr, fb := shares.Floor(b, w.cfg.Regions, r.name)
			switch {
			case rate < 0 || burst < 0:
				w.t.Fatalf("at %v after %s: %s/%s enforces negative (%v, %d)", w.now, what, name, r.name, rate, burst)
			case rate > 0 && burst < 1:
				w.t.Fatalf("at %v after %s: %s/%s enforces rate %v with burst %d", w.now, what, name, r.name, rate, burst)
			case rate < fr*(1-1e-9) || burst < fb:
				w.t.Fatalf("at %v after %s: %s/%s enforces (%v, %d), below its floor (%v, %d)", w.now, what, name, r.name, rate, burst, fr, fb)
			}
			sumR += rate
			sumB += burst
		}
		if b.Mode == shares.ModeFull {
			continue
		}
		if sumR > b.Rate*(1+1e-9) || sumB > b.Burst {
			w.t.Fatalf("at %v after %s: tenant %s: regions enforce Σrate %v, Σburst %d > budget (%v, %d)\n%s",
				w.now, what, name, sumR, sumB, b.Rate, b.Burst, w.describe(name))
		}
	}
}

func (w *world) describe(name string) string {
	s := ""
	now := w.at(w.now)
	for _, r := range w.regions {
		g, ok := r.reg.Grant(name)
		rate, burst, leased := r.reg.Effective(now, name, w.budgets[name])
		s += fmt.Sprintf("  %s: effective (%v, %d) leased %v; grant %+v (%v) applied %d lease until %v\n",
			r.name, rate, burst, leased, g, ok, r.reg.Applied(), r.reg.LeaseUntil().Sub(w.t0))
	}
	return s
}

// enforce runs one tick of greedy traffic through every region's GCRA keys.
func (w *world) enforce(tickIdx int) {
	now := w.at(w.now)
	for _, r := range w.regions {
		for _, name := range w.names {
			b := w.budgets[name]
			want := r.demand[name] * w.tick.Seconds()
			units := int64(want)
			if w.rng.Float64() < want-float64(units) {
				units++
			}
			r.offered[name] += float64(units)
			rate, burst, _ := r.reg.Effective(now, name, b)
			st := r.keys[name]
			var admitted int64
			if rate <= 0 || burst < 1 {
				// Admit nothing; a key under a zero rate is spent.
				if st.Exists() {
					st = gcra.State{TAT: now.UnixMicro() + st.Burst*st.T, T: st.T, Burst: st.Burst}
				}
			} else {
				l, err := gcra.FromPerSecond(rate, burst)
				if err != nil {
					w.t.Fatalf("FromPerSecond(%v, %d): %v", rate, burst, err)
				}
				for range units {
					ns, res, err := gcra.Decide(st, now, l, 1)
					if err != nil {
						w.t.Fatal(err)
					}
					st = ns
					if !res.Allowed {
						break
					}
					admitted++
				}
			}
			r.keys[name] = st
			r.admitted[name] += float64(admitted)
			if b.Mode != shares.ModeFull {
				w.admitted[name][tickIdx] += admitted
			}
		}
	}
}

// step advances the world by one tick.
func (w *world) step(tickIdx int) {
	w.now += w.tick
	gen := w.gen(w.now)

	// Failover: a new leader resumes from etcd.
	if w.failAt > 0 && w.now >= w.failAt && !w.failed {
		w.leader, w.failed = nil, true
	}
	if w.failed && w.now >= w.failAt+w.failGap && w.leader == nil {
		a, err := shares.NewAllocator(w.cfg)
		if err != nil {
			w.t.Fatal(err)
		}
		a.Restore(w.at(w.now), w.persistedList())
		w.leader = a
	}

	// Deliveries: grants (FIFO per region, held while cut off), renewals.
	for _, r := range w.regions {
		for len(r.grants) > 0 && r.grants[0].at <= w.now && !w.cutEtcd(r.idx, w.now) {
			r.reg.Apply(r.grants[0].c)
			r.grants = r.grants[1:]
			w.check("grant to " + r.name)
		}
		kept := r.renewals[:0]
		for _, rn := range r.renewals {
			if rn.at > w.now {
				kept = append(kept, rn)
				continue
			}
			if !w.cut(r.idx, w.now) {
				r.reg.Renewed(w.at(rn.sentAt), rn.rn)
				w.check("renewal to " + r.name)
			}
		}
		r.renewals = kept
	}
	// Reports reaching the leader (of the generation they were sent to).
	kept := w.reports[:0]
	for _, ir := range w.reports {
		if ir.at > w.now {
			kept = append(kept, ir)
			continue
		}
		if w.leader == nil || ir.gen != gen || !w.leaderUp(w.now) {
			continue // the leader it was sent to is gone
		}
		rn, err := w.leader.Report(w.at(w.now), ir.rep)
		if err != nil {
			w.t.Fatalf("Report: %v", err)
		}
		if w.rng.Float64() >= w.lossRate {
			r := w.regions[ir.region]
			r.renewals = append(r.renewals, inflightRenewal{at: w.now + w.delay(), sentAt: ir.sentAt, rn: rn})
		}
		// The event-driven grow, between rebalances, whenever the report
		// acknowledged what a deferred grow waits for.
		if w.leader.Growable() {
			w.persist(w.leader.Grow(w.at(w.now)))
		}
	}
	w.reports = kept

	// Traffic.
	w.enforce(tickIdx)
	w.check("traffic")

	// Reports sent.
	for _, r := range w.regions {
		if (w.now-r.phase)%w.cfg.Interval != 0 {
			continue
		}
		rep := shares.Report{Region: r.name, Interval: w.cfg.Interval, Applied: r.reg.Applied(), Usage: map[string]shares.Usage{}}
		for _, name := range w.names {
			if r.offered[name] > 0 || w.rng.IntN(4) > 0 {
				rep.Usage[name] = shares.Usage{Offered: r.offered[name], Admitted: r.admitted[name]}
			}
			r.offered[name], r.admitted[name] = 0, 0
		}
		if w.cut(r.idx, w.now) || w.rng.Float64() < w.lossRate || !w.leaderUp(w.now) {
			continue
		}
		w.reports = append(w.reports, inflightReport{at: w.now + w.delay(), gen: gen, region: r.idx, sentAt: w.now, rep: rep})
	}

	// Rebalance.
	if w.leader != nil && w.now%w.cfg.Interval == 0 {
		w.persist(w.leader.Rebalance(w.at(w.now), w.budgets))
	}

	// Demand moves: random walks with occasional jumps.
	for _, r := range w.regions {
		for _, name := range w.names {
			R := w.budgets[name].Rate
			d := r.demand[name]
			switch x := w.rng.Float64(); {
			case x < 0.01:
				d = w.rng.Float64() * 1.5 * R
			case x < 0.3:
				d *= 0.9 + 0.2*w.rng.Float64()
			}
			r.demand[name] = d
		}
	}
}

// envelope checks that in every window the world admitted at most
// B + R·Δ units per tenant (Δ the window's span; rates enforced by GCRA are
// rounded down, so no slack is needed beyond one unit).
func (w *world) envelope() {
	for _, name := range w.names {
		b := w.budgets[name]
		if b.Mode == shares.ModeFull {
			continue
		}
		counts := w.admitted[name]
		var prefix int64
		// min over window starts a of prefix(a−1) − R·t_a
		best := math.Inf(1)
		for j, c := range counts {
			tj := float64(j) * w.tick.Seconds()
			best = math.Min(best, float64(prefix)-b.Rate*tj)
			prefix += c
			excess := float64(prefix) - b.Rate*tj - best
			if excess > float64(b.Burst)+1 {
				w.t.Fatalf("tenant %s: admitted %v units in a window ending at tick %d, above B + R·Δ by %v",
					name, excess, j, excess-float64(b.Burst))
			}
		}
	}
}

type worldSpec struct {
	seed                   uint64
	regions                int
	tenants                int
	maxDelay               time.Duration
	loss                   float64
	cut                    bool
	failover               bool
	duration               time.Duration
	floor0, pinned, static bool
}

func runWorld(t *testing.T, ws worldSpec) *world {
	t.Helper()
	rng := rand.New(rand.NewPCG(ws.seed, ws.seed^0x9e3779b97f4a7c15))
	names := []string{"us-east", "eu-west", "ap-south", "sa-east", "af-south"}[:ws.regions]
	cfg := shares.DefaultConfig(names...)
	w := &world{
		t: t, rng: rng, cfg: cfg,
		budgets:   map[string]shares.Budget{},
		t0:        time.Unix(1_700_000_000, 0),
		tick:      50 * time.Millisecond,
		maxDelay:  ws.maxDelay,
		lossRate:  ws.loss,
		cutRegion: -1,
		persisted: map[[2]string]shares.Change{},
		admitted:  map[string][]int64{},
	}
	ticks := int(ws.duration / w.tick)
	for k := range ws.tenants {
		name := fmt.Sprintf("t%d", k)
		b := shares.Budget{Rate: float64(20 + rng.IntN(400)), Burst: int64(ws.regions + rng.IntN(60))}
		switch {
		case ws.pinned && k == 1:
			b.Mode, b.Home = shares.ModePinned, names[rng.IntN(len(names))]
		case ws.static && k == 2:
			b.Mode = shares.ModeStatic
		case ws.floor0 && k == 0:
			zero := 0.0
			b.Floor = &zero
		}
		if err := b.Validate(names); err != nil {
			t.Fatal(err)
		}
		w.budgets[name] = b
		w.names = append(w.names, name)
		w.admitted[name] = make([]int64, ticks)
	}
	for i, n := range names {
		r := &wregion{
			name: n, idx: i,
			reg:      shares.NewRegion(n, cfg, 100*time.Millisecond),
			phase:    time.Duration(rng.IntN(int(cfg.Interval/w.tick))) * w.tick,
			keys:     map[string]gcra.State{},
			demand:   map[string]float64{},
			offered:  map[string]float64{},
			admitted: map[string]float64{},
		}
		for _, name := range w.names {
			r.demand[name] = rng.Float64() * w.budgets[name].Rate
		}
		w.regions = append(w.regions, r)
	}
	if ws.cut {
		w.cutRegion = rng.IntN(len(names))
		w.cutFrom = time.Duration(5+rng.IntN(20)) * time.Second
		w.cutTo = w.cutFrom + time.Duration(5+rng.IntN(30))*time.Second
		w.etcdLag = time.Duration(rng.IntN(3)) * time.Duration(rng.IntN(100)) * w.tick
	}
	if ws.failover {
		w.failAt = time.Duration(10+rng.IntN(30))*time.Second + time.Duration(rng.IntN(40))*w.tick
		if ws.cut && rng.IntN(2) == 0 {
			// during the cut, when the cut region's grants are most at stake
			w.failAt = w.cutFrom + time.Duration(rng.Int64N(int64(w.cutTo-w.cutFrom)+1))/w.tick*w.tick
		}
		w.failGap = time.Duration(rng.IntN(80)) * w.tick
	}
	a, err := shares.NewAllocator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.leader = a
	for i := range ticks {
		w.step(i)
	}
	w.envelope()
	return w
}

// FuzzSafety: I4 at every instant, no negative grant, every region at or
// above its floor, bursts within B, and the world's admissions within
// B + R·Δ, under random demand, delays, losses, a cut-off region and a
// leader failover.
func FuzzSafety(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(2), uint16(1000), uint8(10), true, true)
	f.Add(uint64(2), uint8(5), uint8(3), uint16(2000), uint8(30), true, true)
	f.Add(uint64(3), uint8(2), uint8(1), uint16(0), uint8(0), false, false)
	f.Add(uint64(4), uint8(4), uint8(3), uint16(2500), uint8(50), true, false)
	f.Add(uint64(5), uint8(3), uint8(3), uint16(500), uint8(5), false, true)
	f.Fuzz(func(t *testing.T, seed uint64, nreg, nten uint8, delayMs uint16, lossPct uint8, cut, failover bool) {
		ws := worldSpec{
			seed:     seed,
			regions:  2 + int(nreg)%4,
			tenants:  1 + int(nten)%3,
			maxDelay: time.Duration(delayMs%6000) * time.Millisecond,
			loss:     float64(lossPct%60) / 100,
			cut:      cut,
			failover: failover,
			duration: 60 * time.Second,
			floor0:   seed%3 == 0,
			pinned:   seed%2 == 0,
			static:   seed%5 == 0,
		}
		w := runWorld(t, ws)
		if w.checks == 0 {
			t.Fatal("no invariant was checked")
		}
	})
}

// TestSafetySeeds runs the safety world over a spread of seeds with every
// fault on, so that `go test` (not only `go test -fuzz`) covers them.
func TestSafetySeeds(t *testing.T) {
	for seed := range uint64(64) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w := runWorld(t, worldSpec{
				seed: seed, regions: 2 + int(seed)%4, tenants: 3,
				maxDelay: time.Duration(seed%5) * 1500 * time.Millisecond,
				loss:     float64(seed%5) / 10,
				cut:      seed%2 == 0, failover: seed%3 != 1,
				duration: 90 * time.Second,
				floor0:   seed%4 == 0, pinned: true, static: seed%2 == 1,
			})
			if w.writes == 0 {
				t.Fatal("the leader wrote no grant: the world exercised nothing")
			}
		})
	}
}
