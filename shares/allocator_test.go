package shares_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

var (
	t0      = time.Unix(1_700_000_000, 0)
	regions = []string{"us-east", "eu-west", "ap-south"}
)

// leader drives one Allocator for tenant "t" at fixed instants.
type leader struct {
	t       *testing.T
	a       *shares.Allocator
	cfg     shares.Config
	budgets map[string]shares.Budget
	now     time.Time
	issued  map[string]uint64 // highest epoch written per region
	latest  map[string]shares.Change
}

func newLeader(t *testing.T, cfg shares.Config, b shares.Budget) *leader {
	t.Helper()
	a, err := shares.NewAllocator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &leader{
		t: t, a: a, cfg: cfg,
		budgets: map[string]shares.Budget{"t": b},
		now:     t0,
		issued:  map[string]uint64{},
		latest:  map[string]shares.Change{},
	}
}

// report sends region's report of tenant t offering perSec units per
// second over one Interval, acknowledging applied.
func (l *leader) report(region string, perSec float64, applied uint64) shares.Renewal {
	l.t.Helper()
	u := perSec * l.cfg.Interval.Seconds()
	rn, err := l.a.Report(l.now, shares.Report{
		Region: region, Interval: l.cfg.Interval, Applied: applied,
		Usage: map[string]shares.Usage{"t": {Offered: u, Admitted: u}},
	})
	if err != nil {
		l.t.Fatalf("Report(%s) = %v", region, err)
	}
	return rn
}

// round advances one Interval, has every region in demand report
// (acknowledging everything written when ack is true) and rebalances.
func (l *leader) round(demand map[string]float64, ack bool) []shares.Change {
	l.t.Helper()
	l.now = l.now.Add(l.cfg.Interval)
	for _, r := range l.cfg.Regions {
		d, ok := demand[r]
		if !ok {
			continue
		}
		var applied uint64
		if ack {
			applied = l.issued[r]
		}
		l.report(r, d, applied)
	}
	return l.rebalance()
}

func (l *leader) rebalance() []shares.Change {
	cs := l.a.Rebalance(l.now, l.budgets)
	for _, c := range cs {
		if c.Grant.Epoch <= l.issued[c.Region] {
			l.t.Fatalf("change %+v: epoch not above %d already written to %s", c, l.issued[c.Region], c.Region)
		}
		l.issued[c.Region] = c.Grant.Epoch
		l.latest[c.Region] = c
	}
	return cs
}

// rate returns region's current grant rate, or its floor.
func (l *leader) rate(region string) float64 {
	if g, ok := l.a.Grants("t")[region]; ok {
		return g.Rate
	}
	r, _ := shares.Floor(l.budgets["t"], l.cfg.Regions, region)
	return r
}

func (l *leader) converge(demand map[string]float64) {
	for range 12 {
		l.round(demand, true)
	}
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func fixedConfig() shares.Config {
	cfg := shares.DefaultConfig(regions...)
	cfg.Deadband = 0.001 // converge to the formula, not to within 2%
	return cfg
}

// Above R the split is what one central limiter would admit, floors kept:
// r_i = f_i + (R − Σf)·(d_i − f_i)⁺/Σ(d_j − f_j)⁺.
func TestProportionalAboveR(t *testing.T) {
	cases := []struct {
		name   string
		demand map[string]float64
		want   map[string]float64
	}{
		// f = 33.3 each; d − f = 1016.7, 266.7, 116.7 (Σ 1400); 900 to split.
		{"skewed 70/20/10 of 1.5R", map[string]float64{"us-east": 1050, "eu-west": 300, "ap-south": 150},
			map[string]float64{"us-east": 33.33 + 900*1016.67/1400, "eu-west": 33.33 + 900*266.67/1400, "ap-south": 33.33 + 900*116.67/1400}},
		// A region below its floor keeps its floor; the rest is split.
		{"one region idle", map[string]float64{"us-east": 2000, "eu-west": 1000, "ap-south": 0},
			map[string]float64{"us-east": 33.33 + 900*1966.67/2933.33, "eu-west": 33.33 + 900*966.67/2933.33, "ap-south": 33.33}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLeader(t, fixedConfig(), shares.Budget{Rate: 1000, Burst: 200})
			l.converge(c.demand)
			var sum float64
			for _, r := range regions {
				got := l.rate(r)
				sum += got
				if !near(got, c.want[r], 0.005*1000) {
					t.Errorf("%s: rate %.1f, want %.1f", r, got, c.want[r])
				}
			}
			if sum > 1000 || sum < 995 {
				t.Errorf("Σ rates = %.2f, want ≤ 1000 and ≥ 995", sum)
			}
		})
	}
}

