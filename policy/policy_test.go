package policy

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/allot-dev/allot/gcra"
)

const good = `version: 1
regions: [us-east, eu-west, ap-south]
default_tier: free
limits:
  - name: tenant
    descriptors: [tenant]
    rate: budget
  - name: user
    descriptors: [tenant, user]
    rate: 50/s
    burst: 20
tiers:
  free:
    budget: {rate: 100/s, burst: 20}
  pro:
    budget: {rate: 1000/s, burst: 200}
    limits:
      user: {rate: 100/s}
tenants:
  t42:
    tier: pro
    budget: {rate: 2000/s, burst: 400}
    limits:
      user: {burst: 40, shadow: true}
`

func TestParseExample(t *testing.T) {
	data, err := os.ReadFile("../deploy/policy.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(data); err != nil {
		t.Fatalf("deploy/policy.example.yaml: %v", err)
	}
}

func TestParseJSON(t *testing.T) {
	js := "{\n\t\"version\": 1,\n\t\"regions\": [\"a\"],\n\t\"default_tier\": \"free\",\n" +
		"\t\"limits\": [{\"name\": \"tenant\", \"descriptors\": [\"tenant\"], \"rate\": \"budget\"}],\n" +
		"\t\"tiers\": {\"free\": {\"budget\": {\"rate\": \"5/s\", \"burst\": 3}}}\n}\n"
	d, err := Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Resolve("x").Budget.Rate; got != gcra.PerSecond(5) {
		t.Errorf("Resolve(x).Budget.Rate = %v, want 5/s", got)
	}
	_, err = Parse([]byte(strings.Replace(js, `"burst": 3`, `"burst": 3, "brust": 1`, 1)))
	var es Errors
	if !errors.As(err, &es) || es[0].Line != 6 || !strings.Contains(es[0].Error(), "brust") {
		t.Errorf("unknown JSON field: error = %v, want line 6 naming brust", err)
	}
}

func TestResolve(t *testing.T) {
	d, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		tenant     string
		tier       string
		known      bool
		budget     gcra.Rate
		burst      int64
		userRate   gcra.Rate
		userBurst  int64
		userShadow bool
	}{
		{"t42", "pro", true, gcra.PerSecond(2000), 400, gcra.PerSecond(100), 40, true},
		{"unknown", "free", false, gcra.PerSecond(100), 20, gcra.PerSecond(50), 20, false},
	}
	for _, c := range cases {
		r := d.Resolve(c.tenant)
		if r.Tier != c.tier || r.Known != c.known || r.Budget.Rate != c.budget || r.Budget.Burst != c.burst {
			t.Errorf("Resolve(%q) = tier %q known %v budget %v/%d, want %q %v %v/%d",
				c.tenant, r.Tier, r.Known, r.Budget.Rate, r.Budget.Burst, c.tier, c.known, c.budget, c.burst)
		}
		tl, ul := r.Limits[0], r.Limits[1]
		if !tl.FromBudget || !tl.Global || tl.Rate != c.budget || tl.Burst != c.burst {
			t.Errorf("Resolve(%q) tenant limit = %+v, want the budget", c.tenant, tl)
		}
		if ul.Rate != c.userRate || ul.Burst != c.userBurst || ul.Shadow != c.userShadow || ul.Global {
			t.Errorf("Resolve(%q) user limit = %v/%d shadow %v global %v, want %v/%d shadow %v regional",
				c.tenant, ul.Rate, ul.Burst, ul.Shadow, ul.Global, c.userRate, c.userBurst, c.userShadow)
		}
		if r.Budget.FloorFraction != DefaultFloorFraction {
			t.Errorf("Resolve(%q) floor = %v, want %v", c.tenant, r.Budget.FloorFraction, DefaultFloorFraction)
		}
	}
	if !d.Resolve("t42").Limits[1].Matches(map[string]string{"tenant": "t42", "user": "7"}) {
		t.Error("user limit does not match {tenant, user}")
	}
	if d.Resolve("t42").Limits[1].Matches(map[string]string{"tenant": "t42"}) {
		t.Error("user limit matches a request without a user")
	}
}

// edit replaces old (which must occur) by new in the good document.
func edit(t *testing.T, old, new string) string {
	t.Helper()
	if !strings.Contains(good, old) {
		t.Fatalf("fixture does not contain %q", old)
	}
	return strings.Replace(good, old, new, 1)
}

