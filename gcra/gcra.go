package gcra

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors for invalid limits and costs. Callers branch on them with
// errors.Is.
var (
	ErrRate             = errors.New("gcra: rate must be a positive count per positive period")
	ErrRateTooHigh      = errors.New("gcra: rate exceeds 1000000 units per second per key (emission interval below 1µs); count in larger units")
	ErrRateTooLow       = errors.New("gcra: rate is below one unit per the maximum window (2^51 µs, about 71 years)")
	ErrBurst            = errors.New("gcra: burst must be at least 1")
	ErrWindowTooLong    = errors.New("gcra: burst × emission interval exceeds the maximum window")
	ErrCost             = errors.New("gcra: cost must be at least 1")
	ErrCostExceedsBurst = errors.New("gcra: cost exceeds burst and can never conform")
)

// MaxWindow bounds B·T, the time a fully spent key takes to rest, so that
// every TAT stays exactly representable in Lua's doubles (below 2^53 µs).
// It is 2^51 µs, about 71 years.
const MaxWindow = time.Duration(1<<51) * time.Microsecond

const maxWindowMicros = int64(1) << 51

// Rate is Count units per Period.
type Rate struct {
	Count  int64
	Period time.Duration
}

// PerSecond returns n units per second.
func PerSecond(n int64) Rate { return Rate{Count: n, Period: time.Second} }

// PerMinute returns n units per minute.
func PerMinute(n int64) Rate { return Rate{Count: n, Period: time.Minute} }

// PerHour returns n units per hour.
func PerHour(n int64) Rate { return Rate{Count: n, Period: time.Hour} }

// Day and Week are the periods of N/d and N/w: 24 and 168 hours (of
// elapsed time: no calendar, no daylight saving).
const (
	Day  = 24 * time.Hour
	Week = 7 * Day
)

// PerDay returns n units per day (24 h).
func PerDay(n int64) Rate { return Rate{Count: n, Period: Day} }

// PerWeek returns n units per week (168 h).
func PerWeek(n int64) Rate { return Rate{Count: n, Period: Week} }

// ParseRate parses "N/s", "N/m", "N/h", "N/d" (24 h) or "N/w" (168 h),
// also "N/<duration>", e.g. "100/10s".
func ParseRate(s string) (Rate, error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: want N/s, N/m, N/h, N/d or N/w, e.g. 1000/s", s)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil {
		return Rate{}, fmt.Errorf("rate %q: count %q is not a whole number: %w", s, num, ErrRate)
	}
	var per time.Duration
	switch u := strings.TrimSpace(unit); u {
	case "s", "sec", "second":
		per = time.Second
	case "m", "min", "minute":
		per = time.Minute
	case "h", "hour":
		per = time.Hour
	case "d", "day":
		per = Day
	case "w", "week":
		per = Week
	default:
		d, derr := time.ParseDuration(u)
		if derr != nil {
			return Rate{}, fmt.Errorf("rate %q: unit %q: want s, m, h, d, w or a duration such as 10s", s, u)
		}
		per = d
	}
	r := Rate{Count: n, Period: per}
	if err := r.Validate(); err != nil {
		return Rate{}, fmt.Errorf("rate %q: %w", s, err)
	}
	return r, nil
}

// Validate reports whether r can be enforced: with a burst of one unit at
// least (see MaxBurst for the largest).
func (r Rate) Validate() error {
	if r.Count <= 0 || r.Period <= 0 {
		return ErrRate
	}
	if r.Period.Microseconds() < r.Count {
		return ErrRateTooHigh
	}
	if r.interval() > maxWindowMicros {
		return ErrRateTooLow
	}
	return nil
}

// interval is T for a rate with a positive count: Period/Count rounded up
// to a whole microsecond.
func (r Rate) interval() int64 {
	p := r.Period.Microseconds()
	t := p / r.Count
	if p%r.Count != 0 {
		t++
	}
	return t
}

// MaxBurst returns the largest burst NewLimit accepts with r (B·T within
// MaxWindow), or 0 when r is invalid.
func (r Rate) MaxBurst() int64 {
	if r.Validate() != nil {
		return 0
	}
	return maxWindowMicros / r.interval()
}

