package statuspage_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/allot-dev/allot/coordinator/statuspage"
)

// leader is a Source: a leader with one region and no grants yet.
type leader struct{}

func (leader) PageStatus(context.Context) (statuspage.Status, error) {
	return statuspage.Status{ID: "coordinator-1", IsLeader: true, Regions: []statuspage.RegionStatus{{Region: "us-east", Pods: 1, LeaseValid: true}}}, nil
}

func (leader) PageGrants(int) statuspage.Grants {
	return statuspage.Grants{Regions: []string{"us-east"}}
}

// The coordinator hands the page a snapshot after each rebalance (taken
// under its lock), and the page charts it and renders on request (outside).
func Example() {
	p := statuspage.New(leader{}, nil)
	t0 := time.Unix(1_800_000_000, 0)
	for i := range 3 {
		p.Commit(statuspage.Snapshot{
			At: t0.Add(time.Duration(i) * 2 * time.Second), Regions: []string{"us-east"}, Busiest: []string{"acme"},
			Samples: []statuspage.Sample{{Tenant: "acme", Offered: []float64{120}, Admitted: []float64{100}, Grant: []float64{100}}},
		})
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	body := rec.Body.String()
	fmt.Println(strings.Contains(body, "<b class=\"ok\">Leader</b>"))
	fmt.Println(strings.Contains(body, "Over time: acme"), strings.Count(body, "<polyline"))
	// Output:
	// true
	// true 3
}