func TestParseBad(t *testing.T) {
	cases := []struct {
		name     string
		old, new string // edit of the good document
		line     int
		field    string // path the error must name
		msg      string // a fragment of the message
	}{
		{"version missing", "version: 1\n", "", 0, "version", "missing"},
		{"version unsupported", "version: 1", "version: 2", 1, "version", "not supported"},
		{"unknown top-level field", "default_tier: free", "default_tier: free\ndefault_teir: pro", 4, "default_teir", "not found"},
		{"regions empty", "regions: [us-east, eu-west, ap-south]", "regions: []", 2, "regions", "missing"},
		{"region bad name", "regions: [us-east,", "regions: [US East,", 2, "regions[0]", "region name"},
		{"region twice", "eu-west, ap-south]", "eu-west, eu-west]", 2, "regions[2]", "twice"},
		{"floor out of range", "default_tier: free", "default_tier: free\nfloor_fraction: 1.5", 4, "floor_fraction", "outside"},
		{"default tier unknown", "default_tier: free", "default_tier: gold", 3, "default_tier", "not a tier"},
		{"limit name missing", "  - name: user\n    descriptors: [tenant, user]\n", "  - descriptors: [tenant, user]\n", 8, "limits[1].name", "missing"},
		{"limit twice", "  - name: user", "  - name: tenant", 8, "limits[1].name", "twice"},
		{"descriptors without tenant", "descriptors: [tenant, user]", "descriptors: [user]", 9, "limits[1].descriptors", "tenant"},
		{"descriptor bad", "descriptors: [tenant, user]", "descriptors: [tenant, User!]", 9, "limits[1].descriptors[1]", "lowercase"},
		{"rate bad unit", "rate: 50/s", "rate: 10/x", 10, "limits[1].rate", "unit"},
		{"rate zero", "rate: 50/s", "rate: 0/s", 10, "limits[1].rate", "positive"},
		{"rate missing", "    rate: 50/s\n", "", 8, "limits[1].rate", "missing"},
		{"burst zero", "burst: 20\n", "burst: 0\n", 11, "limits[1].burst", "at least 1"},
		{"burst not a number", "burst: 20\n", "burst: many\n", 11, "limits[1].burst", "cannot unmarshal"},
		{"burst with budget", "    rate: budget\n", "    rate: budget\n    burst: 5\n", 8, "limits[0].burst", "must not be set"},
		{"scope unknown", "    burst: 20\n", "    burst: 20\n    scope: planet\n", 12, "limits[1].scope", "want global or regional"},
		{"global with own rate, overridden", "    burst: 20\n", "    burst: 20\n    scope: global\n", 19, "tiers.pro.limits.user", "overrides of its rate and burst are not supported"},
		{"global with own rate and a lease", "    burst: 20\n", "    burst: 20\n    scope: global\n    lease: 5\n", 13, "limits[1].lease", "not with scope: global"},
		{"on_failure unknown", "    burst: 20\n", "    burst: 20\n    on_failure: maybe\n", 12, "limits[1].on_failure", "want open or closed"},
		{"fallback with closed", "    burst: 20\n", "    burst: 20\n    on_failure: closed\n    fallback_rate: 5/s\n", 13, "limits[1].fallback_rate", "only for on_failure: open"},
		{"fallback bad", "    burst: 20\n", "    burst: 20\n    fallback_rate: fast\n", 12, "limits[1].fallback_rate", "want N/s"},
		{"lease negative", "    burst: 20\n", "    burst: 20\n    lease: -1\n", 12, "limits[1].lease", "positive"},
		{"lease above burst", "    burst: 20\n", "    burst: 20\n    lease: 21\n", 12, "limits[1].lease", "exceeds the burst"},
		{"match not a descriptor", "    burst: 20\n", "    burst: 20\n    match: {route: /login}\n", 12, "limits[1].match.route", "not one of"},
		{"tier budget rate missing", "budget: {rate: 100/s, burst: 20}", "budget: {burst: 20}", 14, "tiers.free.budget.rate", "missing"},
		{"tier budget burst missing", "budget: {rate: 100/s, burst: 20}", "budget: {rate: 100/s}", 14, "tiers.free.budget.burst", "missing"},
		{"mode unknown", "budget: {rate: 100/s, burst: 20}", "budget: {rate: 100/s, burst: 20, mode: fair}", 14, "tiers.free.budget.mode", "want rebalanced"},
		{"pinned without home", "budget: {rate: 2000/s, burst: 400}", "budget: {rate: 2000/s, burst: 400, mode: pinned}", 22, "tenants.t42.budget.home", "missing"},
		{"home unknown", "budget: {rate: 2000/s, burst: 400}", "budget: {mode: pinned, home: mars}", 22, "tenants.t42.budget.home", "not a region"},
		{"weights unknown region", "budget: {rate: 2000/s, burst: 400}", "budget: {mode: static, weights: {mars: 1}}", 22, "tenants.t42.budget.weights.mars", "not a region"},
		{"weights negative", "budget: {rate: 2000/s, burst: 400}", "budget: {mode: static, weights: {us-east: -1, eu-west: 2}}", 22, "tenants.t42.budget.weights.us-east", "≥ 0"},
		{"weights without static", "budget: {rate: 2000/s, burst: 400}", "budget: {weights: {us-east: 1}}", 22, "tenants.t42.budget.weights", "only for mode: static"},
		{"tenant tier unknown", "    tier: pro\n", "    tier: gold\n", 21, "tenants.t42.tier", "not a tier"},
		{"override unknown limit", "      user: {burst: 40, shadow: true}", "      usr: {burst: 40}", 24, "tenants.t42.limits.usr", "not a limit"},
		{"override of budget limit", "      user: {burst: 40, shadow: true}", "      tenant: {rate: 5/s}", 24, "tenants.t42.limits.tenant", "budget.rate"},
		{"override rate bad", "      user: {rate: 100/s}", "      user: {rate: 100/fortnight}", 18, "tiers.pro.limits.user.rate", "unit"},
		{"duplicate key", "    tier: pro\n", "    tier: pro\n    tier: free\n", 22, "", "already defined"},
		{"syntax error", "regions: [us-east, eu-west, ap-south]", "regions: [us-east, eu-west", 0, "", "syntax"},
		{"budget burst beyond the window", "budget: {rate: 100/s, burst: 20}", "budget: {rate: 100/s, burst: 9223372036854775807}", 14, "tiers.free.budget.burst", "exceeds the longest window allot can keep (about 71 years); lower the burst to at most 225179981368"},
		{"tenant rate beyond the window", "budget: {rate: 2000/s, burst: 400}", "budget: {rate: 1/100000h}", 22, "tenants.t42.budget.rate", "with burst 200, rate × burst exceeds the longest window"},
		{"tenant burst beyond the window", "budget: {rate: 2000/s, burst: 400}", "budget: {burst: 9223372036854775807}", 22, "tenants.t42.budget.burst", "rate 1000/s × burst exceeds"},
		{"limit burst beyond the window", "    burst: 20\n", "    burst: 9223372036854775807\n", 11, "limits[1].burst", "rate 50/s × burst exceeds"},
		{"limit rate below one unit per window", "rate: 50/s", "rate: 1/1000000h", 10, "limits[1].rate", "below one unit per the maximum window"},
		{"tier override beyond the window", "      user: {rate: 100/s}", "      user: {rate: 1/100000h}", 18, "tiers.pro.limits.user.rate", "with burst 20"},
		{"tenant override beyond the window", "      user: {burst: 40, shadow: true}", "      user: {burst: 9000000000000000}", 24, "tenants.t42.limits.user.burst", "rate 100/s × burst exceeds"},
		{"budget burst below the regions", "budget: {rate: 100/s, burst: 20}", "budget: {rate: 100/s, burst: 2}", 14, "tiers.free.budget.burst", "below 3, the number of regions"},
		{"tenant budget burst below the regions", "budget: {rate: 2000/s, burst: 400}", "budget: {burst: 1}", 22, "tenants.t42.budget.burst", "below 3"},
		{"lease above the maximum", "rate: 50/s\n    burst: 20\n", "rate: 1000000/s\n    burst: 2000000000000\n    lease: 2000000000000\n", 12, "limits[1].lease", "at most 1099511627775"},
		{"unknown_tenants unknown", "default_tier: free", "default_tier: free\nunknown_tenants: maybe", 4, "unknown_tenants", `"maybe": want allow`},
		{"limit name reserved", "  - name: user", "  - name: unknown_tenant", 8, "limits[1].name", "reserved"},
		{"tenant name with a slash", "  t42:\n", "  a/b:\n", 20, "tenants.a/b", "path separators"},
		{"tenant name with a brace", "  t42:\n", "  \"{t42}\":\n", 20, "tenants.{t42}", "hash tag"},
		{"tiers missing", "tiers:\n  free:\n    budget: {rate: 100/s, burst: 20}\n  pro:\n    budget: {rate: 1000/s, burst: 200}\n    limits:\n      user: {rate: 100/s}\n", "", 0, "tiers", "missing"},
	}
	if len(cases) < 20 {
		t.Fatalf("only %d bad fixtures", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc, err := Parse([]byte(edit(t, c.old, c.new)))
			if err == nil {
				t.Fatalf("Parse = %+v, nil; want an error naming %q", doc, c.field)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error %T is not Errors", err)
			}
			for _, e := range es {
				if (c.field == "" || e.Path == c.field) && strings.Contains(e.Msg, c.msg) {
					if c.line != 0 && e.Line != c.line {
						t.Errorf("error %q is on line %d, want %d", e, e.Line, c.line)
					}
					if c.field != "" && !strings.Contains(e.Error(), c.field) {
						t.Errorf("error %q does not name %q", e, c.field)
					}
					return
				}
			}
			t.Errorf("Parse error = %v; want one naming %q with %q", err, c.field, c.msg)
		})
	}
}

