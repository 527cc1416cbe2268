package coordinator

import (
	"github.com/allot-dev/allot/shares"
	"html/template"
	"net/http"
	"sort"
)

// pageTenants bounds the tenants the status page lists.
const pageTenants = 100

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

type pageCell struct {
	Set   bool
	Rate  float64
	Burst int64
	Epoch uint64
}

type pageTenant struct {
	Name  string
	Cells []pageCell
}

func (h *httpAPI) page(w http.ResponseWriter, r *http.Request) {
	data := struct {
		Status  Status
		Regions []string
		Tenants []pageTenant
		More    int
		Error   string
		// The chart of one tenant over time (?tenant=, default the busiest).
		Chart       template.HTML
		ChartTenant string
		Charted     []string
	}{}
	h.c.mu.Lock()
	data.Charted = h.c.hist.tenants()
	data.ChartTenant = r.URL.Query().Get("tenant")
	if data.ChartTenant == "" && len(data.Charted) > 0 {
		data.ChartTenant = data.Charted[0]
	}
	data.Chart = h.c.hist.chart(data.ChartTenant)
	h.c.mu.Unlock()
	st, err := h.c.Status(r.Context())
	if err != nil {
		data.Error = err.Error()
	}
	data.Status = st
	if _, doc, err := h.c.store.Policy(r.Context()); err == nil {
		data.Regions = doc.Regions
	}
	// Grants live with the leader (they travel in its answers to pods): a
	// follower shows none.
	{
		idx := map[string]int{}
		for i, reg := range data.Regions {
			idx[reg] = i
		}
		by := map[string][]pageCell{}
		h.c.mu.Lock()
		if t := h.c.term; t != nil && t.lead != nil {
			t.lead.Allocator().EachGrant(func(tenant, region string, g shares.Grant) {
				i, ok := idx[region]
				if !ok {
					return
				}
				if by[tenant] == nil {
					by[tenant] = make([]pageCell, len(data.Regions))
				}
				by[tenant][i] = pageCell{Set: true, Rate: g.Rate, Burst: g.Burst, Epoch: g.Epoch}
			})
		}
		h.c.mu.Unlock()
		names := make([]string, 0, len(by))
		for n := range by {
			names = append(names, n)
		}
		sort.Strings(names)
		if len(names) > pageTenants {
			data.More = len(names) - pageTenants
			names = names[:pageTenants]
		}
		for _, n := range names {
			data.Tenants = append(data.Tenants, pageTenant{Name: n, Cells: by[n]})
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pageTmpl.Execute(w, data); err != nil {
		h.c.log.Warn("status page", "err", err)
	}
}
