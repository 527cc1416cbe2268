package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// The nemesis: under 1.5R of load, a seeded schedule of faults, each alone
// on its target and several at once across targets:
//
//   - a pod cut from etcd only, or from the coordinators only (never both:
//     one link at a time);
//   - a pod killed (SIGKILL) and started again;
//   - the leading coordinator killed and started again, or cut from etcd
//     (it keeps its link to the pods: it must stop answering as leader);
//   - a region's Redis paused (hung) or stopped and started;
//   - the tenant's budget changed, and the policy's floor fraction changed.
//
// The check is I4 with the budget in force: a window [a, a+W] may admit
// B_max + ∫ R_eff, where R_eff(t) is the largest budget set in
// [t − (L + 3P), t]: a cut reaches every pod within a rebalance that reads
// it (≤ P), the answer to the pod's next report (≤ P) or its lease (≤ L)
// for a pod that misses the answer, plus one P for timing.

// minNemesisLiveness is the share of the budget in force the nemesis must
// still admit outside the seconds after a leader fault: its other faults
// cost admission too (killed pods, lapsed leases, Redis down), but a run
// that admits nothing proves nothing.
const minNemesisLiveness = 0.6

type faultKind int

const (
	faultCutEtcd faultKind = iota
	faultCutCoord
	faultKillPod
	faultKillLeader
	faultCutLeaderEtcd
	faultPauseRedis
	faultStopRedis
	faultBudget
	faultFloor
	numFaultKinds
)

func (k faultKind) String() string {
	return [...]string{"cut from etcd", "cut from the coordinators", "kill pod", "kill the leader",
		"cut the leader from etcd", "pause Redis", "stop Redis", "budget", "floor fraction"}[k]
}

// fault is one scheduled fault: applied at at, reverted at at+dur (budget
// and floor changes are instants).
type fault struct {
	at, dur time.Duration
	kind    faultKind
	target  string // a pod, a region (Redis), or "" (the leader, the tenant)
	rate    float64
	burst   int64
	floor   float64
}

func (f fault) String() string {
	switch f.kind {
	case faultBudget:
		return fmt.Sprintf("%5.1fs budget → %.0f/s burst %d", f.at.Seconds(), f.rate, f.burst)
	case faultFloor:
		return fmt.Sprintf("%5.1fs floor_fraction → %.2f", f.at.Seconds(), f.floor)
	}
	tgt := f.target
	if tgt == "" {
		tgt = "leader"
	}
	return fmt.Sprintf("%5.1fs %s %s for %.1fs", f.at.Seconds(), f.kind, tgt, f.dur.Seconds())
}

// nemesisSchedule draws seed's faults for topo over [10 s, duration − 10 s):
// one every 2–6 s, each on a target no other fault holds at the time.
func nemesisSchedule(seed uint64, topo topology, duration time.Duration) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65))
	busy := map[string]time.Duration{} // target → free from
	var out []fault
	end := duration - 10*time.Second
	sec := func(lo, hi float64) time.Duration {
		return time.Duration((lo + rng.Float64()*(hi-lo)) * float64(time.Second))
	}
	for at := 10 * time.Second; ; at += sec(2, 6) {
		if at >= end {
			break
		}
		f := fault{at: at, kind: faultKind(rng.IntN(int(numFaultKinds))), dur: sec(3, 12)}
		if at+f.dur > end {
			f.dur = end - at
		}
		r := topo.Regions[rng.IntN(len(topo.Regions))]
		switch f.kind {
		case faultCutEtcd, faultCutCoord, faultKillPod:
			f.target = fmt.Sprintf("%s-%d", r, rng.IntN(topo.PodsPerRegion))
		case faultKillLeader, faultCutLeaderEtcd:
			if topo.Coordinators < 2 {
				continue
			}
			f.target = ""
		case faultPauseRedis, faultStopRedis:
			f.target = r + "-redis"
		case faultBudget:
			f.dur = 0
			f.rate = []float64{100, 150, 200, 250}[rng.IntN(4)]
			f.burst = []int64{20, 30, 40}[rng.IntN(3)]
		case faultFloor:
			f.dur = 0
			f.floor = []float64{0.05, 0.1, 0.3}[rng.IntN(3)]
		}
		key := f.target
		if f.kind == faultKillLeader || f.kind == faultCutLeaderEtcd {
			key = "coordinators"
		}
		if f.dur > 0 {
			if busy[key] > at {
				continue
			}
			// A second after the revert before the target is used again.
			busy[key] = at + f.dur + time.Second
		}
		out = append(out, f)
	}
	return out
}