// String writes r as ParseRate reads it.
func (r Rate) String() string {
	switch r.Period {
	case time.Second:
		return fmt.Sprintf("%d/s", r.Count)
	case time.Minute:
		return fmt.Sprintf("%d/m", r.Count)
	case time.Hour:
		return fmt.Sprintf("%d/h", r.Count)
	case Day:
		return fmt.Sprintf("%d/d", r.Count)
	case Week:
		return fmt.Sprintf("%d/w", r.Count)
	}
	// 1000h rather than 1000h0m0s, 10m rather than 10m0s: ParseRate reads
	// both.
	p := r.Period.String()
	if strings.HasSuffix(p, "m0s") {
		p = p[:len(p)-2]
	}
	if strings.HasSuffix(p, "h0m") {
		p = p[:len(p)-2]
	}
	return fmt.Sprintf("%d/%s", r.Count, p)
}

// PerSecond returns the rate in units per second.
func (r Rate) PerSecond() float64 {
	if r.Period <= 0 {
		return 0
	}
	return float64(r.Count) / r.Period.Seconds()
}

// MarshalText implements encoding.TextMarshaler.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Rate) UnmarshalText(b []byte) error {
	p, err := ParseRate(string(b))
	if err != nil {
		return err
	}
	*r = p
	return nil
}

// Limit is an emission interval T (whole microseconds) and a burst B. Build
// it with NewLimit or FromPerSecond; the zero Limit is invalid.
type Limit struct {
	// T is the emission interval in microseconds.
	T int64
	// Burst is the number of units admissible at once from idle.
	Burst int64
}

// NewLimit returns the limit for rate and burst. T is Period/Count rounded up
// to a whole microsecond.
func NewLimit(rate Rate, burst int64) (Limit, error) {
	if err := rate.Validate(); err != nil {
		return Limit{}, err
	}
	l := Limit{T: rate.interval(), Burst: burst}
	return l, l.Validate()
}

// FromPerSecond returns the limit for a fractional rate in units per second,
// as regional grants are. T is rounded up to a whole microsecond.
func FromPerSecond(perSecond float64, burst int64) (Limit, error) {
	if !(perSecond > 0) || math.IsInf(perSecond, 0) {
		return Limit{}, ErrRate
	}
	if perSecond > 1e6 {
		return Limit{}, ErrRateTooHigh
	}
	t := math.Ceil(1e6 / perSecond)
	if t > float64(maxWindowMicros) {
		// Also keeps the conversion below defined: 1e6/perSecond may be
		// beyond int64 (or +Inf) for tiny rates.
		return Limit{}, ErrRateTooLow
	}
	l := Limit{T: int64(t), Burst: burst}
	return l, l.Validate()
}

// Fit returns the limit that enforces at most perSecond units per second and
// at most burst units at once, for a share of a larger limit (a region's
// grant or floor of a tenant's budget): a share is slower than the whole and
// so may rest longer than MaxWindow where the whole does not. Fit is
// FromPerSecond with the burst lowered until B·T fits in MaxWindow, and a
// rate above 1,000,000 per second enforced at that maximum (T = 1 µs); both
// only ever admit less than asked. ok is false when no limit admits anything
// within the share: perSecond is not positive (or NaN), burst is below 1, or
// the rate is below one unit per MaxWindow.
func Fit(perSecond float64, burst int64) (l Limit, ok bool) {
	if !(perSecond > 0) || burst < 1 {
		return Limit{}, false
	}
	t := math.Ceil(1e6 / perSecond) // 0 for +Inf: enforced at T = 1 µs
	switch {
	case t < 1:
		t = 1
	case t > float64(maxWindowMicros):
		return Limit{}, false
	}
	l = Limit{T: int64(t), Burst: min(burst, maxWindowMicros/int64(t))}
	return l, l.Validate() == nil
}

// Validate reports whether l can be enforced without overflow.
func (l Limit) Validate() error {
	if l.T < 1 {
		return ErrRateTooHigh
	}
	if l.Burst < 1 {
		return ErrBurst
	}
	if l.T > maxWindowMicros/l.Burst {
		return ErrWindowTooLong
	}
	return nil
}

// Interval returns the emission interval T.
func (l Limit) Interval() time.Duration { return time.Duration(l.T) * time.Microsecond }

// PerSecond returns the enforced rate in units per second.
func (l Limit) PerSecond() float64 {
	if l.T <= 0 {
		return 0
	}
	return 1e6 / float64(l.T)
}