// Below R each live region gets min(avail, (1+h)·d_i) (at least its floor),
// then the spare spread half equally and half in proportion to demand;
// once every region's grant covers its demand with headroom the leader
// stops moving the spare ("under": each region gets at least its
// headroom, not exactly its target).
func TestHeadroomBelowR(t *testing.T) {
	const h, f = 0.15, 1000 * 0.1 / 3
	cases := []struct {
		name   string
		demand map[string]float64
		want   map[string]float64
	}{
		{"under", map[string]float64{"us-east": 300, "eu-west": 100, "ap-south": 0}, func() map[string]float64 {
			w := map[string]float64{"us-east": (1 + h) * 300, "eu-west": (1 + h) * 100, "ap-south": f}
			spare := 1000 - w["us-east"] - w["eu-west"] - w["ap-south"]
			w["us-east"] += spare/6 + spare/2*300/400
			w["eu-west"] += spare/6 + spare/2*100/400
			w["ap-south"] += spare / 6
			return w
		}()},
		// Σ(1+h)d > R > Σd: shared in proportion to (1+h)·d − f.
		{"headroom does not fit", map[string]float64{"us-east": 500, "eu-west": 300, "ap-south": 100}, func() map[string]float64 {
			x := map[string]float64{"us-east": (1+h)*500 - f, "eu-west": (1+h)*300 - f, "ap-south": (1+h)*100 - f}
			s := x["us-east"] + x["eu-west"] + x["ap-south"]
			w := map[string]float64{}
			for r, v := range x {
				w[r] = f + 900*v/s
			}
			return w
		}()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLeader(t, fixedConfig(), shares.Budget{Rate: 1000, Burst: 200})
			l.converge(c.demand)
			for _, r := range regions {
				if got := l.rate(r); c.name != "under" && !near(got, c.want[r], 5) {
					t.Errorf("%s: rate %.1f, want %.1f", r, got, c.want[r])
				}
				if got := l.rate(r); c.name == "under" && got < (1+h)*c.demand[r] {
					t.Errorf("%s: rate %.1f leaves less than %v headroom over demand %v", r, got, h, c.demand[r])
				}
			}
		})
	}
}

// Changes within the deadband write nothing; beyond it they are written.
func TestDeadband(t *testing.T) {
	l := newLeader(t, shares.DefaultConfig(regions...), shares.Budget{Rate: 1000, Burst: 200})
	base := map[string]float64{"us-east": 1050, "eu-west": 300, "ap-south": 150}
	l.converge(base)
	steps := []struct {
		name   string
		demand map[string]float64
		writes bool
	}{
		{"same", base, false},
		{"1% noise", map[string]float64{"us-east": 1060, "eu-west": 297, "ap-south": 151}, false},
		{"1% noise the other way", map[string]float64{"us-east": 1040, "eu-west": 303, "ap-south": 149}, false},
		{"a 30% shift", map[string]float64{"us-east": 700, "eu-west": 300, "ap-south": 500}, true},
	}
	for _, s := range steps {
		var cs []shares.Change
		for range 3 {
			cs = append(cs, l.round(s.demand, true)...)
		}
		if got := len(cs) > 0; got != s.writes {
			t.Errorf("%s: Rebalance wrote %d changes %+v, want writes %v", s.name, len(cs), cs, s.writes)
		}
	}
}

