package statuspage

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Unix(1_800_000_000, 0)

// snap is a snapshot at second sec of tenants offering off (by tenant,
// split evenly between regions a and b), admitting 80% of it, granted 60%.
func snap(sec int, learning bool, off map[string]float64, wanted ...string) Snapshot {
	s := Snapshot{At: t0.Add(time.Duration(sec) * time.Second), Regions: []string{"a", "b"}, Learning: learning}
	names := make([]string, 0, len(off))
	for n := range off {
		names = append(names, n)
	}
	slices.SortFunc(names, func(x, y string) int {
		if off[x] != off[y] {
			if off[x] > off[y] {
				return -1
			}
			return 1
		}
		return strings.Compare(x, y)
	})
	s.Busiest = names[:min(len(names), ChartTenants)]
	for _, n := range slices.Concat(s.Busiest, wanted) {
		o := off[n] / 2
		s.Samples = append(s.Samples, Sample{Tenant: n, Offered: []float64{o, o}, Admitted: []float64{0.8 * o, 0.8 * o}, Grant: []float64{0.6 * o, 0.6 * o}})
	}
	return s
}

// src is a fixed Source.
type src struct {
	st  Status
	err error
	g   Grants
}

func (s src) PageStatus(context.Context) (Status, error) { return s.st, s.err }
func (s src) PageGrants(limit int) Grants {
	g := s.g
	if len(g.Tenants) > limit {
		g.More += len(g.Tenants) - limit
		g.Tenants = g.Tenants[:limit]
	}
	return g
}

func render(t *testing.T, p *Page, query string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/"+query, nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /%s = %d %s", query, rec.Code, rec.Header().Get("Content-Type"))
	}
	return rec.Body.String()
}

// The chart follows the ChartTenants busiest tenants: the busiest of the
// last sample first, one series per tenant with a point per snapshot that
// did not learn, and a tenant charted stays while there is room.
func TestChartFollowsTheBusiest(t *testing.T) {
	p := New(src{st: Status{ID: "c1", IsLeader: true}}, nil)
	off := map[string]float64{}
	for i := range 10 {
		off[fmt.Sprintf("t%d", i)] = float64(10 * (i + 1)) // t9 busiest
	}
	for sec := range 3 {
		p.Commit(snap(sec, false, off))
	}
	p.mu.Lock()
	got := p.hist.tenants()
	p.mu.Unlock()
	if want := []string{"t9", "t8", "t7", "t6", "t5", "t4", "t3", "t2"}; !slices.Equal(got, want) {
		t.Fatalf("charted %v, want %v", got, want)
	}
	body := render(t, p, "")
	if !strings.Contains(body, "Over time: t9") || strings.Count(body, "<polyline") != 6 {
		t.Errorf("GET / lacks t9's chart (2 regions × admitted, offered, grant):\n%.2000s", body)
	}
	if body := render(t, p, "?tenant=t2"); !strings.Contains(body, "Over time: t2") {
		t.Errorf("GET /?tenant=t2 does not chart t2")
	}
	if body := render(t, p, "?tenant=t0"); strings.Contains(body, "Over time") {
		t.Errorf("GET /?tenant=t0 charts a tenant not followed")
	}

	// t2 goes quiet and t0 busy: t2 stays charted while it is wanted
	// (Wanted), as long as the others leave room; here they do not.
	off["t0"], off["t2"] = 1000, 0
	if w := p.Wanted(); !slices.Contains(w, "t2") {
		t.Fatalf("Wanted() = %v, want the charted t2", w)
	}
	p.Commit(snap(3, false, off, p.Wanted()...))
	p.mu.Lock()
	got = p.hist.tenants()
	n := len(p.hist.series["t9"].at)
	p.mu.Unlock()
	if got[0] != "t0" || slices.Contains(got, "t2") || n != 4 {
		t.Errorf("after t0's rise: charted %v (t9 has %d points), want t0 first, t2 gone, 4 points", got, n)
	}

	// Learning adds no point; its rates count in the next sample.
	p.Commit(snap(4, true, off, p.Wanted()...))
	p.mu.Lock()
	n = len(p.hist.series["t9"].at)
	p.mu.Unlock()
	if n != 4 {
		t.Errorf("a learning snapshot added a point: %d, want 4", n)
	}
	p.Commit(snap(5, false, off, p.Wanted()...))
	p.mu.Lock()
	n = len(p.hist.series["t9"].at)
	p.mu.Unlock()
	if n != 5 {
		t.Errorf("after learning: %d points, want 5", n)
	}

	// New regions start the chart afresh.
	s := snap(6, false, off)
	s.Regions = []string{"a", "b", "c"}
	for i := range s.Samples {
		s.Samples[i].Offered = append(s.Samples[i].Offered, 1)
		s.Samples[i].Admitted = append(s.Samples[i].Admitted, 1)
		s.Samples[i].Grant = append(s.Samples[i].Grant, 1)
	}
	p.Commit(s)
	p.mu.Lock()
	n = len(p.hist.series["t9"].at)
	p.mu.Unlock()
	if n != 1 {
		t.Errorf("after the region set changed t9 has %d points, want 1", n)
	}
}

// The rest of the page comes from the Source at each request: the header,
// its error, the regions and the grants table, at most TableTenants rows.
func TestPageFromItsSource(t *testing.T) {
	g := Grants{Regions: []string{"us-east", "eu-west"}}
	for i := range TableTenants + 5 {
		g.Tenants = append(g.Tenants, TenantGrants{Name: fmt.Sprintf("t%03d", i), Cells: []Cell{{Set: true, Rate: 12.5, Burst: 3, Epoch: 7}, {}}})
	}
	leader := src{st: Status{ID: "c1", IsLeader: true, PolicyVersion: 4, LastRebalance: "2027-01-15T08:00:00Z", LastRebalanceMS: 1.5, LastWrites: 2,
		Regions: []RegionStatus{{Region: "us-east", Pods: 2, Applied: 9, LeaseValid: true, LastReport: "2027-01-15T08:00:01Z"}}}, g: g}
	body := render(t, New(leader, nil), "")
	for _, want := range []string{
		"<title>allot coordinator c1</title>", `<b class="ok">Leader</b>`, "policy version 4", "(1.50 ms, 2 grant changes)",
		"<td>us-east</td><td>2</td><td>9</td>", "<th>us-east</th><th>eu-west</th>",
		`<td>t000</td><td>12.5/s <span class="muted">b3 e7</span></td><td><span class="muted">floor</span></td>`,
		"and 5 more tenants", "No grants yet",
	} {
		if strings.Contains(body, want) == (want == "No grants yet") {
			t.Errorf("leader's page: %q present = %v:\n%.3000s", want, !strings.Contains(body, want), body)
		}
	}
	if strings.Contains(body, "<td>t100</td>") {
		t.Errorf("the table lists more than %d tenants", TableTenants)
	}
	follower := src{st: Status{ID: "c2", Leader: Leader{ID: "c1", HTTP: "10.0.0.1:8080"}}, err: errors.New("status: etcd unreachable")}
	body = render(t, New(follower, nil), "")
	for _, want := range []string{"Follower; leader: <code>c1</code> 10.0.0.1:8080", `<p class="bad">status: etcd unreachable</p>`, "Only the leader sees", "No grants yet"} {
		if !strings.Contains(body, want) {
			t.Errorf("follower's page lacks %q:\n%.3000s", want, body)
		}
	}
}
