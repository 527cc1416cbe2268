package coordinator

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/shares"
)

// tpod is a regional pod's protocol state driven by hand: its reports go
// straight to a Coordinator's Report, and it applies the answers.
type tpod struct {
	region, id string
	st         *shares.Pod
}

func newTPod(region, id string) *tpod {
	return &tpod{region: region, id: id, st: shares.NewPod(region, 50*time.Millisecond)}
}

// report sends the pod's report at now covering interval; with apply the
// answer reaches the pod.
func (p *tpod) report(c *Coordinator, now time.Time, interval time.Duration, usage map[string]shares.Usage, apply bool) (ReportAnswer, error) {
	term, applied := p.st.State()
	heard, renewed, leased := p.st.Standing(now)
	ans, err := c.Report(context.Background(), PodReport{
		Region: p.region, Pod: p.id, Interval: interval, Term: term, Applied: applied,
		Usage: usage, LivePods: 2, Held: p.st.Held(), Heard: heard, RenewedBy: renewed, Leased: leased,
	})
	if err != nil || !apply {
		return ans, err
	}
	if ans.RegionRemoved {
		p.st.Removed()
	} else {
		p.st.Answered(now, now, ans.Answer, nil)
	}
	return ans, nil
}

// enforced is what the pod enforces for tenant at now (its own reading of
// budgets left out: it never raises anything).
func (p *tpod) enforced(now time.Time, tenant string) float64 {
	r, _, _ := p.st.Effective(now, tenant, shares.Ceiling{Rate: math.Inf(1), Burst: math.MaxInt64})
	return r
}

// ticked is one coordinator, the leader, on a fresh etcd holding the example
// policy, with a hand-driven clock and ticker: it rebalances only when told.
type ticked struct {
	srv   *etcdtest.Server
	n     *node
	clock atomic.Int64
	tick  chan time.Time
}

// startTicked starts a ticked coordinator (adjust, when not nil, changes its
// config first) and waits for its first rebalance, which loads the policy:
// it takes reports from then on.
func startTicked(t *testing.T, adjust func(*Coordinator)) *ticked {
	t.Helper()
	srv := etcdtest.Start(t)
	admin := state.New(srv.Client(t), "")
	if _, err := admin.ApplyPolicy(context.Background(), examplePolicy(t), 0, ""); err != nil {
		t.Fatal(err)
	}
	k := &ticked{srv: srv, tick: make(chan time.Time)}
	k.clock.Store(time.Unix(1_800_000_000, 0).UnixNano())
	k.n = startNodeWith(t, srv, "solo", func(c *Coordinator) {
		c.cfg.Now = k.now
		c.ticks = func(time.Duration) (<-chan time.Time, func()) { return k.tick, func() {} }
		if adjust != nil {
			adjust(c)
		}
	})
	wait.Until(t, 10*time.Second, func() error {
		if !k.n.c.IsLeader() || k.rebalances() < 1 {
			return errors.New("not leading yet")
		}
		return nil
	})
	return k
}

func (k *ticked) now() time.Time          { return time.Unix(0, k.clock.Load()) }
func (k *ticked) advance(d time.Duration) { k.clock.Add(int64(d)) }
func (k *ticked) rebalances() float64     { return testutil.ToFloat64(k.n.c.m.rebalances) }

// rebalance runs one rebalance and waits for it.
func (k *ticked) rebalance(t *testing.T) {
	t.Helper()
	r0 := k.rebalances()
	k.tick <- time.Time{}
	wait.Until(t, 10*time.Second, func() error {
		if k.rebalances() <= r0 {
			return errors.New("rebalance not done")
		}
		return nil
	})
}
