package dev

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/regional"
)

// Load drives one tenant's traffic into every region at rates a schedule
// sets, and counts what each region admitted.
type Load struct {
	Tenant string
	// Rates returns each region's offered rate (units per second) at elapsed
	// time since the load started.
	Rates func(elapsed time.Duration) map[string]float64
	// Tick is how often each region's driver wakes (default 10ms).
	Tick time.Duration

	mu     sync.Mutex
	counts map[string]*regionCount
}

type regionCount struct{ offered, admitted atomic.Int64 }

// Counts returns cumulative offered and admitted units per region.
func (l *Load) Counts() map[string][2]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][2]int64{}
	for r, c := range l.counts {
		out[r] = [2]int64{c.offered.Load(), c.admitted.Load()}
	}
	return out
}

// Run drives the load into regions until ctx ends.
func (l *Load) Run(ctx context.Context, regions []*Region) {
	tick := l.Tick
	if tick <= 0 {
		tick = 10 * time.Millisecond
	}
	l.mu.Lock()
	l.counts = map[string]*regionCount{}
	for _, r := range regions {
		l.counts[r.Name] = &regionCount{}
	}
	l.mu.Unlock()
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range regions {
		c := l.counts[r.Name]
		wg.Go(func() { l.drive(ctx, r.Name, r.Service, c, start, tick) })
	}
	wg.Wait()
}

func (l *Load) drive(ctx context.Context, name string, svc *regional.Service, c *regionCount, start time.Time, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	desc := map[string]string{"tenant": l.Tenant}
	due := 0.0 // units owed to the schedule
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due += l.Rates(now.Sub(start))[name] * now.Sub(last).Seconds()
			last = now
			for ; due >= 1; due-- {
				d, err := svc.Decide(ctx, desc, 1)
				if err != nil {
					continue
				}
				c.offered.Add(1)
				if d.Allowed {
					c.admitted.Add(1)
				}
			}
		}
	}
}

// Skewed is the demo's load: total times the budget, split 70/20/10 across
// the regions, rotating the split every period.
func Skewed(regions []string, total float64, period time.Duration) func(time.Duration) map[string]float64 {
	split := []float64{0.7, 0.2, 0.1}
	return func(el time.Duration) map[string]float64 {
		out := make(map[string]float64, len(regions))
		shift := int(el / period)
		for i, r := range regions {
			share := 0.0
			if len(regions) <= len(split) {
				share = split[(i+shift)%len(regions)]
				if len(regions) < len(split) {
					share = 1 / float64(len(regions))
				}
			} else {
				share = 1 / float64(len(regions))
			}
			out[r] = total * share
		}
		return out
	}
}
