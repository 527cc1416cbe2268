package statuspage

import (
	"context"
	"html/template"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Sizes: the chart follows the ChartTenants busiest tenants; the grants
// table lists TableTenants tenants at most.
const (
	ChartTenants = 8
	TableTenants = 100
)

// Snapshot is what the coordinator hands the page after a rebalance. It
// holds plain values only: the page keeps it, and the coordinator must not
// change it afterwards.
type Snapshot struct {
	// At is the rebalance's instant (the leader's clock).
	At time.Time
	// Regions are the policy's regions, in the leader's order.
	Regions []string
	// Learning: the leader learns and granted nothing; the sample is
	// kept and closed with the next snapshot that does not learn.
	Learning bool
	// Busiest are the ChartTenants tenants that offered the most, busiest
	// first.
	Busiest []string
	// Samples are those tenants' and every tenant Page.Wanted named
	// (once each).
	Samples []Sample
}

// Sample is one tenant at one rebalance, by region (Snapshot.Regions'
// order).
type Sample struct {
	Tenant string
	// Offered and Admitted are units per second (nil: the leader does not
	// track the tenant).
	Offered, Admitted []float64
	// Grant is the rate granted, or the region's floor where it holds no
	// grant (0 without a budget).
	Grant []float64
}

// Status is the page's header: the coordinator and, on the leader, its
// regions.
type Status struct {
	ID              string
	IsLeader        bool
	Leader          Leader
	PolicyVersion   int64
	LastRebalance   string // RFC 3339, "" before the first
	LastRebalanceMS float64
	LastWrites      int // grants the last rebalance changed
	Regions         []RegionStatus
}

// Leader names the leader a follower knows.
type Leader struct{ ID, HTTP string }

// RegionStatus is one region as the leader sees it.
type RegionStatus struct {
	Region     string
	Pods       int
	Applied    uint64
	LeaseValid bool
	LastReport string
}

// Grants is the grants table: the policy's regions and the first tenants
// by name that hold a grant in one of them.
type Grants struct {
	Regions []string
	Tenants []TenantGrants // sorted by name
	// More counts the tenants with grants left out.
	More int
}

// TenantGrants is one row of the table.
type TenantGrants struct {
	Name  string
	Cells []Cell // by region (Grants.Regions' order)
}

// Cell is one tenant's grant in one region; Set false: the region holds
// none (it enforces its floor).
type Cell struct {
	Set   bool
	Rate  float64
	Burst int64
	Epoch uint64
}

// Source is what the page asks its coordinator for at each request.
type Source interface {
	// PageStatus returns the header (an error is shown on the page).
	PageStatus(ctx context.Context) (Status, error)
	// PageGrants returns at most limit tenants' grants (a follower: none).
	PageGrants(limit int) Grants
}

// Page is the status page of one coordinator.
type Page struct {
	src Source
	log *slog.Logger

	mu   sync.Mutex
	hist *history
}

// New returns the page of src (logger nil: discard).
func New(src Source, log *slog.Logger) *Page {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Page{src: src, log: log, hist: newHistory()}
}

// Wanted returns the tenants the next snapshot must carry samples of,
// besides the busiest: those charted now, and those sampled while the
// leader learned.
func (p *Page) Wanted() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hist.wanted()
}

// Commit takes the snapshot of a rebalance into the chart's history.
func (p *Page) Commit(s Snapshot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hist.add(s)
}

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"pct": func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return 100 * a / b
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>allot coordinator {{.Status.ID}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:20px} h2{font-size:16px;margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0} th,td{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left} .ok{color:#080} .bad{color:#b00} .muted{color:#888}
.bar{display:inline-block;height:8px;background:#4a7;vertical-align:middle}
</style></head><body>
<h1>allot coordinator <code>{{.Status.ID}}</code></h1>
<p>{{if .Status.IsLeader}}<b class="ok">Leader</b>{{else}}Follower; leader: <code>{{.Status.Leader.ID}}</code> {{.Status.Leader.HTTP}}{{end}}
 · policy version {{.Status.PolicyVersion}}
{{if .Status.LastRebalance}} · last rebalance {{.Status.LastRebalance}} ({{printf "%.2f" .Status.LastRebalanceMS}} ms, {{.Status.LastWrites}} grant changes){{end}}</p>
{{if .Error}}<p class="bad">{{.Error}}</p>{{end}}
<h2>Regions</h2>
{{if .Status.IsLeader}}<table><tr><th>region</th><th>live pods</th><th>applied epoch</th><th>lease</th><th>last report</th></tr>
{{range .Status.Regions}}<tr><td>{{.Region}}</td><td>{{.Pods}}</td><td>{{.Applied}}</td>
<td>{{if .LeaseValid}}<span class="ok">valid</span>{{else}}<span class="bad">lapsed (floors)</span>{{end}}</td><td class="muted">{{.LastReport}}</td></tr>{{end}}
</table>{{else}}<p class="muted">Only the leader sees the regions' reports.</p>{{end}}
{{if .Chart}}<h2>Over time: {{.ChartTenant}}</h2>
<p class="muted">Per region, units per second: admitted (solid), offered (dashed), grant (dotted). Busiest tenants:
{{range .Charted}}<a href="/?tenant={{.}}">{{.}}</a> {{end}}</p>
{{.Chart}}{{end}}
<h2>Tenants and grants</h2>
{{if .Tenants}}<table><tr><th>tenant</th>{{range .Regions}}<th>{{.}}</th>{{end}}</tr>
{{range .Tenants}}<tr><td>{{.Name}}</td>{{range .Cells}}<td>{{if .Set}}{{printf "%.1f/s" .Rate}} <span class="muted">b{{.Burst}} e{{.Epoch}}</span>{{else}}<span class="muted">floor</span>{{end}}</td>{{end}}</tr>{{end}}
</table>{{if .More}}<p class="muted">and {{.More}} more tenants (allot shares TENANT)</p>{{end}}
{{else}}<p class="muted">No grants yet: grants appear once regions report traffic.</p>{{end}}
<p class="muted">JSON: <a href="/v1/status">/v1/status</a> · <a href="/v1/budgets">/v1/budgets</a> · <a href="/v1/policy">/v1/policy</a> · <a href="/metrics">/metrics</a></p>
</body></html>
`))

// pageData is one rendering.
type pageData struct {
	Status  Status
	Regions []string
	Tenants []TenantGrants
	More    int
	Error   string
	// The chart of one tenant over time (?tenant=, default the busiest).
	Chart       template.HTML
	ChartTenant string
	Charted     []string
}

// ServeHTTP renders the page; ?tenant=NAME charts that tenant instead of
// the busiest.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var data pageData
	p.mu.Lock()
	data.Charted = p.hist.tenants()
	data.ChartTenant = r.URL.Query().Get("tenant")
	if data.ChartTenant == "" && len(data.Charted) > 0 {
		data.ChartTenant = data.Charted[0]
	}
	data.Chart = p.hist.chart(data.ChartTenant)
	p.mu.Unlock()
	st, err := p.src.PageStatus(r.Context())
	if err != nil {
		data.Error = err.Error()
	}
	data.Status = st
	g := p.src.PageGrants(TableTenants)
	data.Regions, data.Tenants, data.More = g.Regions, g.Tenants, g.More
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pageTmpl.Execute(w, data); err != nil {
		p.log.Warn("status page", "err", err)
	}
}