// A shrink is written first; the matching grow only once the shrunk region
// acknowledges it.
func TestShrinkBeforeGrow(t *testing.T) {
	l := newLeader(t, shares.DefaultConfig(regions...), shares.Budget{Rate: 1000, Burst: 200})
	l.converge(map[string]float64{"us-east": 1050, "eu-west": 300, "ap-south": 150})
	before := map[string]float64{}
	for _, r := range regions {
		before[r] = l.rate(r)
	}
	shifted := map[string]float64{"us-east": 150, "eu-west": 300, "ap-south": 1050}

	// Reports carry the shift but acknowledge nothing new.
	acked := map[string]uint64{}
	for _, r := range regions {
		acked[r] = l.issued[r]
	}
	var shrink shares.Change
	for step := range 4 {
		l.now = l.now.Add(l.cfg.Interval)
		for _, r := range regions {
			l.report(r, shifted[r], acked[r])
		}
		for _, c := range l.rebalance() {
			if c.Region == "us-east" && c.Grant.Rate < before["us-east"] {
				shrink = c
			}
		}
		if got := l.rate("ap-south"); got > before["ap-south"]+1e-6 {
			t.Fatalf("step %d: ap-south grew to %.1f (from %.1f) before us-east acknowledged its shrink", step, got, before["ap-south"])
		}
	}
	if shrink.Grant.Epoch == 0 {
		t.Fatal("no shrink of us-east was written")
	}
	// us-east acknowledges: now ap-south may grow into what it gave up.
	l.now = l.now.Add(l.cfg.Interval)
	for _, r := range regions {
		a := acked[r]
		if r == "us-east" {
			a = l.issued[r]
		}
		l.report(r, shifted[r], a)
	}
	l.rebalance()
	if got := l.rate("ap-south"); got <= before["ap-south"]+20 {
		t.Fatalf("after the acknowledgement ap-south is at %.1f, want a grow above %.1f", got, before["ap-south"])
	}
	var sum float64
	for _, r := range regions {
		sum += l.rate(r)
	}
	if sum > 1000 {
		t.Fatalf("Σ rates = %v > R", sum)
	}
}

// The event-driven half of shrink before grow: the grow a rebalance had to
// defer is written by Grow as soon as an acknowledgement (Ack, or a Report)
// retires the grant in its way, without waiting for the next Rebalance; it
// fits under R − Σ(other ceilings), and Grow writes nothing before that.
func TestGrowOnAck(t *testing.T) {
	for _, via := range []string{"Ack", "Report"} {
		t.Run(via, func(t *testing.T) {
			l := newLeader(t, shares.DefaultConfig(regions...), shares.Budget{Rate: 1000, Burst: 200})
			l.converge(map[string]float64{"us-east": 1050, "eu-west": 300, "ap-south": 150})
			shifted := map[string]float64{"us-east": 150, "eu-west": 300, "ap-south": 1050}
			acked := map[string]uint64{}
			for _, r := range regions {
				acked[r] = l.issued[r]
			}
			before := l.rate("ap-south")
			// The shift is reported; us-east's shrink is written, ap-south's
			// grow deferred.
			l.now = l.now.Add(l.cfg.Interval)
			for _, r := range regions {
				l.report(r, shifted[r], acked[r])
			}
			var shrink shares.Change
			for _, c := range l.rebalance() {
				if c.Region == "us-east" {
					shrink = c
				}
			}
			if shrink.Grant.Epoch == 0 || l.rate("ap-south") > before+1e-6 {
				t.Fatalf("first rebalance: us-east change %+v, ap-south %.1f (was %.1f): want a shrink and no grow yet", shrink, l.rate("ap-south"), before)
			}
			if l.a.Growable() {
				t.Fatal("Growable() = true before any acknowledgement")
			}
			// An acknowledgement of something older changes nothing.
			l.now = l.now.Add(300 * time.Millisecond)
			if ok, err := l.a.Ack("us-east", shrink.Grant.Epoch-1); err != nil || ok {
				t.Fatalf("Ack(us-east, %d) = %v, %v; want false, nil", shrink.Grant.Epoch-1, ok, err)
			}
			if cs := l.a.Grow(l.now); len(cs) != 0 {
				t.Fatalf("Grow before the acknowledgement = %+v, want nothing", cs)
			}
			// us-east acknowledges its shrink, between two rebalances.
			l.now = l.now.Add(300 * time.Millisecond)
			switch via {
			case "Ack":
				ok, err := l.a.Ack("us-east", shrink.Grant.Epoch)
				if err != nil || !ok {
					t.Fatalf("Ack(us-east, %d) = %v, %v; want true, nil", shrink.Grant.Epoch, ok, err)
				}
			default:
				l.report("us-east", shifted["us-east"], shrink.Grant.Epoch)
				if !l.a.Growable() {
					t.Fatal("Growable() = false after the report acknowledging the shrink")
				}
			}
			cs := l.a.Grow(l.now)
			var grow shares.Change
			for _, c := range cs {
				if c.Region == "us-east" {
					t.Errorf("Grow wrote %+v: it must not touch the shrinking region", c)
				}
				if c.Region == "ap-south" {
					grow = c
				}
				if c.Grant.Epoch <= l.issued[c.Region] {
					t.Fatalf("Grow change %+v: epoch not above %d", c, l.issued[c.Region])
				}
				l.issued[c.Region], l.latest[c.Region] = c.Grant.Epoch, c
			}
			if grow.Grant.Rate <= before+100 {
				t.Fatalf("Grow = %+v; want ap-south to grow well above %.1f", cs, before)
			}
			var ceilings float64
			for _, r := range regions {
				c := l.latest[r]
				ceilings += c.Ceiling.Rate
			}
			// us-east's ceiling is its acknowledged shrink now.
			ceilings += shrink.Grant.Rate - l.latest["us-east"].Ceiling.Rate
			if ceilings > 1000*(1+1e-9) {
				t.Fatalf("Σ ceilings after Grow = %.3f > R", ceilings)
			}
			if l.a.Growable() {
				t.Error("Growable() = true right after Grow")
			}
			if cs := l.a.Grow(l.now); len(cs) != 0 {
				t.Errorf("a second Grow = %+v, want nothing", cs)
			}
		})
	}
	a, _ := shares.NewAllocator(shares.DefaultConfig(regions...))
	if _, err := a.Ack("mars", 1); !errors.Is(err, shares.ErrUnknownRegion) {
		t.Errorf("Ack(mars) error = %v, want ErrUnknownRegion", err)
	}
}

