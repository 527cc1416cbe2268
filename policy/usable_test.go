package policy

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/shares"
)

func TestValidateTenant(t *testing.T) {
	good := []string{
		"t42", "acme-eu", "user_1", "a.b", "org:team", "alice@example.com", "t1%3Auser",
		"A+B=C~", "x!#$&*|,;^'()[]<>?", "tënant", "用户", "t1:user:7", strings.Repeat("x", MaxTenantLen),
	}
	for _, name := range good {
		if err := ValidateTenant(name); err != nil {
			t.Errorf("ValidateTenant(%q) = %v, want nil", name, err)
		}
	}
	bad := []struct{ name, rule string }{
		{"", "empty"},
		{strings.Repeat("x", MaxTenantLen+1), "257 bytes, at most 256"},
		{".", "path element"},
		{"..", "path element"},
		{"a..b", "path element"},
		{"../../x", "path element"},
		{"a/b", "path separators"},
		{`a\b`, "path separators"},
		{"{t1", "hash tag"},
		{"t1}", "hash tag"},
		{"t1 ", "whitespace"},
		{" t1", "whitespace"},
		{"a\tb", "whitespace"},
		{"a\nb", "whitespace"},
		{"a\u00a0b", "whitespace"},
		{"a\u2028b", "whitespace"},
		{"\x00", "non-printable"},
		{"a\x7fb", "non-printable"},
		{"a\u200db", "non-printable"},
		{"a\u202eb", "non-printable"},
		{"\xff", "not valid UTF-8"},
		{"a\ufffd", "replacement character"},
	}
	for _, c := range bad {
		err := ValidateTenant(c.name)
		var te *TenantError
		if !errors.Is(err, ErrTenant) || !errors.As(err, &te) || !strings.Contains(err.Error(), c.rule) || !strings.HasPrefix(err.Error(), "tenant ") {
			t.Errorf("ValidateTenant(%q) = %v, want a *TenantError naming the tenant and %q", c.name, err, c.rule)
		}
	}
	if err := ValidTenant("a/b"); err == nil {
		t.Error("ValidTenant(a/b) = nil, want ValidateTenant's error")
	}
}

func TestUnknownTenants(t *testing.T) {
	for _, c := range []struct {
		field      string
		strangerIn bool // the stranger is denied
	}{{"", false}, {"unknown_tenants: allow\n", false}, {"unknown_tenants: deny\n", true}} {
		d, err := Parse([]byte(c.field + good))
		if err != nil {
			t.Fatalf("%q: %v", c.field, err)
		}
		if got := d.Resolve("stranger").UnknownDenied; got != c.strangerIn {
			t.Errorf("%qResolve(stranger).UnknownDenied = %v, want %v", c.field, got, c.strangerIn)
		}
		if d.Resolve("t42").UnknownDenied {
			t.Errorf("%qResolve(t42).UnknownDenied = true, want false: t42 has an entry", c.field)
		}
	}
}

