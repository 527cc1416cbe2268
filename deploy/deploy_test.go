package deploy

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// metricKind is how the code registers a metric.
type metricKind string

// codeMetrics is what the code registers: name -> kind, and every label
// name it declares (vector labels and const labels).
type codeMetrics struct {
	kinds  map[string]metricKind
	labels map[string]bool
}

// scrapeLabels are attached by Prometheus (and the chart's ServiceMonitor
// relabelling), not by the code.
var scrapeLabels = []string{"instance", "job", "pod", "namespace", "component", "le", "__name__"}

// loadCodeMetrics parses every non-test Go file of the module and collects
// prometheus.{Counter,Gauge,Histogram,Summary}Opts literals' Name fields,
// the names of prometheus.NewDesc calls (collectors' own metrics), and the
// label names of New*Vec and NewDesc calls and prometheus.Labels literals.
func loadCodeMetrics(t *testing.T) codeMetrics {
	t.Helper()
	cm := codeMetrics{kinds: map[string]metricKind{}, labels: map[string]bool{}}
	for _, l := range scrapeLabels {
		cm.labels[l] = true
	}
	root := ".."
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Nested modules and non-code trees are not the service's code.
			if path != root && (strings.HasPrefix(d.Name(), ".") || fileExists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || !isIdent(sel.X, "prometheus") {
					return true
				}
				switch sel.Sel.Name {
				case "CounterOpts", "GaugeOpts", "HistogramOpts", "SummaryOpts":
					kind := metricKind(strings.TrimSuffix(sel.Sel.Name, "Opts"))
					for _, e := range n.Elts {
						kv, ok := e.(*ast.KeyValueExpr)
						if !ok || !isIdent(kv.Key, "Name") {
							continue
						}
						if name, ok := stringLit(kv.Value); ok {
							cm.kinds[name] = kind
						}
					}
				case "Labels":
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							if name, ok := stringLit(kv.Key); ok {
								cm.labels[name] = true
							}
						}
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || !isIdent(sel.X, "prometheus") {
					return true
				}
				if sel.Sel.Name == "NewDesc" && len(n.Args) > 0 {
					// A collector's own metric (its values made at scrape time).
					if name, ok := stringLit(n.Args[0]); ok {
						cm.kinds[name] = "Desc"
					}
				} else if !strings.HasSuffix(sel.Sel.Name, "Vec") {
					return true
				}
				for _, a := range n.Args {
					if lit, ok := a.(*ast.CompositeLit); ok {
						for _, e := range lit.Elts {
							if s, ok := stringLit(e); ok {
								cm.labels[s] = true
							}
						}
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatalf("walk the module: %v", err)
	}
	if len(cm.kinds) < 10 {
		t.Fatalf("found only %d metrics in the code (%v): the parser no longer sees how metrics are declared", len(cm.kinds), cm.kinds)
	}
	return cm
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

var metricRef = regexp.MustCompile(`\ballot_[a-zA-Z0-9_]+`)

// checkQuery reports the problems of one PromQL expression: metrics the code
// does not register (histograms must be queried through their series) and
// labels nobody attaches.
func (cm codeMetrics) checkQuery(expr string) []string {
	var errs []string
	for _, name := range metricRef.FindAllString(expr, -1) {
		if msg := cm.checkSeries(name); msg != "" {
			errs = append(errs, msg)
		}
	}
	for _, l := range queryLabels(expr) {
		if !cm.labels[l] {
			errs = append(errs, "label "+strconv.Quote(l)+" is attached by neither the code nor the scrape")
		}
	}
	return errs
}

// checkSeries checks a series name as Prometheus stores it.
func (cm codeMetrics) checkSeries(name string) string {
	if k, ok := cm.kinds[name]; ok {
		if k == "Histogram" || k == "Summary" {
			return name + " is a " + string(k) + ": query " + name + "_bucket, _count or _sum"
		}
		return ""
	}
	for _, suf := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if k := cm.kinds[base]; k == "Histogram" || (k == "Summary" && suf != "_bucket") {
				return ""
			}
		}
	}
	return name + " is not registered anywhere in the code"
}

// checkProse checks metric names mentioned in text (descriptions,
// annotations): a histogram may be named bare there.
func (cm codeMetrics) checkProse(text string) []string {
	var errs []string
	for _, name := range metricRef.FindAllString(text, -1) {
		if _, ok := cm.kinds[name]; ok {
			continue
		}
		if msg := cm.checkSeries(name); msg != "" {
			errs = append(errs, msg)
		}
	}
	return errs
}

var (
	groupingRe = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	selectorRe = regexp.MustCompile(`\{([^{}]*)\}`)
	matcherRe  = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	labelValRe = regexp.MustCompile(`label_values\([^,]*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
)

// queryLabels returns the label names an expression groups, joins or
// matches by.
func queryLabels(expr string) []string {
	var out []string
	for _, m := range groupingRe.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	for _, m := range selectorRe.FindAllStringSubmatch(expr, -1) {
		for _, part := range splitMatchers(m[1]) {
			if mm := matcherRe.FindStringSubmatch(part); mm != nil {
				out = append(out, mm[1])
			}
		}
	}
	for _, m := range labelValRe.FindAllStringSubmatch(expr, -1) {
		out = append(out, m[1])
	}
	return out
}

// splitMatchers splits a selector's body at commas outside quotes.
func splitMatchers(s string) []string {
	var parts []string
	var b strings.Builder
	inQuote := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(s):
			b.WriteByte(c)
			i++
			b.WriteByte(s[i])
			continue
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			parts = append(parts, b.String())
			b.Reset()
			continue
		}
		b.WriteByte(c)
	}
	return append(parts, b.String())
}

// The query checker itself: each case must be caught (or passed) so a
// checker that sees nothing cannot pass the artifact tests.
func TestCheckQuery(t *testing.T) {
	cm := codeMetrics{
		kinds:  map[string]metricKind{"allot_decisions_total": "Counter", "allot_store_duration_seconds": "Histogram"},
		labels: map[string]bool{"region": true, "result": true, "le": true},
	}
	tests := []struct {
		expr  string
		nerrs int
	}{
		{`sum by (region, result) (rate(allot_decisions_total{region=~"$region"}[5m]))`, 0},
		{`sum by (regoin) (rate(allot_decisions_total[5m]))`, 1},
		{`rate(allot_decision_total[5m])`, 1},
		{`histogram_quantile(0.99, sum by (le) (rate(allot_store_duration_seconds_bucket[5m])))`, 0},
		{`rate(allot_store_duration_seconds[5m])`, 1},
		{`rate(allot_decisions_total_count[5m])`, 1},
		{`allot_decisions_total{result="a,b",regoin!="x"}`, 1},
		{`label_values(allot_decisions_total, limitt)`, 1},
		{`a / on (region) group_left b`, 0},
	}
	for _, tt := range tests {
		if errs := cm.checkQuery(tt.expr); len(errs) != tt.nerrs {
			t.Errorf("checkQuery(%q) = %q, want %d problems", tt.expr, errs, tt.nerrs)
		}
	}
}

// grafanaDashboard is the part of Grafana's dashboard model these tests read.
type grafanaDashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile("grafana/allot.json")
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("grafana/allot.json does not parse: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q uid %q: both are needed", d.Title, d.UID)
	}
	cm := loadCodeMetrics(t)
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Errorf("variable %s: query: %v", v.Name, err)
		}
		for _, e := range cm.checkQuery(q.Query) {
			t.Errorf("variable %s: %s", v.Name, e)
		}
	}
	if !vars["datasource"] {
		t.Error("no datasource variable: the dashboard would be tied to one data source uid")
	}
	ids := map[int]string{}
	queried := map[string]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("panel %q: id %d already used by %q", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Title == "" || p.Description == "" {
				t.Errorf("panel %d: title %q and a description are needed", p.ID, p.Title)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: datasource must be ${datasource}", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no queries", p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("panel %q: target %q: empty expr or missing/duplicate refId", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				for _, e := range cm.checkQuery(tg.Expr) {
					t.Errorf("panel %q: %s", p.Title, e)
				}
				for _, m := range legendLabel.FindAllStringSubmatch(tg.LegendFormat, -1) {
					if !cm.labels[m[1]] {
						t.Errorf("panel %q: legend {{%s}}: no such label", p.Title, m[1])
					}
				}
				for _, name := range metricRef.FindAllString(tg.Expr, -1) {
					queried[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")] = true
				}
			}
			for _, e := range cm.checkProse(p.Description) {
				t.Errorf("panel %q: description: %s", p.Title, e)
			}
		}
	}
	walk(d.Panels)
	// What the operator needs to see is on the dashboard.
	for _, name := range []string{
		"allot_decisions_total", "allot_fallback_decisions_total", "allot_store_duration_seconds",
		"allot_lease_valid", "allot_lease_remaining_seconds", "allot_grant_age_seconds", "allot_live_pods",
		"allot_coordinator_is_leader", "allot_rebalance_duration_seconds", "allot_grant_changes_total",
		"allot_reports_total", "allot_coordinator_reports_total", "allot_lease_units_total",
	} {
		if !queried[name] {
			t.Errorf("the dashboard queries no %s", name)
		}
	}
}

// ruleFile is Prometheus's rule file format.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

var templateLabel = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

func TestAlertRules(t *testing.T) {
	raw, err := os.ReadFile("prometheus/allot-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("prometheus/allot-rules.yaml: %v", err)
	}
	cm := loadCodeMetrics(t)
	alerts := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			if alerts[name] {
				t.Errorf("rule %s defined twice", name)
			}
			alerts[name] = true
			for _, e := range cm.checkQuery(r.Expr) {
				t.Errorf("%s: expr: %s", name, e)
			}
			if r.Alert == "" {
				continue
			}
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("%s: severity %q, want critical, warning or info", name, r.Labels["severity"])
			}
			if r.For == "" {
				t.Errorf("%s: no `for`: one bad scrape would fire it", name)
			}
			for _, k := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("%s: no %s annotation", name, k)
				}
			}
			for k, v := range r.Annotations {
				for _, e := range cm.checkProse(v) {
					t.Errorf("%s: annotation %s: %s", name, k, e)
				}
				for _, m := range templateLabel.FindAllStringSubmatch(v, -1) {
					if !cm.labels[m[1]] {
						t.Errorf("%s: annotation %s: $labels.%s: no such label", name, k, m[1])
					}
				}
			}
		}
	}
	var missing []string
	for _, a := range []string{
		"AllotFallbackDecisions", "AllotLeaseLapsed", "AllotNoCoordinatorLeader", "AllotTwoCoordinatorLeaders",
		"AllotSlowRebalance", "AllotStoreErrors", "AllotGrantsStale", "AllotShadowDenials",
		"AllotLeaseUnitsStranded",
	} {
		if !alerts[a] {
			missing = append(missing, a)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("alerts missing: %v", missing)
	}
}

// The chart ships the rules and the example policy through symlinks into
// deploy/; a copy would drift.
func TestChartFilesAreTheDeployFiles(t *testing.T) {
	for link, target := range map[string]string{
		"helm/allot/files/allot-rules.yaml":    "prometheus/allot-rules.yaml",
		"helm/allot/files/policy.example.yaml": "policy.example.yaml",
	} {
		got, err := filepath.EvalSymlinks(link)
		if err != nil {
			t.Errorf("%s: %v", link, err)
			continue
		}
		want, err := filepath.Abs(target)
		if err != nil {
			t.Fatal(err)
		}
		if gotAbs, _ := filepath.Abs(got); gotAbs != want {
			t.Errorf("%s resolves to %s, want %s", link, gotAbs, want)
		}
	}
}
