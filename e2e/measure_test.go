package e2e

import (
	"math"
	"slices"
	"time"

	"github.com/allot-dev/allot/gcra"
)

// Measures, defined as the simulator defines them (shares/sim) so that the
// two can be set side by side.

// windows are the window lengths W of the over-admission check.
var windows = []time.Duration{time.Second, 10 * time.Second, 60 * time.Second}

// convergence tolerances, as in the simulator.
const (
	convergeTolerance = 0.05 // of R
	convergeHold      = 5    // consecutive one-second samples
)

// excess is the worst over-admission in windows of one length.
type excess struct {
	window time.Duration
	// units is max over windows [a, a+W] of admitted − (B + R·W), floored
	// at 0, counting only the admissions certainly decided inside: sent at
	// or after a, answered by a+W.
	units float64
	at    time.Duration
}

// overAdmission measures the excess for every W in windows over admitted
// calls (send, recv), with budget (R, B).
func overAdmission(adm []call, rate float64, burst int64) []excess {
	return overAdmissionBy(adm, func(_, w time.Duration) float64 { return float64(burst) + rate*w.Seconds() })
}

// overAdmissionBy is overAdmission under a budget that changes: limit(a, w)
// is what the window [a, a+w] may admit.
func overAdmissionBy(adm []call, limit func(a, w time.Duration) float64) []excess {
	adm = slices.Clone(adm)
	slices.SortFunc(adm, func(a, b call) int { return cmpDur(a.send, b.send) })
	var maxLat time.Duration
	for _, c := range adm {
		maxLat = max(maxLat, c.recv-c.send)
	}
	var out []excess
	for _, w := range windows {
		e := excess{window: w}
		j := 0
		for i, c := range adm {
			a, end := c.send, c.send+w
			if j < i {
				j = i
			}
			for j < len(adm) && adm[j].send <= end {
				j++
			}
			// adm[i:j] were sent inside; drop those answered after end
			// (only the last maxLat of sends can be).
			n := j - i
			for k := j - 1; k >= i && adm[k].send > end-maxLat; k-- {
				if adm[k].recv > end {
					n--
				}
			}
			if x := float64(n) - limit(a, w); x > e.units {
				e.units, e.at = x, a
			}
		}
		out = append(out, e)
	}
	return out
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// idealAdmits runs one central GCRA (R, B) over every arrival (send
// instants, in order) and returns the instants it admits: what one global
// limiter would have admitted of the same offered load.
func idealAdmits(sends []time.Duration, rate float64, burst int64) ([]time.Duration, error) {
	l, err := gcra.FromPerSecond(rate, burst)
	if err != nil {
		return nil, err
	}
	sends = slices.Clone(sends)
	slices.Sort(sends)
	// Any fixed offset keeps microseconds positive and well inside range.
	const off = int64(1_700_000_000_000_000)
	var s gcra.State
	var out []time.Duration
	for _, t := range sends {
		ns, r, _ := gcra.DecideMicros(s, off+t.Microseconds(), l, 1)
		s = ns
		if r.Allowed {
			out = append(out, t)
		}
	}
	return out, nil
}

// second is one second of a run (by send instant), starting at At.
type second struct {
	At                time.Duration
	Offered, Admitted float64
	Ideal             float64
	RegionOffered     []float64
	RegionAdmitted    []float64
	RegionFallback    []float64 // fallback decisions
	RegionFallbackAdm []float64 // fallback decisions that admitted
	RegionFailed      []float64 // failed calls
	RegionShare       []float64 // offered_i · min(1, R/D)
}

// perSecond buckets calls of the measured streams (index → region index)
// and the ideal admissions into seconds [0, n).
func perSecond(calls []call, regionOf map[int]int, regions int, ideal []time.Duration, rate float64, n int) []second {
	out := make([]second, n)
	for k := range out {
		out[k] = second{
			At:                time.Duration(k) * time.Second,
			RegionOffered:     make([]float64, regions),
			RegionAdmitted:    make([]float64, regions),
			RegionFallback:    make([]float64, regions),
			RegionFailed:      make([]float64, regions),
			RegionFallbackAdm: make([]float64, regions),
			RegionShare:       make([]float64, regions),
		}
	}
	for _, c := range calls {
		ri, ok := regionOf[c.stream]
		k := int(c.send / time.Second)
		if !ok || k < 0 || k >= n {
			continue
		}
		s := &out[k]
		s.Offered++
		s.RegionOffered[ri]++
		switch {
		case c.failed:
			s.RegionFailed[ri]++
		case c.allowed:
			s.Admitted++
			s.RegionAdmitted[ri]++
		}
		if c.fallback {
			s.RegionFallback[ri]++
			if c.allowed {
				s.RegionFallbackAdm[ri]++
			}
		}
	}
	for _, t := range ideal {
		if k := int(t / time.Second); k >= 0 && k < n {
			out[k].Ideal++
		}
	}
	for k := range out {
		scale := 1.0
		if out[k].Offered > rate {
			scale = rate / out[k].Offered
		}
		for i := range regions {
			out[k].RegionShare[i] = out[k].RegionOffered[i] * scale
		}
	}
	return out
}

// smooth is the centred three-sample mean (two at the ends).
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

// convergence returns the time from each event to the start of the first
// run of convergeHold seconds, before the next event (or until), in which
// the world's and every region's admitted rate (3-s centred means) are
// within convergeTolerance·R of the ideal split; -1 when there is none.
func convergence(series []second, events []time.Duration, until time.Duration, rate float64) []time.Duration {
	n := len(series)
	if n == 0 {
		return nil
	}
	regions := len(series[0].RegionOffered)
	col := func(f func(second) float64) []float64 {
		xs := make([]float64, n)
		for k, s := range series {
			xs[k] = f(s)
		}
		return smooth(xs)
	}
	world := col(func(s second) float64 { return s.Admitted })
	worldIdl := col(func(s second) float64 { return math.Min(s.Offered, rate) })
	adm := make([][]float64, regions)
	idl := make([][]float64, regions)
	for i := range regions {
		adm[i] = col(func(s second) float64 { return s.RegionAdmitted[i] })
		idl[i] = col(func(s second) float64 { return s.RegionShare[i] })
	}
	tol := convergeTolerance * rate
	good := func(k int) bool {
		if math.Abs(world[k]-worldIdl[k]) > tol {
			return false
		}
		for i := range regions {
			if math.Abs(adm[i][k]-idl[i][k]) > tol {
				return false
			}
		}
		return true
	}
	out := make([]time.Duration, len(events))
	for e, at := range events {
		end := until
		if e+1 < len(events) {
			end = events[e+1]
		}
		out[e] = -1
		run := 0
		for k := range series {
			t := series[k].At
			// The last sample may be a partial second.
			if t < at || t >= end || k == n-1 {
				continue
			}
			if !good(k) {
				run = 0
				continue
			}
			run++
			if run == convergeHold {
				out[e] = max(0, series[k-convergeHold+1].At-at)
				break
			}
		}
	}
	return out
}

// totals sums a window [from, to) of seconds.
type totals struct {
	Offered, Admitted, Ideal float64
	Region                   []float64 // admitted per region
	RegionOffered            []float64
	RegionFallback           []float64
	RegionFallbackAdm        []float64
	RegionFailed             []float64
}

func sum(series []second, from, to time.Duration) totals {
	var t totals
	for _, s := range series {
		if s.At < from || s.At >= to {
			continue
		}
		if t.Region == nil {
			r := len(s.RegionAdmitted)
			t.Region, t.RegionOffered = make([]float64, r), make([]float64, r)
			t.RegionFallback, t.RegionFailed = make([]float64, r), make([]float64, r)
			t.RegionFallbackAdm = make([]float64, r)
		}
		t.Offered += s.Offered
		t.Admitted += s.Admitted
		t.Ideal += s.Ideal
		for i := range s.RegionAdmitted {
			t.Region[i] += s.RegionAdmitted[i]
			t.RegionOffered[i] += s.RegionOffered[i]
			t.RegionFallback[i] += s.RegionFallback[i]
			t.RegionFallbackAdm[i] += s.RegionFallbackAdm[i]
			t.RegionFailed[i] += s.RegionFailed[i]
		}
	}
	return t
}
