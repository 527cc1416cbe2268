package coordinator

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/allot-dev/allot/coordinator/statuspage"
	"github.com/allot-dev/allot/shares"
)

// statusPage is what the coordinator needs of its status page
// (statuspage.Page; tests wrap it).
type statusPage interface {
	http.Handler
	Wanted() []string
	Commit(statuspage.Snapshot)
}

// pageSnapshot copies, for the status page, what it charts of lead at now:
// the busiest tenants and those the page wants, with their rates and
// grants in each region. c.mu held (it reads lead); the page's work on it
// happens once the lock is released.
func pageSnapshot(now time.Time, regions []string, learning bool, lead *shares.Leader, wanted []string) statuspage.Snapshot {
	s := statuspage.Snapshot{At: now, Regions: regions, Learning: learning, Busiest: lead.Busiest(statuspage.ChartTenants)}
	s.Samples = make([]statuspage.Sample, 0, len(s.Busiest)+len(wanted))
	seen := make(map[string]bool, len(s.Busiest)+len(wanted))
	for _, t := range slices.Concat(s.Busiest, wanted) {
		if seen[t] {
			continue
		}
		seen[t] = true
		smp := statuspage.Sample{Tenant: t, Grant: make([]float64, len(regions))}
		if u := lead.TenantRates(t); len(u) == len(regions) {
			smp.Offered, smp.Admitted = make([]float64, len(u)), make([]float64, len(u))
			for i := range u {
				smp.Offered[i], smp.Admitted[i] = u[i].Offered, u[i].Admitted
			}
		}
		grants := lead.Allocator().Grants(t)
		b, budgeted := lead.Budget(t)
		for i, reg := range regions {
			if g, ok := grants[reg]; ok {
				smp.Grant[i] = g.Rate
			} else if budgeted {
				smp.Grant[i], _ = shares.Floor(b, regions, reg)
			}
		}
		s.Samples = append(s.Samples, smp)
	}
	return s
}

// pageSource is the coordinator as its status page's statuspage.Source.
type pageSource struct{ c *Coordinator }

// PageStatus implements statuspage.Source.
func (s pageSource) PageStatus(ctx context.Context) (statuspage.Status, error) {
	st, err := s.c.Status(ctx)
	if err != nil {
		return statuspage.Status{}, err
	}
	out := statuspage.Status{
		ID: st.ID, IsLeader: st.IsLeader, Leader: statuspage.Leader{ID: st.Leader.ID, HTTP: st.Leader.HTTP},
		PolicyVersion: st.PolicyVersion, LastRebalance: st.LastRebalance, LastRebalanceMS: st.LastRebalanceMS,
		LastWrites: st.LastWrites, Regions: make([]statuspage.RegionStatus, 0, len(st.Regions)),
	}
	for _, r := range st.Regions {
		out.Regions = append(out.Regions, statuspage.RegionStatus{
			Region: r.Region, Pods: r.Pods, Applied: r.Applied, LeaseValid: r.LeaseValid, LastReport: r.LastReport,
		})
	}
	return out, nil
}

// PageGrants implements statuspage.Source: the policy's regions and the
// first limit tenants by name holding a grant in one of them. Grants live
// with the leader (they travel in its answers to pods): a follower has
// none. Under c.mu it only walks the grants (shares.Allocator.EachGrant,
// tenant by tenant) keeping the first limit names, and copies their cells.
func (s pageSource) PageGrants(limit int) statuspage.Grants {
	_, doc, _ := s.c.policy.current()
	if doc == nil {
		return statuspage.Grants{}
	}
	out := statuspage.Grants{Regions: doc.Regions}
	idx := make(map[string]int, len(doc.Regions))
	for i, reg := range doc.Regions {
		idx[reg] = i
	}
	total := 0
	cur, have := "", false
	cells := make([]statuspage.Cell, len(doc.Regions))
	flush := func() {
		if !have {
			return
		}
		total++
		have = false
		if len(out.Tenants) == limit && cur >= out.Tenants[limit-1].Name || limit <= 0 {
			return
		}
		j, _ := slices.BinarySearchFunc(out.Tenants, cur, func(r statuspage.TenantGrants, name string) int { return strings.Compare(r.Name, name) })
		out.Tenants = slices.Insert(out.Tenants, j, statuspage.TenantGrants{Name: cur, Cells: slices.Clone(cells)})
		if len(out.Tenants) > limit {
			out.Tenants = out.Tenants[:limit]
		}
	}
	c := s.c
	c.mu.Lock()
	if t := c.term; t != nil && t.lead != nil {
		t.lead.Allocator().EachGrant(func(tenant, region string, g shares.Grant) {
			if tenant != cur {
				flush()
				cur = tenant
				clear(cells)
			}
			if i, ok := idx[region]; ok {
				cells[i] = statuspage.Cell{Set: true, Rate: g.Rate, Burst: g.Burst, Epoch: g.Epoch}
				have = true
			}
		})
		flush()
	}
	c.mu.Unlock()
	out.More = total - len(out.Tenants)
	return out
}
