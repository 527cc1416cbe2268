package sim

import "time"

// Resolution and span of the event measures (Result.ShiftLoss, TimeTo90).
const (
	// fineStep is the bucket of the fine admission counts.
	fineStep = 100 * time.Millisecond
	// ShiftWindow is how long after an event its shift loss is counted.
	ShiftWindow = 30 * time.Second
	// to90Window is the trailing window over which a region's admitted
	// rate is compared with its fair share for TimeTo90.
	to90Window = 300 * time.Millisecond
	// to90Deficit is the smallest shortfall, as a fraction of R, of a
	// region's admitted rate against its fair share after an event that
	// TimeTo90 measures: a smaller one needs no catching up.
	to90Deficit = 0.05
)

// fine counts admissions in fineStep buckets: the world's ideal (one central
// limiter) and admitted units, and each region's admitted units.
type fine struct {
	ideal, admit []float64
	region       [][]float64
}

func bump(s *[]float64, b int) {
	for len(*s) <= b {
		*s = append(*s, 0)
	}
	(*s)[b]++
}

func bucketOf(t int64) int { return int(t / fineStep.Microseconds()) }

func at(s []float64, b int) float64 {
	if b < 0 || b >= len(s) {
		return 0
	}
	return s[b]
}

// fairShare is region i's share of one central limiter at t: its offered
// rate by its traffic profile, scaled by min(1, R/Σ offered).
func (w *world) fairShare(i int, t time.Duration) float64 {
	var total float64
	mine := 0.0
	for j, rs := range w.regions {
		tr, ok := w.spec.Traffic[rs.name]
		if !ok {
			continue
		}
		v := tr.Profile(t)
		total += v
		if j == i {
			mine = v
		}
	}
	if total > w.budget.Rate {
		return mine * w.budget.Rate / total
	}
	return mine
}

// eventMeasures fills ShiftLoss and TimeTo90 for every event of the spec
// (none for a scenario without events: its start is a cold start, which the
// warm-up leaves out).
func (w *world) eventMeasures() {
	r := w.res
	step := fineStep.Seconds()
	endB := bucketOf(w.end)
	r.ShiftLossWorst, r.TimeTo90Worst = 0, 0
	for _, e := range w.spec.Events {
		// Shift loss: what the central limiter admitted and allot did
		// not, over the window after e, in seconds of R.
		b0 := bucketOf(e.Microseconds())
		b1 := min(endB, bucketOf((e + ShiftWindow).Microseconds()))
		var lost float64
		for b := b0; b < b1; b++ {
			lost += at(w.fine.ideal, b) - at(w.fine.admit, b)
		}
		loss := max(0, lost) / w.budget.Rate
		r.ShiftLoss = append(r.ShiftLoss, loss)
		r.ShiftLossWorst = max(r.ShiftLossWorst, loss)

		// Time to 90 %: the region furthest below its fair share after
		// e (by its admissions in the second before e), until its
		// admitted rate over to90Window first reaches 90 % of it.
		target, deficit := -1, to90Deficit*w.budget.Rate
		for i := range w.regions {
			var before float64
			for b := b0 - int(time.Second/fineStep); b < b0; b++ {
				before += at(w.fine.region[i], b)
			}
			if d := w.fairShare(i, e+5*time.Second) - before; d > deficit {
				target, deficit = i, d
			}
		}
		if target < 0 {
			r.TimeTo90 = append(r.TimeTo90, 0)
			continue
		}
		win := int(to90Window / fineStep)
		got := time.Duration(-1)
		for b := b0 + 1; b <= b1; b++ {
			var adm, want float64
			for k := max(b0, b-win); k < b; k++ {
				adm += at(w.fine.region[target], k)
				mid := time.Duration(k)*fineStep + fineStep/2
				want += w.fairShare(target, mid) * step
			}
			if want > 0 && adm >= 0.9*want {
				got = time.Duration(b-b0) * fineStep
				break
			}
		}
		r.TimeTo90 = append(r.TimeTo90, got)
		if got < 0 || r.TimeTo90Worst < 0 {
			r.TimeTo90Worst = -1
		} else {
			r.TimeTo90Worst = max(r.TimeTo90Worst, got)
		}
	}
}
