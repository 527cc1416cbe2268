package shares

import (
	"fmt"
	"math"
	"time"
)

// Config configures an Allocator and the Regions that obey it. Build it with
// DefaultConfig and change what you need; NewAllocator validates and copies
// it.
type Config struct {
	// Regions is the region set, in a fixed order (the order of per-region
	// arrays and of Changes). Names are unique and non-empty.
	Regions []string
	// Interval is the rebalance (and report) period P. Default 2s. The
	// smoothing constants are per Interval; a report covering another span
	// is weighted accordingly.
	Interval time.Duration
	// Lease is L, how long a renewal lets a region enforce its grants.
	// Default 10s. It must exceed the time a failover takes (election
	// session TTL plus one Interval) so that a leader change costs nothing,
	// and be at least two Intervals.
	Lease time.Duration
	// AlphaUp is the EWMA gain per Interval when offered demand rises above
	// the estimate: d ← d + AlphaUp·(x − d). Default 0.6: 90% of a step
	// after 3 intervals (6 s at P = 2s). The overload estimate uses it both
	// ways (see the package documentation).
	AlphaUp float64
	// AlphaDown is the EWMA gain per Interval when offered demand falls
	// below the headroom estimate. Default 0.3: 90% of a step after 7
	// intervals.
	AlphaDown float64
	// Headroom h: when a tenant's demand is below R, each region first gets
	// min(available, (1+h)·d_i), then the spare is spread. Default 0.15.
	Headroom float64
	// Deadband is the smallest change of a rate, as a fraction of R, worth
	// writing. Smaller changes are written only when a shrink is needed for
	// safety or to make room for a grow. Default 0.02.
	Deadband float64
	// Slew caps the change of one region's rate per rebalance, as a fraction
	// of R. 0 means no cap. Default 0.5. Shrinks needed for safety ignore it.
	Slew float64
	// DemandCap caps one region's measured offered rate at DemandCap·R
	// before smoothing, so that clients retrying on 429 (which inflate
	// offered demand by up to 1/(1 − p_reject)) cannot claim an unbounded
	// share. 0 means no cap. Default 2.
	DemandCap float64
}

// DefaultConfig returns the defaults for regions.
func DefaultConfig(regions ...string) Config {
	return Config{
		Regions:   append([]string(nil), regions...),
		Interval:  2 * time.Second,
		Lease:     10 * time.Second,
		AlphaUp:   0.6,
		AlphaDown: 0.3,
		Headroom:  0.15,
		Deadband:  0.02,
		Slew:      0.5,
		DemandCap: 2,
	}
}

func configErr(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// Validate reports whether c is usable. Errors wrap ErrInvalidConfig and
// name the field.
func (c Config) Validate() error {
	if len(c.Regions) == 0 {
		return configErr("Regions", "no regions")
	}
	seen := make(map[string]bool, len(c.Regions))
	for i, r := range c.Regions {
		if r == "" {
			return configErr("Regions", "region %d has an empty name", i)
		}
		if seen[r] {
			return configErr("Regions", "%q appears twice", r)
		}
		seen[r] = true
	}
	if c.Interval <= 0 {
		return configErr("Interval", "%v: must be positive", c.Interval)
	}
	if c.Lease < 2*c.Interval {
		return configErr("Lease", "%v: must be at least two Intervals (%v)", c.Lease, 2*c.Interval)
	}
	for _, f := range []struct {
		name   string
		v      float64
		lo, hi float64
		openLo bool
	}{
		{"AlphaUp", c.AlphaUp, 0, 1, true},
		{"AlphaDown", c.AlphaDown, 0, 1, true},
		{"Headroom", c.Headroom, 0, 10, false},
		{"Deadband", c.Deadband, 0, 0.5, false},
		{"Slew", c.Slew, 0, 1, false},
		{"DemandCap", c.DemandCap, 0, math.MaxFloat64, false},
	} {
		bad := math.IsNaN(f.v) || f.v > f.hi || f.v < f.lo || (f.openLo && f.v == f.lo)
		if bad {
			lo := "["
			if f.openLo {
				lo = "("
			}
			return configErr(f.name, "%v: must be in %s%v, %v]", f.v, lo, f.lo, f.hi)
		}
	}
	return nil
}

// clone returns a deep copy of c.
func (c Config) clone() Config {
	c.Regions = append([]string(nil), c.Regions...)
	return c
}