// A silent region's capacity is re-granted only after its lease surely
// expired; it is revoked with a floor grant and a raised MinEpoch.
func TestLapsedRegion(t *testing.T) {
	cfg := shares.DefaultConfig(regions...)
	b := shares.Budget{Rate: 1000, Burst: 200}
	l := newLeader(t, cfg, b)
	demand := map[string]float64{"us-east": 600, "eu-west": 600, "ap-south": 600}
	l.converge(demand)
	apRate := l.rate("ap-south")
	apEpoch := l.issued["ap-south"]
	lastAnswer := l.now // ap-south's last report was answered now
	others := map[string]float64{"us-east": 900, "eu-west": 900}

	var revoke shares.Change
	for l.now.Before(lastAnswer.Add(cfg.Lease + 2*cfg.Interval)) {
		cs := l.round(others, true)
		for _, c := range cs {
			if c.Region == "ap-south" && c.MinEpoch > apEpoch {
				revoke = c // a shrink of the live region is not a revocation
			}
		}
		if l.now.Before(lastAnswer.Add(cfg.Lease)) {
			if revoke.Grant.Epoch != 0 {
				t.Fatalf("at %v (lease ends %v): ap-south revoked early: %+v", l.now.Sub(t0), lastAnswer.Add(cfg.Lease).Sub(t0), revoke)
			}
			if sum := l.rate("us-east") + l.rate("eu-west") + apRate; sum > 1000 {
				t.Fatalf("at %v: others grew into ap-south's unexpired grant: Σ = %v", l.now.Sub(t0), sum)
			}
		}
	}
	fr, fb := shares.Floor(b, regions, "ap-south")
	if revoke.Grant.Epoch == 0 || revoke.Grant.Rate != fr || revoke.Grant.Burst != fb {
		t.Fatalf("revocation = %+v, want a floor grant (%v, %d)", revoke, fr, fb)
	}
	if revoke.MinEpoch <= apEpoch {
		t.Fatalf("revocation MinEpoch = %d, want above ap-south's last epoch %d", revoke.MinEpoch, apEpoch)
	}
	if sum := l.rate("us-east") + l.rate("eu-west"); sum < 1000-fr-25 {
		t.Fatalf("after the lease expired the others hold only %.1f of the %.1f left", sum, 1000-fr)
	}
}

