package e2e

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// stream is one kind of request offered in one region at a rate that
// follows a profile (units per second at an elapsed time since the load
// started), with Poisson arrivals.
type stream struct {
	region string
	desc   map[string]string
	rate   func(time.Duration) float64
}

// call is one decision as the client saw it: when it was sent and answered
// (since the load started, on this process's monotonic clock) and what it
// said.
type call struct {
	stream     int
	send, recv time.Duration
	allowed    bool
	fallback   bool
	failed     bool // the RPC itself failed (no decision)
}

// load drives streams into a cluster's pods over their published gRPC
// ports, spreading each region's calls over its pods, and records every
// call.
type load struct {
	streams []stream
	start   time.Time

	mu    sync.Mutex
	calls []call

	inflight atomic.Int64
	wg       sync.WaitGroup
}

// tick is how often each stream's driver wakes and draws its arrivals.
const tick = 5 * time.Millisecond

// callTimeout bounds one call: far above a healthy pod's latency, so a
// slow answer is a measured fact, not a lost one.
const callTimeout = 3 * time.Second

// startLoad starts the drivers; they stop when ctx ends (then wait).
func startLoad(ctx context.Context, c *cluster, streams []stream, seed uint64) *load {
	l := &load{streams: streams, start: time.Now()}
	for i, s := range streams {
		r := c.region(s.region)
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		l.wg.Go(func() { l.drive(ctx, i, r, rng) })
	}
	return l
}

// elapsed is the load's clock.
func (l *load) elapsed() time.Duration { return time.Since(l.start) }

// at waits until the load's clock reads d (a scenario's schedule, not a
// wait for a condition).
func (l *load) at(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(time.Until(l.start.Add(d)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// wait waits for every driver and call to finish.
func (l *load) wait() { l.wg.Wait() }

// snapshot returns the calls recorded so far, in no particular order.
func (l *load) snapshot() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]call(nil), l.calls...)
}

func (l *load) drive(ctx context.Context, i int, r *region, rng *rand.Rand) {
	s := l.streams[i]
	t := time.NewTicker(tick)
	defer t.Stop()
	last := l.elapsed()
	next := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := l.elapsed()
		lambda := s.rate(now) * (now - last).Seconds()
		last = now
		for range poisson(rng, lambda) {
			p := r.pods[next%len(r.pods)]
			next++
			l.wg.Go(func() { l.one(ctx, i, p) })
		}
	}
}

func (l *load) one(ctx context.Context, i int, p *pod) {
	l.inflight.Add(1)
	defer l.inflight.Add(-1)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	c := call{stream: i, send: l.elapsed()}
	d, err := p.lim().Decide(cctx, &allotv1.DecideRequest{Descriptors: l.streams[i].desc, Cost: 1})
	c.recv = l.elapsed()
	if err != nil {
		c.failed = true
	} else {
		c.allowed, c.fallback = d.Allowed, d.Fallback
	}
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

// poisson draws from Poisson(lambda) (Knuth; lambda is small: one tick's
// arrivals).
func poisson(rng *rand.Rand, lambda float64) int {
	if lambda <= 0 {
		return 0
	}
	if lambda > 30 {
		return max(0, int(math.Round(lambda+math.Sqrt(lambda)*rng.NormFloat64())))
	}
	limit, k, p := math.Exp(-lambda), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= limit {
			return k
		}
		k++
	}
}

// ---- profiles ----

func constant(r float64) func(time.Duration) float64 {
	return func(time.Duration) float64 { return r }
}

func step(before, after float64, at time.Duration) func(time.Duration) float64 {
	return func(t time.Duration) float64 {
		if t < at {
			return before
		}
		return after
	}
}
