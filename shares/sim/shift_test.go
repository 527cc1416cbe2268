package sim

import (
	"math"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

// The event measures on counts made by hand: a world that admits half the
// ideal for one second after the shift lost half a second of R, and a region
// that reaches its new fair share half a second after the shift gets there
// (over the 300 ms window) 0.8 s after it.
func TestEventMeasures(t *testing.T) {
	s := skewShift()
	w, err := newWorld(s, shares.ModeRebalanced, 1)
	if err != nil {
		t.Fatal(err)
	}
	per := fineStep.Seconds()
	n := bucketOf(w.end)
	e := bucketOf(shiftAt.Microseconds())
	w.fine.ideal = make([]float64, n)
	w.fine.admit = make([]float64, n)
	for i := range w.fine.region {
		w.fine.region[i] = make([]float64, n)
	}
	ap := 2 // ap-south
	for b := range n {
		w.fine.ideal[b] = RefRate * per
		w.fine.admit[b] = RefRate * per
		if b >= e && b < e+int(time.Second/fineStep) {
			w.fine.admit[b] = RefRate * per / 2
		}
		w.fine.region[ap][b] = 100 * per // its share before the shift
		if b >= e+5 {
			w.fine.region[ap][b] = 700 * per // its share after
		}
	}
	w.res.Events = s.Events
	w.eventMeasures()
	if len(w.res.ShiftLoss) != 1 || math.Abs(w.res.ShiftLoss[0]-0.5) > 1e-9 {
		t.Errorf("shift loss %v, want [0.5] (seconds of R)", w.res.ShiftLoss)
	}
	if len(w.res.TimeTo90) != 1 || w.res.TimeTo90[0] != 800*time.Millisecond || w.res.TimeTo90Worst != 800*time.Millisecond {
		t.Errorf("time to 90%% %v (worst %v), want [800ms]", w.res.TimeTo90, w.res.TimeTo90Worst)
	}

	// A region that never gets there: never (-1).
	for b := e; b < n; b++ {
		w.fine.region[ap][b] = 100 * per
	}
	w.res.ShiftLoss, w.res.TimeTo90 = nil, nil
	w.eventMeasures()
	if w.res.TimeTo90[0] != -1 || w.res.TimeTo90Worst != -1 {
		t.Errorf("time to 90%% %v (worst %v), want [-1] (never)", w.res.TimeTo90, w.res.TimeTo90Worst)
	}
}