// Pinned, static and full modes.
func TestModes(t *testing.T) {
	point2 := 0.2
	skew := map[string]float64{"us-east": 100, "eu-west": 900, "ap-south": 900}
	cases := []struct {
		name   string
		b      shares.Budget
		writes bool
		want   map[string]float64
		burst  map[string]int64
	}{
		{"pinned: home gets all", shares.Budget{Rate: 1000, Burst: 200, Mode: shares.ModePinned, Home: "us-east"}, false,
			map[string]float64{"us-east": 1000, "eu-west": 0, "ap-south": 0},
			map[string]int64{"us-east": 200, "eu-west": 0, "ap-south": 0}},
		{"pinned with floors", shares.Budget{Rate: 1000, Burst: 200, Mode: shares.ModePinned, Home: "us-east", Floor: &point2}, false,
			map[string]float64{"us-east": 1000 - 2*200.0/3, "eu-west": 200.0 / 3, "ap-south": 200.0 / 3},
			map[string]int64{"us-east": 200 - 2*13, "eu-west": 13, "ap-south": 13}},
		{"static equal", shares.Budget{Rate: 1000, Burst: 200, Mode: shares.ModeStatic}, false,
			map[string]float64{"us-east": 1000.0 / 3, "eu-west": 1000.0 / 3, "ap-south": 1000.0 / 3}, nil},
		{"static weights 2:1:1", shares.Budget{Rate: 1000, Burst: 200, Mode: shares.ModeStatic, Weights: map[string]float64{"us-east": 2, "eu-west": 1, "ap-south": 1}}, false,
			map[string]float64{"us-east": 33.33 + 450, "eu-west": 33.33 + 225, "ap-south": 33.33 + 225}, nil},
		{"full", shares.Budget{Rate: 1000, Burst: 200, Mode: shares.ModeFull}, false,
			map[string]float64{"us-east": 1000, "eu-west": 1000, "ap-south": 1000},
			map[string]int64{"us-east": 200, "eu-west": 200, "ap-south": 200}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLeader(t, shares.DefaultConfig(regions...), c.b)
			// The first rebalance gives every region its first grant;
			// writes counts the ones after it.
			if first := l.round(skew, true); len(first) != len(regions) {
				t.Fatalf("first rebalance wrote %d changes, want one per region", len(first))
			}
			writes := 0
			for range 5 {
				writes += len(l.round(skew, true))
			}
			if (writes > 0) != c.writes {
				t.Fatalf("wrote %d changes after the first, want writes %v", writes, c.writes)
			}
			for _, r := range regions {
				if got := l.rate(r); !near(got, c.want[r], 0.5) {
					t.Errorf("%s: rate %.2f, want %.2f", r, got, c.want[r])
				}
				if c.burst == nil {
					continue
				}
				_, fb := shares.Floor(c.b, regions, r)
				got := fb
				if g, ok := l.a.Grants("t")[r]; ok {
					got = g.Burst
				}
				if got != c.burst[r] {
					t.Errorf("%s: burst %d, want %d", r, got, c.burst[r])
				}
			}
		})
	}
}

