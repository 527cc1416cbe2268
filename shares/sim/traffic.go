package sim

import (
	"math"
	"math/rand/v2"
	"time"
)

// Profile is an offered rate over simulated time: units per second at t
// (t measured from the start of the run). It must be non-negative.
type Profile func(t time.Duration) float64

// Constant offers r units per second throughout.
func Constant(r float64) Profile { return func(time.Duration) float64 { return r } }

// Step offers before until at, then after.
func Step(before, after float64, at time.Duration) Profile {
	return func(t time.Duration) float64 {
		if t < at {
			return before
		}
		return after
	}
}

// Ramp offers from until start, then moves linearly to to by end, and offers
// to afterwards.
func Ramp(from, to float64, start, end time.Duration) Profile {
	return func(t time.Duration) float64 {
		switch {
		case t <= start:
			return from
		case t >= end:
			return to
		}
		f := float64(t-start) / float64(end-start)
		return from + (to-from)*f
	}
}

// Diurnal offers mean + amplitude·sin(2π(t+phase)/period): a compressed day.
// Negative values are clipped to zero.
func Diurnal(mean, amplitude float64, period, phase time.Duration) Profile {
	return func(t time.Duration) float64 {
		v := mean + amplitude*math.Sin(2*math.Pi*float64(t+phase)/float64(period))
		return math.Max(0, v)
	}
}

// FlashCrowd offers base, plus extra from at for hold (reached over rise,
// linearly), after which the extra stops at once.
func FlashCrowd(base, extra float64, at, rise, hold time.Duration) Profile {
	return func(t time.Duration) float64 {
		switch {
		case t < at || t >= at+hold:
			return base
		case rise > 0 && t < at+rise:
			return base + extra*float64(t-at)/float64(rise)
		}
		return base + extra
	}
}

// OnOff offers rate for on, then nothing for off, repeating; phase shifts
// the cycle (a positive phase starts it later).
func OnOff(rate float64, on, off, phase time.Duration) Profile {
	cycle := on + off
	return func(t time.Duration) float64 {
		x := (t - phase) % cycle
		if x < 0 {
			x += cycle
		}
		if x < on {
			return rate
		}
		return 0
	}
}

// Sum offers the sum of ps.
func Sum(ps ...Profile) Profile {
	return func(t time.Duration) float64 {
		var s float64
		for _, p := range ps {
			s += p(t)
		}
		return s
	}
}

// Process is how arrivals are spread in time around the offered rate.
type Process uint8

// Arrival processes.
const (
	// Poisson arrivals: exponential gaps with mean 1/rate.
	Poisson Process = iota
	// Even arrivals: gaps of 1/rate, each stretched by a uniform factor
	// in [1−Jitter, 1+Jitter].
	Even
)

// String names p.
func (p Process) String() string {
	if p == Even {
		return "even"
	}
	return "poisson"
}

// Traffic is the fresh demand of one region: an offered-rate profile and an
// arrival process. Every arrival costs one unit.
type Traffic struct {
	Profile Profile
	Process Process
	// Jitter is the spread of Even gaps, in [0, 0.9]; ignored for Poisson.
	Jitter float64
}

// genStep is the resolution at which a generator samples its profile: the
// profile is treated as constant over each step. 10 ms is well below any
// rate change the scenarios make and well above the gaps between arrivals.
const genStep = 10 * time.Millisecond

// generator yields the arrival instants of one Traffic, in order, by inverting
// the integral of the profile (sampled every genStep): the next arrival is the
// instant at which the integral has grown by a drawn amount (Exp(1) for
// Poisson, 1±jitter for Even).
type generator struct {
	tr   Traffic
	rng  *rand.Rand
	t    float64 // seconds since the start
	step float64 // genStep in seconds
}

func newGenerator(tr Traffic, rng *rand.Rand) *generator {
	return &generator{tr: tr, rng: rng, step: genStep.Seconds()}
}

// next returns the next arrival in microseconds since the start, or false
// when it would fall at or after end (µs).
func (g *generator) next(end int64) (int64, bool) {
	var need float64
	if g.tr.Process == Even {
		j := g.tr.Jitter
		need = 1 + j*(2*g.rng.Float64()-1)
	} else {
		need = g.rng.ExpFloat64()
	}
	endS := float64(end) / 1e6
	for g.t < endS {
		k := math.Floor(g.t/g.step + 1e-9)
		boundary := (k + 1) * g.step
		lam := g.tr.Profile(time.Duration(k * g.step * 1e9))
		if lam <= 0 {
			g.t = boundary
			continue
		}
		if dt := need / lam; g.t+dt < boundary {
			g.t += dt
			us := int64(g.t * 1e6) // truncated: an arrival stays in the step it was drawn in
			if us >= end {
				return 0, false
			}
			return us, true
		}
		need -= lam * (boundary - g.t)
		g.t = boundary
	}
	return 0, false
}

// Retry makes clients retry a denied request: after a denial the same client
// tries again in the same region after max(retry-after, Base·2^k), capped at
// Max and stretched by a uniform factor in [1−Jitter, 1+Jitter] (k counts
// the retries so far), until it is admitted or has made Attempts retries.
type Retry struct {
	Attempts int
	Base     time.Duration
	Max      time.Duration
	Jitter   float64
	// HonourRetryAfter waits at least the limiter's retry-after.
	HonourRetryAfter bool
}

// backoff returns the wait before retry k (0-based) after a denial that
// answered retryAfter.
func (r *Retry) backoff(k int, retryAfter time.Duration, rng *rand.Rand) time.Duration {
	d := r.Base << min(k, 30)
	if r.Max > 0 && d > r.Max {
		d = r.Max
	}
	if r.HonourRetryAfter && retryAfter > d {
		d = retryAfter
	}
	f := 1 + r.Jitter*(2*rng.Float64()-1)
	d = time.Duration(float64(d) * f)
	return max(d, time.Microsecond)
}
