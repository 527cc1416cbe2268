package sim

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// count drains a generator over [0, end) and returns the arrivals per
// [from, to) bucket of the given edges.
func countArrivals(t *testing.T, tr Traffic, end time.Duration, seed uint64, edges ...time.Duration) []int {
	t.Helper()
	g := newGenerator(tr, rand.New(rand.NewPCG(seed, 1)))
	counts := make([]int, len(edges)-1)
	last := int64(-1)
	for {
		at, ok := g.next(end.Microseconds())
		if !ok {
			break
		}
		if at < last {
			t.Fatalf("arrival at %dµs after one at %dµs: not in order", at, last)
		}
		last = at
		d := time.Duration(at) * time.Microsecond
		for k := 0; k+1 < len(edges); k++ {
			if d >= edges[k] && d < edges[k+1] {
				counts[k]++
			}
		}
	}
	return counts
}

func TestGeneratorRates(t *testing.T) {
	s := time.Second
	cases := []struct {
		name  string
		tr    Traffic
		end   time.Duration
		edges []time.Duration
		want  []float64 // expected arrivals per bucket
		tol   float64   // allowed relative error per bucket
	}{
		{"constant poisson", Traffic{Profile: Constant(500)}, 100 * s,
			[]time.Duration{0, 100 * s}, []float64{50_000}, 0.02},
		{"constant even", Traffic{Profile: Constant(500), Process: Even, Jitter: 0.3}, 100 * s,
			[]time.Duration{0, 100 * s}, []float64{50_000}, 0.002},
		{"step", Traffic{Profile: Step(200, 800, 50*s)}, 100 * s,
			[]time.Duration{0, 50 * s, 100 * s}, []float64{10_000, 40_000}, 0.04},
		{"ramp", Traffic{Profile: Ramp(0, 1000, 0, 100*s), Process: Even}, 100 * s,
			[]time.Duration{0, 50 * s, 100 * s}, []float64{12_500, 37_500}, 0.01},
		{"on/off", Traffic{Profile: OnOff(1000, s, s, 0), Process: Even}, 10 * s,
			[]time.Duration{0, s, 2 * s, 3 * s, 4 * s}, []float64{1000, 0, 1000, 0}, 0.01},
		{"on/off phase", Traffic{Profile: OnOff(1000, s, 3*s, 2*s), Process: Even}, 10 * s,
			[]time.Duration{0, 2 * s, 3 * s, 6 * s, 7 * s}, []float64{0, 1000, 0, 1000}, 0.01},
		{"diurnal", Traffic{Profile: Diurnal(400, 300, 100*s, 0), Process: Even}, 100 * s,
			[]time.Duration{0, 50 * s, 100 * s}, []float64{20_000 + 300*100/math.Pi, 20_000 - 300*100/math.Pi}, 0.01},
		{"flash crowd", Traffic{Profile: FlashCrowd(100, 900, 10*s, 0, 5*s), Process: Even}, 20 * s,
			[]time.Duration{0, 10 * s, 15 * s, 20 * s}, []float64{1000, 5000, 500}, 0.01},
		{"sum", Traffic{Profile: Sum(Constant(100), Constant(200)), Process: Even}, 10 * s,
			[]time.Duration{0, 10 * s}, []float64{3000}, 0.01},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := countArrivals(t, c.tr, c.end, 1, c.edges...)
			for k, w := range c.want {
				if w == 0 {
					if got[k] != 0 {
						t.Errorf("bucket [%v, %v): %d arrivals, want none", c.edges[k], c.edges[k+1], got[k])
					}
					continue
				}
				if e := math.Abs(float64(got[k])-w) / w; e > c.tol {
					t.Errorf("bucket [%v, %v): %d arrivals, want %.0f ± %.1f%%", c.edges[k], c.edges[k+1], got[k], w, 100*c.tol)
				}
			}
		})
	}
}

func TestGeneratorPoissonGaps(t *testing.T) {
	// Poisson gaps have a coefficient of variation of 1; even ones with
	// jitter j have j/√3.
	for _, c := range []struct {
		tr     Traffic
		cv, ok float64
	}{
		{Traffic{Profile: Constant(1000)}, 1, 0.05},
		{Traffic{Profile: Constant(1000), Process: Even, Jitter: 0.6}, 0.6 / math.Sqrt(3), 0.03},
		{Traffic{Profile: Constant(1000), Process: Even}, 0, 0.01},
	} {
		g := newGenerator(c.tr, rand.New(rand.NewPCG(3, 1)))
		var gaps []float64
		prev := int64(0)
		for {
			at, ok := g.next(20_000_000)
			if !ok {
				break
			}
			gaps = append(gaps, float64(at-prev))
			prev = at
		}
		var mean, sq float64
		for _, x := range gaps {
			mean += x
		}
		mean /= float64(len(gaps))
		for _, x := range gaps {
			sq += (x - mean) * (x - mean)
		}
		cv := math.Sqrt(sq/float64(len(gaps))) / mean
		if math.Abs(cv-c.cv) > c.ok {
			t.Errorf("%v jitter %v: gap CV = %.3f, want %.3f ± %.2f", c.tr.Process, c.tr.Jitter, cv, c.cv, c.ok)
		}
		if math.Abs(mean-1000) > 20 {
			t.Errorf("%v: mean gap %.1fµs, want 1000µs", c.tr.Process, mean)
		}
	}
}

func TestRetryBackoff(t *testing.T) {
	r := &Retry{Attempts: 5, Base: 100 * time.Millisecond, Max: time.Second, HonourRetryAfter: true}
	rng := rand.New(rand.NewPCG(1, 1))
	cases := []struct {
		k          int
		retryAfter time.Duration
		want       time.Duration
	}{
		{0, 0, 100 * time.Millisecond},
		{1, 0, 200 * time.Millisecond},
		{3, 0, 800 * time.Millisecond},
		{4, 0, time.Second},
		{40, 0, time.Second},
		{0, 3 * time.Second, 3 * time.Second},
	}
	for _, c := range cases {
		if got := r.backoff(c.k, c.retryAfter, rng); got != c.want {
			t.Errorf("backoff(%d, %v) = %v, want %v", c.k, c.retryAfter, got, c.want)
		}
	}
	r.Jitter = 0.5
	for range 1000 {
		if got := r.backoff(0, 0, rng); got < 50*time.Millisecond || got > 150*time.Millisecond {
			t.Fatalf("backoff with ±50%% jitter = %v, want within [50ms, 150ms]", got)
		}
	}
}