func TestBudgetValidate(t *testing.T) {
	neg, one := -0.1, 1.0
	cases := []struct {
		name  string
		b     shares.Budget
		field string // "" means valid
	}{
		{"valid", shares.Budget{Rate: 1000, Burst: 200}, ""},
		{"valid pinned", shares.Budget{Rate: 10, Burst: 1, Mode: shares.ModePinned, Home: "eu-west"}, ""},
		{"valid static", shares.Budget{Rate: 10, Burst: 3, Mode: shares.ModeStatic, Weights: map[string]float64{"us-east": 1}}, ""},
		{"zero rate", shares.Budget{Rate: 0, Burst: 200}, "Rate"},
		{"negative rate", shares.Budget{Rate: -5, Burst: 200}, "Rate"},
		{"NaN rate", shares.Budget{Rate: math.NaN(), Burst: 200}, "Rate"},
		{"infinite rate", shares.Budget{Rate: math.Inf(1), Burst: 200}, "Rate"},
		{"zero burst", shares.Budget{Rate: 1000, Burst: 0}, "Burst"},
		{"burst below regions", shares.Budget{Rate: 1000, Burst: 2}, "Burst"},
		{"unknown mode", shares.Budget{Rate: 1000, Burst: 200, Mode: "fair"}, "Mode"},
		{"pinned without home", shares.Budget{Rate: 1000, Burst: 200, Mode: shares.ModePinned}, "Home"},
		{"pinned home not a region", shares.Budget{Rate: 1000, Burst: 200, Mode: shares.ModePinned, Home: "mars"}, "Home"},
		{"home when not pinned", shares.Budget{Rate: 1000, Burst: 200, Home: "us-east"}, "Home"},
		{"weights for unknown region", shares.Budget{Rate: 1000, Burst: 200, Mode: shares.ModeStatic, Weights: map[string]float64{"mars": 1}}, "Weights"},
		{"negative weight", shares.Budget{Rate: 1000, Burst: 200, Mode: shares.ModeStatic, Weights: map[string]float64{"us-east": -1}}, "Weights"},
		{"zero weights", shares.Budget{Rate: 1000, Burst: 200, Mode: shares.ModeStatic, Weights: map[string]float64{"us-east": 0}}, "Weights"},
		{"weights when not static", shares.Budget{Rate: 1000, Burst: 200, Weights: map[string]float64{"us-east": 1}}, "Weights"},
		{"negative floor", shares.Budget{Rate: 1000, Burst: 200, Floor: &neg}, "Floor"},
		{"floor of 1", shares.Budget{Rate: 1000, Burst: 200, Floor: &one}, "Floor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.b.Validate(regions)
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, shares.ErrInvalidBudget) || !strings.Contains(err.Error(), c.field+":") {
				t.Fatalf("Validate = %v, want ErrInvalidBudget naming %s", err, c.field)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*shares.Config)
		field string
	}{
		{"default", func(*shares.Config) {}, ""},
		{"no regions", func(c *shares.Config) { c.Regions = nil }, "Regions"},
		{"empty region", func(c *shares.Config) { c.Regions = []string{"a", ""} }, "Regions"},
		{"repeated region", func(c *shares.Config) { c.Regions = []string{"a", "a"} }, "Regions"},
		{"zero interval", func(c *shares.Config) { c.Interval = 0 }, "Interval"},
		{"lease too short", func(c *shares.Config) { c.Lease = c.Interval }, "Lease"},
		{"alpha up 0", func(c *shares.Config) { c.AlphaUp = 0 }, "AlphaUp"},
		{"alpha down above 1", func(c *shares.Config) { c.AlphaDown = 1.5 }, "AlphaDown"},
		{"negative headroom", func(c *shares.Config) { c.Headroom = -0.1 }, "Headroom"},
		{"NaN deadband", func(c *shares.Config) { c.Deadband = math.NaN() }, "Deadband"},
		{"slew above 1", func(c *shares.Config) { c.Slew = 2 }, "Slew"},
		{"negative demand cap", func(c *shares.Config) { c.DemandCap = -1 }, "DemandCap"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := shares.DefaultConfig(regions...)
			c.edit(&cfg)
			err := cfg.Validate()
			_, nerr := shares.NewAllocator(cfg)
			if c.field == "" {
				if err != nil || nerr != nil {
					t.Fatalf("Validate = %v, NewAllocator = %v, want nil", err, nerr)
				}
				return
			}
			if !errors.Is(err, shares.ErrInvalidConfig) || !strings.Contains(err.Error(), c.field+":") {
				t.Fatalf("Validate = %v, want ErrInvalidConfig naming %s", err, c.field)
			}
			if !errors.Is(nerr, shares.ErrInvalidConfig) {
				t.Fatalf("NewAllocator = %v, want ErrInvalidConfig", nerr)
			}
		})
	}
}

// NewAllocator copies its config: changing the caller's afterwards changes
// nothing.
func TestNewAllocatorCopiesConfig(t *testing.T) {
	cfg := shares.DefaultConfig(regions...)
	a, err := shares.NewAllocator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Regions[0] = "mars"
	if got := a.Config().Regions[0]; got != "us-east" {
		t.Fatalf("allocator's region 0 = %q after the caller changed theirs, want us-east", got)
	}
}