// CheckCost validates cost against l.
func (l Limit) CheckCost(cost int64) error {
	if cost < 1 {
		return ErrCost
	}
	if cost > l.Burst {
		return ErrCostExceedsBurst
	}
	return nil
}

// State is what a key stores: its TAT in microseconds and the limit it was
// written under. The zero State is a missing (fully rested) key.
type State struct {
	TAT   int64 // µs since the Unix epoch; 0 means no key
	T     int64 // emission interval the TAT was written under
	Burst int64 // burst the TAT was written under
}

// Exists reports whether s holds a key.
func (s State) Exists() bool { return s.TAT != 0 }

// Result is one decision.
type Result struct {
	Allowed bool
	// Remaining is the whole units available after this decision (on a
	// denial: available now, fewer than the cost).
	Remaining int64
	// RetryAfter is zero when allowed; otherwise the wait until the same
	// request would conform.
	RetryAfter time.Duration
	// ResetAfter is the wait until the key is fully rested.
	ResetAfter time.Duration
}

// Convert returns s restated under l at now without minting units: see the
// package documentation. A missing key, or one already under l, is returned
// unchanged (a missing key stays missing).
func Convert(s State, now int64, l Limit) State {
	if !s.Exists() || (s.T == l.T && s.Burst == l.Burst) || s.T <= 0 {
		return s
	}
	tat := max(s.TAT, now)
	// Used time under the old limit, shifted by the burst change, in old µs:
	// x/T_old = B' − a', the units the key owes under the new burst. The
	// arithmetic is on float64 in the Lua script's order (Lua numbers are
	// doubles), so that both agree exactly even where the product leaves
	// int64's or a double's exact range (absurd limits: bursts and
	// intervals both near their maxima); there the debt may be rounded by
	// at most a microsecond.
	x := float64(float64(l.Burst-s.Burst)*float64(s.T)) + float64(tat-now)
	if x <= 0 {
		return State{TAT: now, T: l.T, Burst: l.Burst}
	}
	debt := math.Ceil(float64(float64(x/float64(s.T)) * float64(l.T)))
	return State{TAT: now + int64(debt), T: l.T, Burst: l.Burst}
}

// DecideMicros is Decide on microseconds: the exact arithmetic of the Lua
// script. It does not validate; l and cost must be valid. It returns the state
// to store (equal to s, restated under l, when denied) and whether it must be
// written.
func DecideMicros(s State, now int64, l Limit, cost int64) (State, Result, bool) {
	converted := s.Exists() && (s.T != l.T || s.Burst != l.Burst)
	s = Convert(s, now, l)
	tat := now
	if s.Exists() && s.TAT > now {
		tat = s.TAT
	}
	bt := l.Burst * l.T
	newTAT := tat + l.T*cost
	allowAt := newTAT - bt
	if allowAt > now {
		rem := (now - (tat - bt)) / l.T
		if rem < 0 {
			rem = 0
		}
		return s, Result{
			Remaining:  rem,
			RetryAfter: micros(allowAt - now),
			ResetAfter: micros(tat - now),
		}, converted
	}
	return State{TAT: newTAT, T: l.T, Burst: l.Burst}, Result{
		Allowed:    true,
		Remaining:  (now - allowAt) / l.T,
		ResetAfter: micros(newTAT - now),
	}, true
}

// Decide decides a request of cost units at now against l, given the key's
// state s. It returns the state to store and the result; when denied the
// returned state equals s restated under l (see Convert).
func Decide(s State, now time.Time, l Limit, cost int64) (State, Result, error) {
	if err := l.Validate(); err != nil {
		return s, Result{}, err
	}
	if err := l.CheckCost(cost); err != nil {
		return s, Result{}, err
	}
	ns, r, _ := DecideMicros(s, now.UnixMicro(), l, cost)
	return ns, r, nil
}

// Expiry returns how long a key holding s must live after now: until its TAT
// is in the past, rounded up to a whole millisecond, plus one millisecond (as
// the Lua script's PX).
func Expiry(s State, now int64) time.Duration {
	d := s.TAT - now
	if d <= 0 {
		return time.Millisecond
	}
	return time.Duration((d+999)/1000+1) * time.Millisecond
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
