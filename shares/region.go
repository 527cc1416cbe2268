package shares

import "time"

// Region is the regional side of the protocol, pure: it holds the grants a
// region received, its lease and its minimum epoch, and says what the region
// enforces. The regional service wraps one per region (its pods share the
// grants through etcd); the simulator and the tests drive it directly. Not
// safe for concurrent use.
type Region struct {
	name       string
	regions    []string
	drift      time.Duration
	grants     map[string]Grant
	applied    uint64
	minEpoch   uint64
	leaseUntil time.Time // zero: never renewed
}

// NewRegion returns the regional state of name. drift is the margin the
// region subtracts from every lease so that it stops enforcing its grants
// before the leader may hand their capacity to another region (clock rate
// differences between the region and the leader must fit in it).
func NewRegion(name string, cfg Config, drift time.Duration) *Region {
	return &Region{
		name:    name,
		regions: append([]string(nil), cfg.Regions...),
		drift:   drift,
		grants:  make(map[string]Grant),
	}
}

// Name returns the region's name.
func (r *Region) Name() string { return r.name }

// Apply records a grant that arrived (through the etcd watch). Grants must be
// applied in epoch order, as the watch delivers them; a grant for another
// region, or one not newer than the tenant's current grant, is ignored. A
// change's MinEpoch is adopted too: it only ever stops older grants.
func (r *Region) Apply(c Change) {
	if c.Region != r.name {
		return
	}
	if c.MinEpoch > r.minEpoch {
		r.minEpoch = c.MinEpoch
	}
	if g, ok := r.grants[c.Tenant]; ok && g.Epoch >= c.Grant.Epoch {
		return
	}
	r.grants[c.Tenant] = c.Grant
	if c.Grant.Epoch > r.applied {
		r.applied = c.Grant.Epoch
	}
}

// Renewed records the leader's answer to the report the region sent at
// sentAt (on the region's monotonic clock): the region may enforce its
// grants until sentAt + Lease − drift, and only those with Epoch ≥ MinEpoch.
// Renewals may arrive out of order: the lease and the minimum epoch only
// ever grow.
func (r *Region) Renewed(sentAt time.Time, rn Renewal) {
	until := sentAt.Add(rn.Lease - r.drift)
	if until.After(r.leaseUntil) {
		r.leaseUntil = until
	}
	if rn.MinEpoch > r.minEpoch {
		r.minEpoch = rn.MinEpoch
	}
}

// Applied returns the highest grant epoch applied, for the next report.
func (r *Region) Applied() uint64 { return r.applied }

// LeaseUntil returns the instant the region's lease ends (zero if it never
// had one).
func (r *Region) LeaseUntil() time.Time { return r.leaseUntil }

// Leased reports whether the region's lease is valid at now.
func (r *Region) Leased(now time.Time) bool {
	return !r.leaseUntil.IsZero() && now.Before(r.leaseUntil)
}

// Grant returns the last grant applied for tenant (which may not be in
// force: see Effective).
func (r *Region) Grant(tenant string) (Grant, bool) {
	g, ok := r.grants[tenant]
	return g, ok
}

// Effective returns what the region enforces for tenant at now: its grant
// when the lease is valid and the grant's epoch is at least the minimum
// epoch (leased is then true); otherwise the floor of b (see Floor). A rate
// of 0 admits nothing.
func (r *Region) Effective(now time.Time, tenant string, b Budget) (rate float64, burst int64, leased bool) {
	if r.Leased(now) {
		if g, ok := r.grants[tenant]; ok && g.Epoch >= r.minEpoch {
			return g.Rate, g.Burst, true
		}
	}
	rate, burst = Floor(b, r.regions, r.name)
	return rate, burst, false
}
