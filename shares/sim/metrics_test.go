package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// maxInWindow is the brute-force count of the fullest closed window of
// length w.
func maxInWindow(times []int64, w time.Duration) int {
	best := 0
	for i := range times {
		n := 0
		for j := i; j < len(times) && times[j] <= times[i]+w.Microseconds(); j++ {
			n++
		}
		best = max(best, n)
	}
	return best
}

func TestCentralMatchesGCRABound(t *testing.T) {
	// A greedy client (an arrival every 100 µs, ten times R) against one
	// central limiter with R = 1000/s, B = 200: it admits exactly the GCRA
	// bound B + R·W in the fullest window, and never more.
	c, err := newCentral(1000, 200, epoch.UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	var admitted []int64
	for at := int64(0); at < 12_000_000; at += 100 {
		if c.admit(at) {
			admitted = append(admitted, at)
		}
	}
	for _, w := range Windows[:2] {
		want := 200 + int(1000*w.Seconds())
		if got := maxInWindow(admitted, w); got != want {
			t.Errorf("fullest %v window holds %d admissions, want B + R·W = %d", w, got, want)
		}
	}
	if all, worst := overAdmission(admitted, 1000, 200); worst.Units != 0 {
		t.Errorf("overAdmission(central limiter) = %+v (all %+v), want 0", worst, all)
	}
	// 12 s at R from a full bucket: B + R·t (the last admission lands
	// before 12 s, hence the slack of one).
	if n := len(admitted); n < 200+11_999 || n > 200+12_000 {
		t.Errorf("central admitted %d in 12s, want B + R·t = %d", n, 200+12_000)
	}
}

func TestExcess(t *testing.T) {
	evenly := func(n int, over time.Duration) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(i) * over.Microseconds() / int64(n)
		}
		return out
	}
	compliant := make([]int64, 200) // B at once, then one every T
	for i := int64(1); i <= 5000; i++ {
		compliant = append(compliant, i*1000)
	}
	cases := []struct {
		name  string
		times []int64
		w     time.Duration
		want  float64
	}{
		{"empty", nil, time.Second, 0},
		{"compliant 1s", compliant, time.Second, 0},
		{"compliant 10s", compliant, 10 * time.Second, 0},
		{"1.5R for a second", evenly(1500, time.Second), time.Second, 300},
		{"1.5R for a second, 10s window", evenly(1500, time.Second), 10 * time.Second, 0},
		{"2R for 20s, 10s window", evenly(40_000, 20*time.Second), 10 * time.Second, 20_000 - 10_200 + 1},
		{"burst of 500", make([]int64, 500), time.Second, 500 - 1200},
	}
	for _, c := range cases {
		want := max(c.want, 0)
		if got := excess(c.times, c.w, 1000, 200); got.Units != want {
			t.Errorf("%s: excess(W=%v).Units = %v, want %v", c.name, c.w, got.Units, want)
		}
	}
}

func FuzzExcess(f *testing.F) {
	f.Add(uint64(1), uint16(100), uint32(2_000_000), uint16(50), uint8(1))
	f.Add(uint64(9), uint16(900), uint32(500_000), uint16(10), uint8(3))
	f.Fuzz(func(t *testing.T, seed uint64, n uint16, span uint32, rate uint16, burst uint8) {
		rng := rand.New(rand.NewPCG(seed, 0))
		times := make([]int64, int(n)%2000)
		for i := range times {
			times[i] = rng.Int64N(int64(span) + 1)
		}
		slices.Sort(times)
		r, b := float64(rate%5000)+1, int64(burst)+1
		for _, w := range []time.Duration{time.Millisecond, 100 * time.Millisecond, time.Second} {
			got := excess(times, w, r, b)
			want := max(0, float64(maxInWindow(times, w))-(float64(b)+r*w.Seconds()))
			if got.Units != want {
				t.Fatalf("excess(W=%v) = %v, brute force %v", w, got.Units, want)
			}
		}
	})
}

func TestConvergence(t *testing.T) {
	// Ideal: one region offers 2R, the other nothing → ideal split (R, 0).
	// Admitted reaches R after `lag` seconds of 0.5R.
	mk := func(lag int, n int, dip int) []Sample {
		var out []Sample
		for k := range n {
			adm := 1000.0
			if k >= 20 && k < 20+lag {
				adm = 500
			}
			if dip > 0 && k == dip {
				adm = 0
			}
			out = append(out, Sample{
				At:       time.Duration(k+1) * time.Second,
				Admitted: adm,
				Regions:  []RegionSample{{Offered: 2000, Admitted: adm}, {}},
			})
		}
		return out
	}
	cases := []struct {
		name   string
		series []Sample
		events []time.Duration
		want   []time.Duration
	}{
		{"immediate", mk(0, 60, 0), []time.Duration{20 * time.Second}, []time.Duration{0}},
		// The centred mean makes a lag of L seconds read as L+1.
		{"lag 6", mk(6, 60, 0), []time.Duration{20 * time.Second}, []time.Duration{7 * time.Second}},
		{"never", mk(60, 60, 0), []time.Duration{20 * time.Second}, []time.Duration{-1}},
		{"dip restarts the hold", mk(0, 60, 23), []time.Duration{20 * time.Second}, []time.Duration{5 * time.Second}},
		{"two events", mk(6, 60, 0), []time.Duration{0, 20 * time.Second}, []time.Duration{0, 7 * time.Second}},
	}
	for _, c := range cases {
		tr := newTracking(c.series, 1000, 2)
		got := tr.convergence(c.events, 1000)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: convergence = %v, want %v", c.name, got, c.want)
		}
	}
	// Region error: after convergence the error is zero; in the lagging
	// stretch each region is off by 0.5R (region 0) and 0 (region 1).
	tr := newTracking(mk(6, 60, 0), 1000, 2)
	if e := tr.regionError([]time.Duration{20 * time.Second}, []time.Duration{7 * time.Second}, 0, 1000); e != 0 {
		t.Errorf("regionError after convergence = %v, want 0", e)
	}
	if e := tr.regionError(nil, nil, 0, 1000); e <= 0 {
		t.Errorf("regionError with the lag included = %v, want > 0", e)
	}
}