// budgetAt returns the budget set at t by a schedule that starts at (rate,
// burst).
func budgetAt(sched []fault, rate float64, burst int64) func(t time.Duration) (float64, int64) {
	return func(t time.Duration) (float64, int64) {
		r, b := rate, burst
		for _, f := range sched {
			if f.kind == faultBudget && f.at <= t {
				r, b = f.rate, f.burst
			}
		}
		return r, b
	}
}

// budgetLimit returns limit(a, w) for a budget that starts at (rate, burst)
// and changes as sched says, each cut in force for lag more.
func budgetLimit(sched []fault, rate float64, burst int64, lag, duration time.Duration) func(a, w time.Duration) float64 {
	type change struct {
		at time.Duration
		r  float64
		b  int64
	}
	cs := []change{{0, rate, burst}}
	for _, f := range sched {
		if f.kind == faultBudget {
			cs = append(cs, change{f.at, f.rate, f.burst})
		}
	}
	at := budgetAt(sched, rate, burst)
	// Prefix integral of R_eff in steps of 10 ms, to the end of the longest
	// window.
	const step = 10 * time.Millisecond
	n := int((duration+windows[len(windows)-1])/step) + 2
	cum := make([]float64, n+1)
	for k := range n {
		t := time.Duration(k) * step
		reff := 0.0
		for _, c := range cs {
			next := duration + time.Hour
			for _, d := range cs {
				if d.at > c.at && d.at < next {
					next = d.at
				}
			}
			// c is in force over [c.at, next + lag) when cut, [c.at, next) else.
			if c.at <= t && t < next+lag {
				reff = max(reff, c.r)
			}
		}
		cum[k+1] = cum[k] + reff*step.Seconds()
	}
	idx := func(t time.Duration) int { return min(n, max(0, int(t/step))) }
	return func(a, w time.Duration) float64 {
		var bmax int64
		for t := a - lag; t <= a+w; t += 100 * time.Millisecond {
			_, b := at(t)
			bmax = max(bmax, b)
		}
		return float64(bmax) + cum[idx(a+w)] - cum[idx(a)]
	}
}

// nemesisSeeds returns the seeds the full suite runs: E2E_NEMESIS_SEEDS
// (comma-separated; "none" runs no nemesis), or 1 to 5.
func nemesisSeeds() ([]uint64, error) {
	v := os.Getenv("E2E_NEMESIS_SEEDS")
	switch v {
	case "":
		return []uint64{1, 2, 3, 4, 5}, nil
	case "none":
		return nil, nil
	}
	var out []uint64
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("E2E_NEMESIS_SEEDS: %q is not a seed (want e.g. 1,2,3): %w", s, err)
		}
		out = append(out, n)
	}
	return out, nil
}