// A budget set through the admin API replaces the tenant's budget whole:
// without a mode it is rebalanced, even when its tier pins tenants.
func TestTenantBudgetOverride(t *testing.T) {
	d, err := Parse([]byte(strings.Replace(good, "budget: {rate: 100/s, burst: 20}", "budget: {rate: 100/s, burst: 20, mode: pinned, home: us-east}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if b := d.TenantBudget("x", nil); b.Mode != ModePinned || b.Home != "us-east" || b.FloorFraction != 0 {
		t.Errorf("tier budget = %+v, want pinned to us-east with no floors", b)
	}
	b := d.TenantBudget("x", &Budget{Rate: "7/s", Burst: 4})
	if b.Mode != ModeRebalanced || b.Home != "" || b.Rate != gcra.PerSecond(7) || b.Burst != 4 || b.FloorFraction != DefaultFloorFraction {
		t.Errorf("override budget = %+v, want 7/s burst 4 rebalanced with the default floor", b)
	}
}

// Daily and weekly rates: in limits and budgets, resolved to 24 and 168 h.
func TestDailyWeeklyRates(t *testing.T) {
	doc, err := Parse([]byte(`version: 1
regions: [us-east, eu-west]
default_tier: llm
limits:
  - name: tokens-daily
    descriptors: [tenant]
    rate: budget
  - name: user-weekly
    descriptors: [tenant, user]
    rate: 700/w
    burst: 100
tiers:
  llm:
    budget: {rate: 5000000/d, burst: 5000000}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := doc.Resolve("t1")
	if got := r.Budget.Rate; got != gcra.PerDay(5_000_000) {
		t.Errorf("budget rate %v, want 5000000/d", got)
	}
	if sb := r.Budget.Shares(); sb.Rate < 57.87 || sb.Rate > 57.88 {
		t.Errorf("budget shares rate %v/s, want 5,000,000 / 86,400 = 57.87/s", sb.Rate)
	}
	var weekly *ResolvedLimit
	for i := range r.Limits {
		if r.Limits[i].Name == "user-weekly" {
			weekly = &r.Limits[i]
		}
	}
	if weekly == nil || weekly.Rate != gcra.PerWeek(700) || weekly.Burst != 100 {
		t.Fatalf("user-weekly resolved as %+v, want 700/w burst 100", weekly)
	}
	if _, err := Parse([]byte(strings.Replace(string(mustRead(t, "../deploy/policy.example.yaml")), "1000/s", "1000/fortnight", 1))); err == nil || !strings.Contains(err.Error(), "d, w") {
		t.Errorf("a rate per fortnight: %v, want an error listing d and w", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A charges entry names a key no limit keys on, and not the tenant.
func TestChargesEntry(t *testing.T) {
	base := `version: 1
regions: [us-east]
default_tier: free
%s
limits:
  - name: tokens
    descriptors: [tenant, model]
    rate: 100/h
    burst: 100
tiers:
  free:
    budget: {rate: 5/s, burst: 3}
`
	for _, c := range []struct{ charges, err string }{
		{"charges: {key: allot_charge, value: done}", ""},
		{"charges: {key: allot_charge}", "charges: want both key and value"},
		{"charges: {key: tenant, value: x}", "charges.key: tenant names the tenant"},
		{"charges: {key: model, value: x}", `charges.key: "model" is a descriptor of limits[0]`},
		{"charges: {key: Bad!, value: x}", "charges.key"},
	} {
		_, err := Parse([]byte(strings.Replace(base, "%s", c.charges, 1)))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.charges, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, want an error with %q", c.charges, err, c.err)
		}
	}
}

// Named budgets: each limit takes its own, tiers define every one that a
// limit takes, tenants override them field by field.
func TestNamedBudgets(t *testing.T) {
	const base = `version: 1
regions: [us-east, eu-west]
default_tier: llm
limits:
  - name: requests
    descriptors: [tenant]
    rate: budget
  - name: tokens
    descriptors: [tenant]
    rate: budget.tokens
  - name: tokens-daily
    descriptors: [tenant]
    rate: budget.tokens-daily
tiers:
  llm:
    budget: {rate: 100/s, burst: 20}
    budgets:
      tokens: {rate: 200000/m, burst: 50000}
      tokens-daily: {rate: 5000000/d, burst: 5000000, mode: pinned, home: us-east}
tenants:
  t42:
    budgets:
      tokens: {rate: 600000/m}
`
	doc, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if got := doc.BudgetNames(); !slices.Equal(got, []string{"tokens", "tokens-daily"}) {
		t.Errorf("BudgetNames = %v", got)
	}
	r := doc.Resolve("t42")
	want := map[string]struct {
		budget string
		rate   gcra.Rate
		burst  int64
	}{
		"requests":     {"", gcra.PerSecond(100), 20},
		"tokens":       {"tokens", gcra.PerMinute(600000), 50000},
		"tokens-daily": {"tokens-daily", gcra.PerDay(5000000), 5000000},
	}
	for _, l := range r.Limits {
		w := want[l.Name]
		if !l.FromBudget || !l.Global || l.Budget != w.budget || l.Rate != w.rate || l.Burst != w.burst {
			t.Errorf("%s resolved as %+v, want budget %q %v burst %d", l.Name, l, w.budget, w.rate, w.burst)
		}
	}
	if b, ok := doc.NamedBudget("t42", "tokens-daily", nil); !ok || b.Mode != ModePinned || b.Home != "us-east" || b.FloorFraction != 0 {
		t.Errorf("NamedBudget(t42, tokens-daily) = %+v, %v", b, ok)
	}
	if b, ok := doc.NamedBudget("other", "tokens", nil); !ok || b.Rate != gcra.PerMinute(200000) || b.Mode != ModeRebalanced {
		t.Errorf("NamedBudget(other, tokens) = %+v, %v: want the tier's", b, ok)
	}
	if b, ok := doc.NamedBudget("t42", "tokens", &Budget{Rate: "10/s", Burst: 5}); !ok || b.Rate != gcra.PerSecond(10) || b.Burst != 5 {
		t.Errorf("NamedBudget with an override = %+v, %v", b, ok)
	}
	if _, ok := doc.NamedBudget("t42", "nope", nil); ok {
		t.Error("NamedBudget of a name no limit takes: ok")
	}
	if b, ok := doc.NamedBudget("t42", "", nil); !ok || b.Rate != gcra.PerSecond(100) {
		t.Errorf(`NamedBudget(t42, "") = %+v, %v: want the tenant's budget`, b, ok)
	}

	for _, c := range []struct{ name, from, to, err string }{
		{"a tier without a budget a limit takes", "      tokens: {rate: 200000/m, burst: 50000}\n", "",
			"tiers.llm.budgets.tokens: missing: limits[1] (tokens) takes budget.tokens"},
		{"a budget no limit takes", "    budgets:\n", "    budgets:\n      images: {rate: 5/s, burst: 5}\n",
			"tiers.llm.budgets.images: no limit takes budget.images"},
		{"a tenant's budget no limit takes", "      tokens: {rate: 600000/m}\n", "      tokens: {rate: 600000/m}\n      imgs: {rate: 1/s}\n",
			"tenants.t42.budgets.imgs: no limit takes budget.imgs"},
		{"a name with a dot", "rate: budget.tokens-daily", "rate: budget.tokens.daily", `limits[2].rate: "budget.tokens.daily"`},
		{"budget without a name", "rate: budget.tokens-daily", "rate: budget.", `limits[2].rate: "budget."`},
		{"burst with a named budget", "    rate: budget.tokens\n", "    rate: budget.tokens\n    burst: 5\n", "limits[1].burst: must not be set"},
		{"override of a named budget limit", "tenants:\n  t42:\n", "tenants:\n  t42:\n    limits:\n      tokens: {rate: 5/s}\n",
			"set budgets.tokens.rate and budgets.tokens.burst instead"},
		{"a tier's named budget without a burst", "tokens: {rate: 200000/m, burst: 50000}", "tokens: {rate: 200000/m}", "tiers.llm.budgets.tokens.burst: missing"},
		{"a bad mode", "mode: pinned, home: us-east", "mode: pinned", "tiers.llm.budgets.tokens-daily.home: missing"},
		{"a bad tenant rate", "tokens: {rate: 600000/m}", "tokens: {rate: lots}", "tenants.t42.budgets.tokens.rate"},
	} {
		if !strings.Contains(base, c.from) {
			t.Fatalf("%s: %q not in the base policy", c.name, c.from)
		}
		_, err := Parse([]byte(strings.Replace(base, c.from, c.to, 1)))
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.err)
		}
	}
	// A budget limit may carry other descriptors with fixed values (the
	// key is still the tenant's): requests and tokens told apart by kind.
	kinds := strings.Replace(base, "  - name: tokens\n    descriptors: [tenant]\n", "  - name: tokens\n    descriptors: [tenant, kind]\n    match: {kind: tokens}\n", 1)
	if kinds == base {
		t.Fatal("the tokens limit is not in the base policy")
	}
	if _, err := Parse([]byte(kinds)); err != nil {
		t.Errorf("a budget limit with a fixed kind: %v", err)
	}
	free := strings.Replace(kinds, "    match: {kind: tokens}\n", "", 1)
	if _, err := Parse([]byte(free)); err == nil || !strings.Contains(err.Error(), "limits[1].descriptors: a limit with rate: budget is per tenant") {
		t.Errorf("a budget limit keyed by a free descriptor: %v, want an error naming limits[1].descriptors", err)
	}
}

// KeyLimit finds the global limit with a rate of its own keyed on exactly
// tenant and the keys asked for, and no other.
func TestKeyLimit(t *testing.T) {
	d, err := Parse([]byte(`version: 1
regions: [us-east]
default_tier: free
limits:
  - {name: tenant, descriptors: [tenant], rate: budget}
  - {name: local-ip, descriptors: [tenant, ip], rate: 5/s, burst: 5}
  - {name: kinded, descriptors: [tenant, ip, kind], match: {kind: a}, rate: 5/s, burst: 5, scope: global}
  - {name: per-ip, descriptors: [ip, tenant], rate: 40/s, burst: 40, scope: global}
  - {name: per-ip-user, descriptors: [tenant, ip, user], rate: 10/s, burst: 10, scope: global}
tiers:
  free: {budget: {rate: 100/s, burst: 20}}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := d.Resolve("t1")
	for _, c := range []struct {
		keys []string
		want string // "" for none
	}{
		{[]string{"ip"}, "per-ip"},
		{[]string{"user", "ip"}, "per-ip-user"},
		{[]string{"ip", "kind"}, ""}, // match values: not every value
		{[]string{"user"}, ""},
		{nil, ""}, // the tenant's budget is not a key limit
		{[]string{"tenant"}, ""},
	} {
		got := "" // none
		if l, ok := r.KeyLimit(c.keys); ok {
			got = l.Name
		}
		if got != c.want {
			t.Errorf("KeyLimit(%v) = %q, want %q", c.keys, got, c.want)
		}
	}
	for name, ok := range map[string]bool{"remote_address": true, "x-y_1": true, "X-Client": false, "1ip": false, "": false, strings.Repeat("a", 64): false} {
		if err := ValidateDescriptor(name); (err == nil) != ok {
			t.Errorf("ValidateDescriptor(%q) = %v, want ok %v", name, err, ok)
		}
	}
}
