package sim

import (
	"math"
	"time"

	"github.com/allot-dev/allot/gcra"
)

// Windows are the window lengths W over which over-admission is measured.
var Windows = []time.Duration{time.Second, 10 * time.Second, 60 * time.Second}

// Convergence tolerances (see Result.Convergence).
const (
	// ConvergeTolerance is how close, as a fraction of R, the world's and
	// every region's admitted rate must be to the ideal split.
	ConvergeTolerance = 0.05
	// ConvergeHold is how many consecutive one-second samples must be
	// within tolerance.
	ConvergeHold = 5
	// unconvergedSkip is how long after an event that never converged is
	// left out of the per-region error.
	unconvergedSkip = 10 * time.Second
)

// Sample is one second of the run, ending at At.
type Sample struct {
	At time.Duration
	// Offered, Admitted: world-wide units during the second (retries
	// included). Ideal: units the central limiter admitted.
	Offered, Admitted, Ideal float64
	// Regions, in Spec.Regions order.
	Regions []RegionSample
}

// RegionSample is one region's second.
type RegionSample struct {
	Offered, Admitted float64
	// Grant and Burst are the largest rate and burst any pod of the region
	// enforces at At (what the region's Redis path may enforce). Leased is
	// true when every pod of the region enforces a leased grant, LeasedPods
	// counts those that do; the others enforce their floor (lease lapsed)
	// or nothing (never synced).
	Grant      float64
	Burst      int64
	Leased     bool
	LeasedPods int
	// Share is the ideal share of the second: Offered·min(1, R/D), with D
	// the world's offered units (R·d_i/D under overload).
	Share float64
}

// central is one GCRA over the merged arrivals of every region: what a single
// global limiter with (R, B) would admit. It is the "ideal" every mode is
// compared with.
type central struct {
	l   gcra.Limit
	s   gcra.State
	off int64 // µs added to simulated time to get Unix µs
}

func newCentral(rate float64, burst int64, off int64) (*central, error) {
	l, err := gcra.FromPerSecond(rate, burst)
	if err != nil {
		return nil, err
	}
	return &central{l: l, off: off}, nil
}

// admit decides one unit at t (µs since the start).
func (c *central) admit(t int64) bool {
	ns, r, _ := gcra.DecideMicros(c.s, c.off+t, c.l, 1)
	c.s = ns
	return r.Allowed
}

// try decides cost units at t without keeping the decision: the state to
// keep if it is allowed.
func (c *central) try(t, cost int64) (gcra.State, bool) {
	ns, r, _ := gcra.DecideMicros(c.s, c.off+t, c.l, cost)
	return ns, r.Allowed
}

// Excess is the worst over-admission in windows of one length.
type Excess struct {
	// Window is W.
	Window time.Duration
	// Units is max over windows [t, t+W] of admitted − (B + R·W), floored
	// at 0.
	Units float64
	// At is the start of the worst window (zero when Units is 0).
	At time.Duration
}

// excess measures the worst over-admission over closed windows of length w,
// given admission instants in µs sorted ascending. The worst window can be
// taken to start at an admission, so two pointers over the instants suffice.
func excess(times []int64, w time.Duration, rate float64, burst int64) Excess {
	out := Excess{Window: w}
	wu := w.Microseconds()
	limit := float64(burst) + rate*w.Seconds()
	j := 0
	for i, t := range times {
		if j < i {
			j = i
		}
		for j < len(times) && times[j] <= t+wu {
			j++
		}
		if x := float64(j-i) - limit; x > out.Units {
			out.Units = x
			out.At = time.Duration(t) * time.Microsecond
		}
	}
	return out
}

// overAdmission returns the excess per window in Windows and the worst.
func overAdmission(times []int64, rate float64, burst int64) ([]Excess, Excess) {
	all := make([]Excess, 0, len(Windows))
	var worst Excess
	for _, w := range Windows {
		e := excess(times, w, rate, burst)
		all = append(all, e)
		if e.Units > worst.Units || worst.Window == 0 {
			worst = e
		}
	}
	return all, worst
}