func nemesis(topo topology, seed uint64) *scenario {
	const duration = 90 * time.Second
	sched := nemesisSchedule(seed, topo, duration)
	lag := topo.Lease + 3*topo.Interval
	tenant := fmt.Sprintf("nemesis-%d", seed)
	var lines []string
	for _, f := range sched {
		lines = append(lines, f.String())
	}
	applied := 0
	var mu sync.Mutex
	return &scenario{
		name: fmt.Sprintf("nemesis-seed-%d", seed), tenant: tenant, rate: budgetR, burst: budgetB,
		desc: fmt.Sprintf("seed %d: 1.5R offered 70/20/10%% for %v under %d seeded faults (single links cut, pods and the leader killed, the leader cut from etcd, Redis paused and stopped, budget and floor fraction changed). I4 with the budget in force: a cut budget counts for L + 3P = %v more. Schedule: %s.",
			seed, duration, len(sched), lag, strings.Join(lines, "; ")),
		duration: duration,
		demand:   skewed(),
		events:   []time.Duration{0},
		window:   [2]time.Duration{10 * time.Second, duration},
		limit:    budgetLimit(sched, budgetR, budgetB, lag, duration),
		simNote:  "not compared: the simulator does not model this fault mix (its own checker, shares/protocheck, runs the same faults on the protocol alone).",
		before: func(ctx context.Context, t *testing.T, c *cluster) {
			// Every container runs (an earlier scenario may have killed
			// a coordinator), a coordinator leads, every pod is ready.
			if err := c.startStopped(ctx); err != nil {
				t.Fatalf("before the nemesis: %v", err)
			}
			if err := c.healthy(ctx, 90*time.Second); err != nil {
				t.Fatalf("before the nemesis: %v", err)
			}
		},
		act: func(ctx context.Context, t *testing.T, c *cluster, l *load, m *run) {
			var wg sync.WaitGroup
			for _, f := range sched {
				wg.Go(func() {
					if err := c.inject(ctx, l, m, tenant, f); err != nil {
						m.errorf(t, "fault %s: %v", f, err)
						return
					}
					mu.Lock()
					applied++
					mu.Unlock()
				})
			}
			wg.Wait()
		},
		check: func(t *testing.T, c *cluster, m *run) {
			m.notef("seed %d: %d of %d faults applied and reverted", seed, applied, len(sched))
			var worst []string
			for _, e := range m.excess {
				worst = append(worst, fmt.Sprintf("W=%v: %.0f", e.window, e.units))
			}
			m.notef("worst admitted − (B_max + ∫R_eff) per window: %s (≤ %.0f forgiven for rounding)", strings.Join(worst, ", "), envelopeSlack(len(m.regions)))
			// Liveness, loosely: the run must not pass by admitting
			// nothing. Against the budget set each second (capped by
			// what was offered), faults included.
			// A leader change leaves pods on their floors by design:
			// detection (TTL), the new term's learning (L + TTL) and a
			// few intervals to grant; those seconds are not counted.
			at := budgetAt(sched, budgetR, budgetB)
			leaderless := func(t time.Duration) bool {
				for _, f := range sched {
					if (f.kind == faultKillLeader || f.kind == faultCutLeaderEtcd) &&
						t >= f.at && t < f.at+f.dur+topo.Lease+2*topo.SessionTTL+3*topo.Interval {
						return true
					}
				}
				return false
			}
			var adm, room float64
			excluded := 0
			for _, s := range m.series {
				if s.At < m.sc.window[0] || s.At >= m.sc.window[1] {
					continue
				}
				if leaderless(s.At) {
					excluded++
					continue
				}
				r, _ := at(s.At)
				adm += s.Admitted
				room += min(r, s.Offered)
			}
			m.notef("admitted %.0f of %.0f units the budget in force allowed (min(R(t), offered) each second, leaving out the %d s after leader faults): %.1f%%; over the whole window against one central limiter at the initial budget: %.1f%%",
				adm, room, excluded, 100*adm/max(1, room), 100*m.util)
			if adm < minNemesisLiveness*room {
				m.errorf(t, "admitted %.1f%% of what the budget in force allowed, want ≥ %.0f%% even under faults", 100*adm/max(1, room), 100*minNemesisLiveness)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := c.restore(ctx, tenant); err != nil {
				m.errorf(t, "restore after the nemesis: %v", err)
			}
		},
	}
}

// inject applies f on the load's schedule and reverts it.
func (c *cluster) inject(ctx context.Context, l *load, m *run, tenant string, f fault) error {
	if l.at(ctx, f.at) != nil {
		return nil
	}
	var revert func(context.Context) error
	switch f.kind {
	case faultCutEtcd, faultCutCoord:
		p := c.pod(f.target)
		nw := c.etcdNet
		if f.kind == faultCutCoord {
			nw = c.coordNet
		}
		if err := c.disconnect(ctx, p.node, nw); err != nil {
			return err
		}
		revert = func(ctx context.Context) error { return c.connect(ctx, p.node, nw) }
	case faultKillPod:
		p := c.pod(f.target)
		if err := c.kill(ctx, p.node); err != nil {
			return err
		}
		revert = func(ctx context.Context) error {
			if _, err := docker.ContainerStart(ctx, p.c.GetContainerID(), client.ContainerStartOptions{}); err != nil {
				return fmt.Errorf("start %s: %w", p.name, err)
			}
			return eventually(ctx, 10*time.Second, p.refresh)
		}
	case faultKillLeader, faultCutLeaderEtcd:
		var co *coord
		if err := eventually(ctx, 10*time.Second, func(ctx context.Context) (err error) {
			co, err = c.leader(ctx, nil)
			return err
		}); err != nil {
			return err
		}
		f.target = co.name
		if f.kind == faultKillLeader {
			if err := c.kill(ctx, co.node); err != nil {
				return err
			}
			revert = func(ctx context.Context) error {
				if _, err := docker.ContainerStart(ctx, co.c.GetContainerID(), client.ContainerStartOptions{}); err != nil {
					return fmt.Errorf("start %s: %w", co.name, err)
				}
				return eventually(ctx, 10*time.Second, co.refresh)
			}
		} else {
			if err := c.disconnect(ctx, co.node, c.backbone); err != nil {
				return err
			}
			revert = func(ctx context.Context) error { return c.connect(ctx, co.node, c.backbone) }
		}
	case faultPauseRedis:
		n := c.redisOf(f.target)
		if _, err := docker.ContainerPause(ctx, n.c.GetContainerID(), client.ContainerPauseOptions{}); err != nil {
			return fmt.Errorf("pause %s: %w", n.name, err)
		}
		revert = func(ctx context.Context) error {
			_, err := docker.ContainerUnpause(ctx, n.c.GetContainerID(), client.ContainerUnpauseOptions{})
			return err
		}
	case faultStopRedis:
		n := c.redisOf(f.target)
		stop := 2 * time.Second
		if err := n.c.Stop(ctx, &stop); err != nil {
			return fmt.Errorf("stop %s: %w", n.name, err)
		}
		revert = func(ctx context.Context) error { return n.c.Start(ctx) }
	case faultBudget:
		body := fmt.Sprintf(`{"rate": "%g/s", "burst": %d}`, f.rate, f.burst)
		m.mark(l.elapsed(), fmt.Sprintf("budget %.0f/s", f.rate))
		return c.putAny(ctx, "/v1/budgets/"+tenant, []byte(body))
	case faultFloor:
		m.mark(l.elapsed(), fmt.Sprintf("floor %.2f", f.floor))
		return c.putPolicy(ctx, f.floor)
	}
	m.mark(l.elapsed(), f.kind.String()+" "+f.target)
	if l.at(ctx, f.at+f.dur) != nil {
		// The run ended early: revert anyway, the next scenario needs it.
		ctx = context.WithoutCancel(ctx)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := revert(rctx); err != nil {
		return fmt.Errorf("revert: %w", err)
	}
	return nil
}

func (c *cluster) pod(name string) *pod {
	for _, r := range c.regions {
		for _, p := range r.pods {
			if p.name == name {
				return p
			}
		}
	}
	panic("no pod " + name)
}

func (c *cluster) redisOf(name string) *node {
	for _, r := range c.regions {
		if r.redis.name == name {
			return r.redis
		}
	}
	panic("no Redis " + name)
}

// putAny PUTs to the first coordinator that answers (a killed or cut one
// may not).
func (c *cluster) putAny(ctx context.Context, path string, body []byte) error {
	var errs []error
	for _, co := range c.coords {
		err := c.put(ctx, co, path, body)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", co.name, err))
	}
	return errors.Join(errs...)
}

// putPolicy writes the e2e policy with floor_fraction floor.
func (c *cluster) putPolicy(ctx context.Context, floor float64) error {
	b, err := os.ReadFile(filepath.Join("testdata", "policy.yaml"))
	if err != nil {
		return err
	}
	s := strings.Replace(string(b), fmt.Sprintf("floor_fraction: %g\n", floorFraction), fmt.Sprintf("floor_fraction: %g\n", floor), 1)
	if floor != floorFraction && s == string(b) {
		return errors.New("testdata/policy.yaml has no floor_fraction line to change")
	}
	return c.putAny(ctx, "/v1/policy?note=nemesis", []byte(s))
}

// restore undoes what a nemesis leaves: the tenant's budget and the floor
// fraction, and waits for the cluster to be healthy again.
func (c *cluster) restore(ctx context.Context, tenant string) error {
	if err := c.putPolicy(ctx, floorFraction); err != nil {
		return err
	}
	return c.healthy(ctx, 90*time.Second)
}

// startStopped starts every container of the cluster that is not running
// and reads the published ports of those it started.
func (c *cluster) startStopped(ctx context.Context) error {
	refresh := map[*node]func(context.Context) error{}
	for _, co := range c.coords {
		refresh[co.node] = co.refresh
	}
	for _, r := range c.regions {
		for _, p := range r.pods {
			refresh[p.node] = p.refresh
		}
	}
	c.mu.Lock()
	nodes := append([]*node(nil), c.nodes...)
	c.mu.Unlock()
	for _, n := range nodes {
		st, err := n.c.State(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
		if st.Running && !st.Paused {
			continue
		}
		if st.Paused {
			if _, err := docker.ContainerUnpause(ctx, n.c.GetContainerID(), client.ContainerUnpauseOptions{}); err != nil {
				return fmt.Errorf("unpause %s: %w", n.name, err)
			}
			continue
		}
		if _, err := docker.ContainerStart(ctx, n.c.GetContainerID(), client.ContainerStartOptions{}); err != nil {
			return fmt.Errorf("start %s: %w", n.name, err)
		}
		if f := refresh[n]; f != nil {
			if err := eventually(ctx, 10*time.Second, f); err != nil {
				return fmt.Errorf("%s: %w", n.name, err)
			}
		}
	}
	return nil
}

// healthy waits until a coordinator leads and every pod is ready and sees
// its peers.
func (c *cluster) healthy(ctx context.Context, within time.Duration) error {
	if err := eventually(ctx, within, func(ctx context.Context) error {
		_, err := c.leader(ctx, nil)
		return err
	}); err != nil {
		return err
	}
	for _, r := range c.regions {
		for _, p := range r.pods {
			if err := eventually(ctx, within, func(ctx context.Context) error {
				if err := c.ready(ctx, p); err != nil {
					return err
				}
				n, err := c.metric(ctx, p, "allot_live_pods", nil)
				if err == nil && n != float64(c.topo.PodsPerRegion) {
					err = fmt.Errorf("%s: allot_live_pods = %v, want %d", p.name, n, c.topo.PodsPerRegion)
				}
				return err
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// ready returns nil when p answers /readyz with 200.
func (c *cluster) ready(ctx context.Context, p *pod) error {
	if _, err := c.get(ctx, p.httpAddr(), "/readyz"); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	return nil
}
