package e2e

import (
	"math"
	"testing"
	"time"
)

// The event measures, as the simulator defines them (shares/sim, shift.go):
// after each event, the shift loss (what one central limiter admitted and
// the run did not, in the ShiftWindow after it, in seconds of R) and the
// time until the region furthest below its fair share admits 90% of it over
// a trailing to90Window, at fineStep resolution.
const (
	fineStep    = 100 * time.Millisecond
	shiftWindow = 30 * time.Second
	to90Window  = 300 * time.Millisecond
	to90Deficit = 0.05 // of R: a smaller shortfall needs no catching up
)

// eventMeasure is one event's shift loss and time to 90% (-1: never; 0:
// no region fell short).
type eventMeasure struct {
	at   time.Duration
	loss float64 // seconds of R
	to90 time.Duration
}

// eventMeasures measures every event after the start. calls are counted by
// send instant; ideal are the central limiter's admissions; demand gives
// each region's offered rate (its fair share is that, scaled by
// min(1, R/Σ offered)).
func eventMeasures(calls []call, regionOf map[int]int, regions []string, demand map[string]func(time.Duration) float64,
	ideal []time.Duration, events []time.Duration, rate float64, dur time.Duration) []eventMeasure {
	n := int(dur/fineStep) + 1
	idl, adm := make([]float64, n), make([]float64, n)
	reg := make([][]float64, len(regions))
	for i := range reg {
		reg[i] = make([]float64, n)
	}
	for _, c := range calls {
		ri, ok := regionOf[c.stream]
		b := int(c.send / fineStep)
		if !ok || !c.allowed || b < 0 || b >= n {
			continue
		}
		adm[b]++
		reg[ri][b]++
	}
	for _, t := range ideal {
		if b := int(t / fineStep); b >= 0 && b < n {
			idl[b]++
		}
	}
	fair := func(i int, t time.Duration) float64 {
		var total, mine float64
		for j, r := range regions {
			d, ok := demand[r]
			if !ok {
				continue
			}
			v := d(t)
			total += v
			if j == i {
				mine = v
			}
		}
		if total > rate {
			return mine * rate / total
		}
		return mine
	}
	var out []eventMeasure
	for _, e := range events {
		if e <= 0 {
			continue
		}
		b0 := int(e / fineStep)
		b1 := min(n, int((e+shiftWindow)/fineStep))
		var lost float64
		for b := b0; b < b1; b++ {
			lost += idl[b] - adm[b]
		}
		m := eventMeasure{at: e, loss: max(0, lost) / rate}
		target, deficit := -1, to90Deficit*rate
		for i := range regions {
			var before float64
			for b := max(0, b0-int(time.Second/fineStep)); b < b0; b++ {
				before += reg[i][b]
			}
			if d := fair(i, e+5*time.Second) - before; d > deficit {
				target, deficit = i, d
			}
		}
		if target >= 0 {
			m.to90 = -1
			win := int(to90Window / fineStep)
			for b := b0 + 1; b <= b1; b++ {
				var got, want float64
				for k := max(b0, b-win); k < b; k++ {
					got += reg[target][k]
					want += fair(target, time.Duration(k)*fineStep+fineStep/2) * fineStep.Seconds()
				}
				if want > 0 && got >= 0.9*want {
					m.to90 = time.Duration(b-b0) * fineStep
					break
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// eventMeasures on hand-made calls: one region offered R, admitting nothing
// from 1 s before the event to half a second after it, then everything.
func TestEventMeasuresByHand(t *testing.T) {
	const rate = 1000.0
	var calls []call
	var ideal []time.Duration
	for k := range 40_000 { // 40 s at 1000/s
		at := time.Duration(k) * time.Millisecond
		ideal = append(ideal, at)
		allowed := at < 9*time.Second || at >= 10500*time.Millisecond
		calls = append(calls, call{stream: 0, send: at, recv: at, allowed: allowed})
	}
	demand := map[string]func(time.Duration) float64{"r": func(time.Duration) float64 { return rate }}
	got := eventMeasures(calls, map[int]int{0: 0}, []string{"r"}, demand, ideal, []time.Duration{0, 10 * time.Second}, rate, 40*time.Second)
	if len(got) != 1 {
		t.Fatalf("measures %+v, want one (the start is not an event)", got)
	}
	if m := got[0]; math.Abs(m.loss-0.5) > 1e-9 || m.to90 != 800*time.Millisecond {
		t.Fatalf("shift loss %.3f s, time to 90%% %v; want 0.5 s (half a second of R unadmitted) and 800 ms (300 ms window after 500 ms)", m.loss, m.to90)
	}
}
