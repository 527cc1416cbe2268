package shares_test

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

func TestBudgetID(t *testing.T) {
	for _, c := range []struct{ tenant, name, id string }{
		{"t42", "", "t42"},
		{"t42", "tokens", "t42/tokens"},
		{"a:b@c", "tokens-daily", "a:b@c/tokens-daily"},
	} {
		if got := shares.BudgetID(c.tenant, c.name); got != c.id {
			t.Errorf("BudgetID(%q, %q) = %q, want %q", c.tenant, c.name, got, c.id)
		}
		if tn, n := shares.SplitBudgetID(c.id); tn != c.tenant || n != c.name {
			t.Errorf("SplitBudgetID(%q) = %q, %q", c.id, tn, n)
		}
		for _, shards := range []int{2, 3, 7} {
			if a, b := shares.ShardOf(c.id, shards), shares.ShardOf(c.tenant, shards); a != b {
				t.Errorf("ShardOf(%q, %d) = %d, ShardOf(%q) = %d: a tenant's budgets share its shard", c.id, shards, a, c.tenant, b)
			}
		}
	}
}

// A tenant's named budget is shared on its own: its own demand, grants and
// cold floor, never above its own R, while the tenant's budget stays within
// its R — two pods per region.
func TestNamedBudgetSharedOnItsOwn(t *testing.T) {
	tokens := shares.Budget{Rate: 3000, Burst: 600}
	r := newRig(t, 1, []string{"a", "b"}, map[string]shares.Budget{}, "a/1", "a/2", "b/1", "b/2")
	r.named = map[string]shares.Budget{"tokens": tokens}
	r.l.SetNamedDefault("tokens", &tokens)
	const req, tok = "t1", "t1/tokens"
	demand := map[string]map[string]float64{
		req: {"a": 5, "b": 40},     // requests: b is busier
		tok: {"a": 2800, "b": 100}, // tokens: a is busier
	}
	reportBoth := func() {
		for _, id := range r.ids() {
			p := r.pods[id]
			term, applied := p.State()
			heard, renewed, leased := p.Standing(r.now)
			use := map[string]shares.Usage{}
			for k, d := range demand {
				v := d[r.region[id]] / 2 // two pods per region
				use[k] = shares.Usage{Offered: v, Admitted: v}
			}
			a, err := r.l.Report(r.now, shares.PodReport{Region: r.region[id], Pod: id, Term: term, Applied: applied,
				Interval: time.Second, Usage: use, Held: p.Held(), Heard: heard, RenewedBy: renewed, Leased: leased})
			if err != nil {
				t.Fatal(err)
			}
			p.Answered(r.now, r.now, a, r.own(id))
		}
	}
	// Before any grant: a leased pod enforces each name's cold floor, and
	// nothing for a name without a default.
	for r.l.Learning(r.now) {
		reportBoth()
		r.rebalance()
		r.step(time.Second)
		r.safe(req, rigDefault.Rate, "learning")
		r.safe(tok, tokens.Rate, "learning")
	}
	r.rebalance()
	reportBoth() // (the first answers after learning: leased)
	p := r.pods["a/1"]
	if rate, _, _ := p.Effective(r.now, "t9", shares.Ceiling{Rate: 1e9, Burst: 1 << 40}); rate == 0 {
		t.Fatal("the tenant's budget without a grant: 0/s, want its cold floor")
	}
	wantCold, _ := shares.Floor(tokens, r.regions, "a")
	if rate, _, _ := p.Effective(r.now, "t9/tokens", shares.Ceiling{Rate: 1e9, Burst: 1 << 40}); rate != wantCold {
		t.Errorf("a named budget without a grant: %.1f/s, want its cold floor %.1f/s", rate, wantCold)
	}
	if rate, _, _ := p.Effective(r.now, "t9/images", shares.Ceiling{Rate: 1e9, Burst: 1 << 40}); rate != 0 {
		t.Errorf("a name without a default: %.1f/s, want 0", rate)
	}
	if b, ok := r.l.Budget("t9/tokens"); !ok || b.Rate != tokens.Rate {
		t.Errorf("Budget(t9/tokens) = %+v, %v: want the named default", b, ok)
	}
	if _, ok := r.l.Budget("t9/images"); ok {
		t.Error("Budget(t9/images): a name without a default has a budget")
	}
	for range 15 {
		reportBoth()
		r.rebalance()
		reportBoth()
		r.safe(req, rigDefault.Rate, "converging")
		r.safe(tok, tokens.Rate, "converging")
		r.step(time.Second)
	}
	grant := func(id, region string) float64 {
		g, _ := r.pods[region+"/1"].Grant(id)
		return g.Rate
	}
	if a, b := grant(tok, "a"), grant(tok, "b"); a < 2*b || a+b > tokens.Rate*(1+1e-9) {
		t.Errorf("tokens grants a %.0f, b %.0f: want a's demand to win, Σ ≤ %.0f", a, b, tokens.Rate)
	}
	if a, b := grant(req, "a"), grant(req, "b"); b < 2*a || a+b > rigDefault.Rate*(1+1e-9) {
		t.Errorf("requests grants a %.1f, b %.1f: want b's demand to win, Σ ≤ %.0f", a, b, rigDefault.Rate)
	}
}

// A pod that reports more often than the leader's interval merges each
// report with part of its previous rates: a tenant it stopped seeing must
// still go idle, and be forgotten, after IdleTimeout.
func TestIdleWithFastReports(t *testing.T) {
	r := newRig(t, 1, []string{"a", "b"}, map[string]shares.Budget{}, "a/1", "b/1")
	r.cfg.IdleTimeout = 3 * time.Second
	r.newLeader(1)
	r.learn("t0", nil)
	send := func(id string, use map[string]shares.Usage) {
		p := r.pods[id]
		term, applied := p.State()
		heard, renewed, leased := p.Standing(r.now)
		a, err := r.l.Report(r.now, shares.PodReport{Region: r.region[id], Pod: id, Term: term, Applied: applied,
			Interval: 100 * time.Millisecond, Usage: use, Held: p.Held(), Heard: heard, RenewedBy: renewed, Leased: leased})
		if err != nil {
			t.Fatal(err)
		}
		p.Answered(r.now, r.now, a, r.own(id))
	}
	busy := map[string]shares.Usage{"t7": {Offered: 5, Admitted: 5}}
	for i := range 30 { // 3 s of reports every 100 ms, rebalances every second
		send("a/1", busy)
		send("b/1", nil)
		r.step(100 * time.Millisecond)
		if i%10 == 9 {
			r.rebalance()
		}
	}
	if _, ok := r.l.Allocator().Grants("t7")["a"]; !ok {
		t.Fatal("t7 was never granted: the test needs it tracked")
	}
	for range 150 { // 15 s without t7's traffic
		send("a/1", nil)
		send("b/1", nil)
		r.step(100 * time.Millisecond)
		r.rebalance()
	}
	if n := r.l.Tenants(); n != 0 {
		t.Errorf("the leader still tracks %d tenants 15 s after the last traffic (IdleTimeout 3 s): t7 grants %v, t0 grants %v", n, r.l.Allocator().Grants("t7"), r.l.Allocator().Grants("t0"))
	}
}