// Bad reports are errors and change nothing.
func TestReportErrors(t *testing.T) {
	cases := []struct {
		name string
		r    shares.Report
		want error
	}{
		{"unknown region", shares.Report{Region: "mars", Interval: time.Second}, shares.ErrUnknownRegion},
		{"zero interval", shares.Report{Region: "us-east"}, shares.ErrInvalidReport},
		{"negative offered", shares.Report{Region: "us-east", Interval: time.Second, Usage: map[string]shares.Usage{"t": {Offered: -1}}}, shares.ErrInvalidReport},
		{"NaN admitted", shares.Report{Region: "us-east", Interval: time.Second, Usage: map[string]shares.Usage{"t": {Offered: 1, Admitted: math.NaN()}}}, shares.ErrInvalidReport},
		{"infinite offered", shares.Report{Region: "us-east", Interval: time.Second, Usage: map[string]shares.Usage{"t": {Offered: math.Inf(1)}}}, shares.ErrInvalidReport},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := shares.NewAllocator(shares.DefaultConfig(regions...))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Report(t0, c.r); !errors.Is(err, c.want) {
				t.Fatalf("Report = %v, want %v", err, c.want)
			}
			if d := a.Demand("t"); len(d) != 0 {
				t.Fatalf("a bad report left demand %v", d)
			}
			// The region did not get a lease either: nothing is granted
			// beyond each region's floor.
			b := shares.Budget{Rate: 100, Burst: 10}
			for _, c := range a.Rebalance(t0, map[string]shares.Budget{"t": b}) {
				if fr, fb := shares.Floor(b, regions, c.Region); c.Grant.Rate > fr*(1+1e-9) || c.Grant.Burst > fb {
					t.Fatalf("Rebalance after a bad report wrote %+v, above the floor (%v, %d)", c, fr, fb)
				}
			}
		})
	}
}

// With B as small as the number of regions every region holding a rate
// still gets one unit and Σ bursts stays within B.
func TestBurstSplitSmallB(t *testing.T) {
	zero := 0.0
	for _, b := range []shares.Budget{
		{Rate: 1000, Burst: 3},
		{Rate: 1000, Burst: 3, Floor: &zero},
		{Rate: 1000, Burst: 4},
		{Rate: 5, Burst: 7},
	} {
		l := newLeader(t, shares.DefaultConfig(regions...), b)
		l.converge(map[string]float64{"us-east": 5000, "eu-west": 10, "ap-south": 1})
		var sum int64
		for _, r := range regions {
			_, fb := shares.Floor(b, regions, r)
			rate, burst := l.rate(r), fb
			if g, ok := l.a.Grants("t")[r]; ok {
				burst = g.Burst
			}
			if rate > 0 && burst < 1 {
				t.Errorf("budget %+v: %s has rate %v and burst %d", b, r, rate, burst)
			}
			sum += burst
		}
		if sum > b.Burst {
			t.Errorf("budget %+v: Σ bursts %d > B", b, sum)
		}
	}
}

func TestFloor(t *testing.T) {
	half := 0.5
	cases := []struct {
		b      shares.Budget
		region string
		rate   float64
		burst  int64
	}{
		{shares.Budget{Rate: 900, Burst: 300}, "eu-west", 30, 10},
		{shares.Budget{Rate: 900, Burst: 6}, "eu-west", 30, 1},
		{shares.Budget{Rate: 900, Burst: 300, Floor: &half}, "us-east", 150, 50},
		{shares.Budget{Rate: 900, Burst: 300, Mode: shares.ModePinned, Home: "ap-south"}, "ap-south", 900, 300},
		{shares.Budget{Rate: 900, Burst: 300, Mode: shares.ModePinned, Home: "ap-south"}, "us-east", 0, 0},
		{shares.Budget{Rate: 900, Burst: 300}, "mars", 0, 0},
		{shares.Budget{Rate: -1, Burst: 300}, "us-east", 0, 0},
	}
	for _, c := range cases {
		if r, b := shares.Floor(c.b, regions, c.region); !near(r, c.rate, 1e-9) || b != c.burst {
			t.Errorf("Floor(%+v, %s) = (%v, %d), want (%v, %d)", c.b, c.region, r, b, c.rate, c.burst)
		}
	}
}
