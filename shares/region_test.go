package shares_test

import (
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

// What a region enforces, step by step at fixed instants.
func TestRegionEffective(t *testing.T) {
	cfg := shares.DefaultConfig(regions...)
	b := shares.Budget{Rate: 900, Burst: 300}
	fr, fb := shares.Floor(b, regions, "eu-west") // 30/s, 10
	const drift = 250 * time.Millisecond
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	grant := func(epoch uint64, rate float64, burst int64) shares.Change {
		return shares.Change{Tenant: "t", Region: "eu-west", Grant: shares.Grant{Rate: rate, Burst: burst, Epoch: epoch}}
	}
	r := shares.NewRegion("eu-west", cfg, drift)
	type want struct {
		rate    float64
		burst   int64
		leased  bool
		applied uint64
	}
	steps := []struct {
		name string
		do   func()
		at   time.Time
		want want
	}{
		{"cold: no grant, no lease", func() {}, at(0), want{fr, fb, false, 0}},
		{"a grant without a lease", func() { r.Apply(grant(3, 400, 100)) }, at(0), want{fr, fb, false, 3}},
		{"a grant for another region is ignored", func() {
			c := grant(9, 800, 200)
			c.Region = "us-east"
			r.Apply(c)
		}, at(0), want{fr, fb, false, 3}},
		{"renewed: the lease counts from the report's sending", func() {
			r.Renewed(at(1000), shares.Renewal{Lease: 10 * time.Second, MinEpoch: 1})
		}, at(1500), want{400, 100, true, 3}},
		{"still leased just before sent + L − drift", func() {}, at(1000 + 10000 - 250 - 1), want{400, 100, true, 3}},
		{"lapsed at sent + L − drift", func() {}, at(1000 + 10000 - 250), want{fr, fb, false, 3}},
		{"a newer report's renewal", func() {
			r.Renewed(at(12000), shares.Renewal{Lease: 10 * time.Second, MinEpoch: 1})
		}, at(12500), want{400, 100, true, 3}},
		{"an older renewal arriving late shortens nothing", func() {
			r.Renewed(at(2000), shares.Renewal{Lease: 10 * time.Second, MinEpoch: 1})
		}, at(20000), want{400, 100, true, 3}},
		{"an older grant arriving late is ignored", func() { r.Apply(grant(2, 800, 200)) }, at(20000), want{400, 100, true, 3}},
		{"a newer grant", func() { r.Apply(grant(5, 200, 50)) }, at(20000), want{200, 50, true, 5}},
		{"MinEpoch above the grant: floor", func() {
			r.Renewed(at(19000), shares.Renewal{Lease: 10 * time.Second, MinEpoch: 7})
		}, at(20000), want{fr, fb, false, 5}},
		{"an older renewal does not lower MinEpoch", func() {
			r.Renewed(at(18000), shares.Renewal{Lease: 10 * time.Second, MinEpoch: 1})
		}, at(20000), want{fr, fb, false, 5}},
		{"a grant at MinEpoch is enforced", func() { r.Apply(grant(7, 250, 60)) }, at(20000), want{250, 60, true, 7}},
		{"a change's MinEpoch is adopted", func() {
			c := grant(9, 100, 20)
			c.Tenant, c.MinEpoch = "other", 8
			r.Apply(c)
			r.Apply(shares.Change{Tenant: "t", Region: "eu-west", Grant: shares.Grant{Rate: 250, Burst: 60, Epoch: 7}})
		}, at(20000), want{fr, fb, false, 9}},
	}
	for _, s := range steps {
		s.do()
		rate, burst, leased := r.Effective(s.at, "t", b)
		got := want{rate, burst, leased, r.Applied()}
		if got != s.want {
			t.Fatalf("%s: Effective(%v) = %+v, want %+v", s.name, s.at.Sub(t0), got, s.want)
		}
	}
}