// smooth returns the centred three-sample moving average of xs (two samples
// at the ends), so that a one-second sample's Poisson noise does not decide
// convergence.
func smooth(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i := range xs {
		lo, hi := max(0, i-1), min(len(xs)-1, i+1)
		var s float64
		for k := lo; k <= hi; k++ {
			s += xs[k]
		}
		out[i] = s / float64(hi-lo+1)
	}
	return out
}

// tracking holds the smoothed admitted and ideal series used by the
// convergence and error measures.
type tracking struct {
	at       []time.Duration // start of each sample's second
	world    []float64       // admitted, world
	worldIdl []float64       // min(D, R)
	adm      [][]float64     // [region][sample]
	idl      [][]float64     // [region][sample]: d_i·min(1, R/D)
}

func newTracking(series []Sample, rate float64, regions int) *tracking {
	n := len(series)
	tr := &tracking{at: make([]time.Duration, n)}
	w, wi := make([]float64, n), make([]float64, n)
	adm := make([][]float64, regions)
	idl := make([][]float64, regions)
	for i := range adm {
		adm[i] = make([]float64, n)
		idl[i] = make([]float64, n)
	}
	for k, s := range series {
		tr.at[k] = s.At - time.Second
		w[k] = s.Admitted
		var d float64
		for _, r := range s.Regions {
			d += r.Offered
		}
		scale := 1.0
		if d > rate {
			scale = rate / d
		}
		wi[k] = d * scale
		for i, r := range s.Regions {
			adm[i][k] = r.Admitted
			idl[i][k] = r.Offered * scale
		}
	}
	tr.world, tr.worldIdl = smooth(w), smooth(wi)
	for i := range adm {
		adm[i], idl[i] = smooth(adm[i]), smooth(idl[i])
	}
	tr.adm, tr.idl = adm, idl
	return tr
}

// good reports whether sample k is within tolerance of the ideal split.
func (tr *tracking) good(k int, tol float64) bool {
	if math.Abs(tr.world[k]-tr.worldIdl[k]) > tol {
		return false
	}
	for i := range tr.adm {
		if math.Abs(tr.adm[i][k]-tr.idl[i][k]) > tol {
			return false
		}
	}
	return true
}

// convergence returns, per event, the time from the event to the start of
// the first of ConvergeHold consecutive good samples before the next event
// (or the end of the run), or -1 when there is none.
func (tr *tracking) convergence(events []time.Duration, rate float64) []time.Duration {
	tol := ConvergeTolerance * rate
	out := make([]time.Duration, len(events))
	for e, at := range events {
		end := time.Duration(math.MaxInt64)
		if e+1 < len(events) {
			end = events[e+1]
		}
		out[e] = -1
		run := 0
		for k := range tr.at {
			if tr.at[k] < at || tr.at[k] >= end {
				continue
			}
			if !tr.good(k, tol) {
				run = 0
				continue
			}
			run++
			if run == ConvergeHold {
				out[e] = max(0, tr.at[k-ConvergeHold+1]-at)
				break
			}
		}
	}
	return out
}

// regionError is the mean over regions and steady samples of
// |admitted_i − ideal_i| as a fraction of R. Steady samples start after
// warmup and leave out each event's convergence period (and the second
// before it, which the centred mean already mixes in).
func (tr *tracking) regionError(events, conv []time.Duration, warmup time.Duration, rate float64) float64 {
	var sum float64
	var n int
	for k, at := range tr.at {
		if at < warmup {
			continue
		}
		skip := false
		for e, ev := range events {
			c := conv[e]
			if c < 0 {
				c = unconvergedSkip
			}
			// The centred mean lets an event show one second early.
			if at >= ev-time.Second && at < ev+c {
				skip = true
				break
			}
		}
		if skip {
			continue
		}
		for i := range tr.adm {
			sum += math.Abs(tr.adm[i][k]-tr.idl[i][k]) / rate
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
