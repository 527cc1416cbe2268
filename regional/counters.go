package regional

import (
	"sync"
	"sync/atomic"

	"github.com/allot-dev/allot/shares"
)

// counters counts offered and admitted units per tenant between reports.
// The decide path only loads a pointer and adds to atomics: no lock, no
// allocation for a tenant already tracked.
//
// Memory rule: at most max tenants are tracked at once; a tenant seen when
// the table is full is not counted (dropped counts such units) until idle
// tenants make room. A tenant whose counts stay zero for idleReports
// consecutive reports is removed.
type counters struct {
	m       sync.Map // tenant → *usageCell
	n       atomic.Int64
	max     int64
	dropped atomic.Int64
	// fresh is signalled (without blocking; buffered 1) when a tenant is
	// counted for the first time: the reporter asks for its grant at once.
	fresh chan struct{}
}

// idleReports is how many empty reports a tenant survives.
const idleReports = 3

type usageCell struct {
	offered, admitted atomic.Int64
	decisions         atomic.Int64 // behind offered (a settle adjusts units, not decisions)
	idle              int          // reports with no traffic; touched by drain only
}

func newCounters(max int) *counters {
	return &counters{max: int64(max), fresh: make(chan struct{}, 1)}
}

// add counts one decision of cost units.
func (c *counters) add(tenant string, cost int64, admitted bool) {
	v, ok := c.m.Load(tenant)
	first := false
	if !ok {
		if c.n.Load() >= c.max {
			c.dropped.Add(cost)
			return
		}
		var loaded bool
		v, loaded = c.m.LoadOrStore(tenant, &usageCell{})
		if !loaded {
			c.n.Add(1)
			first = true
		}
	}
	u := v.(*usageCell)
	u.offered.Add(cost)
	u.decisions.Add(1)
	if admitted {
		u.admitted.Add(cost)
	}
	if first {
		// After the counts: a reporter woken by the signal must find this
		// decision's units (a step of zero units would ask for nothing).
		select {
		case c.fresh <- struct{}{}:
		default:
		}
	}
}

// adjust corrects tenant's counts by delta units (a settle: negative gives
// units back). A tenant not counted since the last drain is not tracked
// again for it.
func (c *counters) adjust(tenant string, delta int64) {
	v, ok := c.m.Load(tenant)
	if !ok {
		return
	}
	u := v.(*usageCell)
	u.offered.Add(delta)
	u.admitted.Add(delta)
}

// drain returns every tenant's counts since the last drain and resets them.
// Only one goroutine (the reporter) drains. With evict (once a report), a
// tenant without counts since idleReports such drains is removed.
func (c *counters) drain(evict bool) map[string]shares.Usage {
	out := make(map[string]shares.Usage)
	c.m.Range(func(k, v any) bool {
		u := v.(*usageCell)
		off, adm := max(0, u.offered.Swap(0)), max(0, u.admitted.Swap(0)) // (a refund may exceed what the interval counted)
		dec := u.decisions.Swap(0)
		if off == 0 && adm == 0 {
			if !evict {
				return true
			}
			u.idle++
			if u.idle >= idleReports {
				c.m.Delete(k)
				c.n.Add(-1)
			}
			return true
		}
		u.idle = 0
		out[k.(string)] = shares.Usage{Offered: float64(off), Admitted: float64(adm), Decisions: float64(dec)}
		return true
	})
	return out
}
