package shares

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Mode says how a tenant's budget is split across regions.
type Mode string

// The modes. See the package documentation.
const (
	// ModeRebalanced makes shares follow smoothed offered demand (the default).
	ModeRebalanced Mode = "rebalanced"
	// ModeStatic splits the budget by fixed weights (equal when none are set).
	ModeStatic Mode = "static"
	// ModeFull gives every region all of R and B. It over-admits up to N
	// times and is kept only for comparison: it is deliberately unsafe.
	ModeFull Mode = "full"
	// ModePinned gives the home region R less the other regions' floors
	// (which default to zero for pinned tenants).
	ModePinned Mode = "pinned"
)

// DefaultFloor is the fraction of R reserved as floors, split equally among
// the regions, when Budget.Floor is nil (except for pinned tenants, whose
// default is 0).
const DefaultFloor = 0.1

// Sentinel errors. Callers branch on them with errors.Is; the wrapping error
// names the field.
var (
	ErrInvalidBudget = errors.New("shares: invalid budget")
	ErrInvalidConfig = errors.New("shares: invalid config")
	ErrUnknownRegion = errors.New("shares: unknown region")
	ErrInvalidReport = errors.New("shares: invalid report")
)

// Budget is one tenant's global budget.
type Budget struct {
	// Rate is R, units per second, > 0.
	Rate float64
	// Burst is B, whole units admissible at once from idle across the
	// world, ≥ 1 (and at least one per region that may hold a grant).
	Burst int64
	// Mode is how R is split; "" means ModeRebalanced.
	Mode Mode
	// Home is the home region of a pinned tenant (pinned only).
	Home string
	// Weights are the static split (static only); nil means equal. Regions
	// missing from a non-nil map weigh 0.
	Weights map[string]float64
	// Floor is the fraction of R reserved as floors, split equally among
	// the regions, in [0, 1); nil means DefaultFloor (0 for pinned).
	Floor *float64
}

// mode returns b.Mode with the default applied.
func (b *Budget) mode() Mode {
	if b.Mode == "" {
		return ModeRebalanced
	}
	return b.Mode
}

// floorFraction returns the floor fraction with the mode's default applied.
func (b *Budget) floorFraction() float64 {
	if b.Floor != nil {
		return *b.Floor
	}
	if b.mode() == ModePinned {
		return 0
	}
	return DefaultFloor
}

func budgetErr(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidBudget, field, fmt.Sprintf(format, args...))
}

// Validate reports whether b can be enforced across regions. Errors wrap
// ErrInvalidBudget and name the field.
func (b Budget) Validate(regions []string) error { return b.validate(regions) }

func (b *Budget) validate(regions []string) error {
	if !(b.Rate > 0) || math.IsInf(b.Rate, 0) {
		return budgetErr("Rate", "%v: must be a positive finite number of units per second", b.Rate)
	}
	if b.Burst < 1 {
		return budgetErr("Burst", "%d: must be at least 1", b.Burst)
	}
	if len(regions) == 0 {
		return budgetErr("regions", "no regions")
	}
	m := b.mode()
	switch m {
	case ModeRebalanced, ModeStatic, ModeFull, ModePinned:
	default:
		return budgetErr("Mode", "%q: want rebalanced, static, full or pinned", string(b.Mode))
	}
	if m == ModePinned {
		if b.Home == "" {
			return budgetErr("Home", "pinned mode needs a home region")
		}
		if indexOf(regions, b.Home) < 0 {
			return budgetErr("Home", "%q is not a region (regions: %v)", b.Home, regions)
		}
	} else if b.Home != "" {
		return budgetErr("Home", "%q: only pinned tenants have a home region", b.Home)
	}
	if b.Weights != nil {
		if err := b.validateWeights(regions); err != nil {
			return err
		}
	}
	if b.Floor != nil {
		if f := *b.Floor; !(f >= 0 && f < 1) {
			return budgetErr("Floor", "%v: must be in [0, 1)", f)
		}
	}
	if need := holders(b, regions); b.Burst < int64(need) {
		return budgetErr("Burst", "%d: below %d, the number of regions that may hold a grant (each needs at least one unit)", b.Burst, need)
	}
	return nil
}

func (b *Budget) validateWeights(regions []string) error {
	if b.mode() != ModeStatic {
		return budgetErr("Weights", "only static tenants have weights")
	}
	sum, known := 0.0, 0
	for _, r := range regions {
		w, ok := b.Weights[r]
		if !ok {
			continue
		}
		known++
		if !(w >= 0) || math.IsInf(w, 0) {
			return budgetErr("Weights", "%q: %v: must be a finite number ≥ 0", r, w)
		}
		sum += w
	}
	if known != len(b.Weights) {
		var unknown []string
		for k := range b.Weights {
			if indexOf(regions, k) < 0 {
				unknown = append(unknown, k)
			}
		}
		sort.Strings(unknown)
		return budgetErr("Weights", "%q is not a region (regions: %v)", unknown[0], regions)
	}
	if !(sum > 0) {
		return budgetErr("Weights", "weights sum to 0")
	}
	return nil
}

// holders counts the regions that may hold a grant with a positive rate.
func holders(b *Budget, regions []string) int {
	phi := b.floorFraction()
	switch b.mode() {
	case ModePinned:
		if phi > 0 {
			return len(regions)
		}
		return 1
	case ModeStatic:
		if phi > 0 || b.Weights == nil {
			return len(regions)
		}
		n := 0
		for _, r := range regions {
			if b.Weights[r] > 0 {
				n++
			}
		}
		return n
	}
	return len(regions)
}

// Floor returns the rate and burst region enforces for b when it holds no
// grant or its lease lapsed. Floors of all regions sum to at most (R, B).
//
// Every region's floor rate is Floor·R/n. The floor burst is ⌊Floor·B/n⌋,
// raised to 1 when the floor rate is positive. A pinned tenant's home region
// instead gets R and B less the other regions' floors: its share never moves,
// so it needs no lease. A region not in regions, or an invalid budget, gets
// (0, 0).
func Floor(b Budget, regions []string, region string) (rate float64, burst int64) {
	i := indexOf(regions, region)
	if i < 0 || b.validate(regions) != nil {
		return 0, 0
	}
	fr, fb := floorOne(&b, len(regions))
	if b.mode() == ModePinned && region == b.Home {
		n := len(regions) - 1
		return b.Rate - float64(n)*fr, b.Burst - int64(n)*fb
	}
	return fr, fb
}

// floorOne returns the floor of one (non-home) region of n. A region alone
// has the whole budget as its floor: no other region may need a share.
func floorOne(b *Budget, n int) (float64, int64) {
	if n == 1 {
		return b.Rate, b.Burst
	}
	phi := b.floorFraction()
	if phi <= 0 {
		return 0, 0
	}
	fr := phi * b.Rate / float64(n)
	fb := int64(math.Floor(phi * float64(b.Burst) / float64(n)))
	if fb < 1 {
		fb = 1
	}
	return fr, fb
}

func indexOf(regions []string, name string) int {
	for i, r := range regions {
		if r == name {
			return i
		}
	}
	return -1
}