// fuzzPolicy renders a small policy from fuzzed numbers: a budget limit and
// a fixed-rate one, a tier with an override, and a tenant with its own
// budget and override. Rates are count/unit with unit from a short list.
func fuzzPolicy(regions uint8, floor float64, unknown bool, tierRate, tierBurst, limRate, limBurst, ovBurst, tenRate, tenBurst, ovTenBurst int64, unit uint8, mode uint8) string {
	units := []string{"s", "m", "h", "10s", "1000h", "100000h", "1us", "3ms"}
	u := func(k int) string { return units[(int(unit)+k)%len(units)] }
	rs := []string{"us-east", "eu-west", "ap-south"}[:1+int(regions)%3]
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nregions: [%s]\ndefault_tier: free\n", strings.Join(rs, ", "))
	if !math.IsNaN(floor) {
		fmt.Fprintf(&b, "floor_fraction: %v\n", floor)
	}
	if unknown {
		b.WriteString("unknown_tenants: deny\n")
	}
	fmt.Fprintf(&b, "limits:\n  - {name: tenant, descriptors: [tenant], rate: budget}\n")
	fmt.Fprintf(&b, "  - {name: user, descriptors: [tenant, user], rate: %d/%s, burst: %d}\n", limRate, u(1), limBurst)
	fmt.Fprintf(&b, "tiers:\n  free:\n    budget: {rate: %d/%s, burst: %d}\n    limits:\n      user: {burst: %d}\n", tierRate, u(0), tierBurst, ovBurst)
	modes := []string{"", ", mode: static", ", mode: pinned, home: " + rs[len(rs)-1], ", mode: full"}
	fmt.Fprintf(&b, "tenants:\n  t42:\n    budget: {rate: %d/%s, burst: %d%s}\n    limits:\n      user: {rate: %d/%s, burst: %d}\n",
		tenRate, u(2), tenBurst, modes[int(mode)%len(modes)], limRate, u(3), ovTenBurst)
	return b.String()
}

// FuzzValidatedIsUsable: whatever policy validation accepts, every tenant
// (with an entry or not) resolves to limits gcra can build and a budget
// shares can split, and every region's floor of it is a limit or admits
// nothing — so the decide path never meets a limit it cannot build.
func FuzzValidatedIsUsable(f *testing.F) {
	f.Add(uint8(2), 0.1, false, int64(100), int64(20), int64(50), int64(20), int64(10), int64(1000), int64(math.MaxInt64), int64(40), uint8(0), uint8(0))
	f.Add(uint8(0), 0.5, true, int64(1), int64(625_499), int64(1), int64(1), int64(1), int64(1), int64(625_500), int64(1), uint8(2), uint8(1))
	f.Add(uint8(1), 1e-300, false, int64(1_000_000), int64(1)<<51, int64(7), int64(3), int64(5), int64(3), int64(2), int64(1), uint8(0), uint8(2))
	f.Add(uint8(2), math.NaN(), true, int64(3), int64(1)<<40, int64(1), int64(6), int64(7), int64(1), int64(6), int64(7), uint8(5), uint8(3))
	f.Fuzz(func(t *testing.T, regions uint8, floor float64, unknown bool, tierRate, tierBurst, limRate, limBurst, ovBurst, tenRate, tenBurst, ovTenBurst int64, unit uint8, mode uint8) {
		doc := fuzzPolicy(regions, floor, unknown, tierRate, tierBurst, limRate, limBurst, ovBurst, tenRate, tenBurst, ovTenBurst, unit, mode)
		d, err := Parse([]byte(doc))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse = %v, not ErrInvalid", err)
			}
			return
		}
		for _, tenant := range []string{"t42", "stranger"} {
			r := d.Resolve(tenant)
			if r.UnknownDenied != (unknown && tenant == "stranger") {
				t.Fatalf("%s: UnknownDenied = %v\n%s", tenant, r.UnknownDenied, doc)
			}
			for _, l := range r.Limits {
				if _, err := gcra.NewLimit(l.Rate, l.Burst); err != nil {
					t.Fatalf("%s: limit %q %v burst %d accepted but gcra.NewLimit: %v\n%s", tenant, l.Name, l.Rate, l.Burst, err, doc)
				}
			}
			sb := d.TenantBudget(tenant, nil).Shares()
			if err := sb.Validate(d.Regions); err != nil {
				t.Fatalf("%s: budget accepted but shares refuse it: %v\n%s", tenant, err, doc)
			}
			for _, region := range d.Regions {
				fr, fb := shares.Floor(sb, d.Regions, region)
				if l, ok := gcra.Fit(fr, fb); ok && (l.Burst > fb || l.PerSecond() > fr*(1+1e-12)) {
					t.Fatalf("%s: floor of %s %g/s burst %d: Fit = %+v, looser than the floor", tenant, region, fr, fb, l)
				}
			}
		}
	})
}
