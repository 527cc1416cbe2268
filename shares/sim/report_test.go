package sim

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/shares"
)

func fakeResult(seed uint64, admitted, ideal int64, excess float64, conv time.Duration) *Result {
	return &Result{
		Scenario: "x", Mode: shares.ModeRebalanced, Seed: seed, Regions: []string{"a"},
		Rate: 1000, Burst: 200, Duration: 100 * time.Second, Warmup: 10 * time.Second,
		Offered: 2 * ideal, Admitted: admitted, Denied: 2*ideal - admitted, Ideal: ideal,
		Utilisation:      float64(admitted) / float64(ideal),
		Excess:           []Excess{{Window: time.Second, Units: excess}, {Window: 10 * time.Second}},
		OverAdmission:    Excess{Window: time.Second, Units: excess},
		Convergence:      []time.Duration{conv},
		ConvergenceWorst: conv,
		RegionError:      0.01,
		GrantChanges:     30,
		SteadyChanges:    27, // after the warm-up: 18 a minute
		ShiftLoss:        []float64{0.4},
		ShiftLossWorst:   0.4,
		TimeTo90:         []time.Duration{900 * time.Millisecond},
		TimeTo90Worst:    900 * time.Millisecond,
		PeakRateSum:      1000,
		PeakBurstSum:     200,
	}
}

func TestSummarise(t *testing.T) {
	one := Summarise([]*Result{fakeResult(1, 900, 1000, 0, 4*time.Second)})
	if one.Utilisation != 0.9 || one.Worst.Utilisation != 0.9 || *one.ConvergenceS != 4 || one.GrantChangesPerMin != 18 || one.WritesPerMin != 18 || one.DenyPct != 55 {
		t.Errorf("Summarise(one run) = %+v", one)
	}
	if one.ShiftLossS != 0.4 || one.TimeTo90S == nil || *one.TimeTo90S != 0.9 || one.NoEvents {
		t.Errorf("Summarise(one run): shift loss %v, time to 90%% %v, no events %v; want 0.4, 0.9, false", one.ShiftLossS, one.TimeTo90S, one.NoEvents)
	}
	two := Summarise([]*Result{
		fakeResult(1, 900, 1000, 0, 4*time.Second),
		fakeResult(2, 1000, 1000, 50, 8*time.Second),
	})
	if two.Seeds != 2 || two.Seed != 1 || two.Utilisation != 0.95 || two.Worst.Utilisation != 0.9 {
		t.Errorf("utilisation mean %v worst %v, want 0.95 and 0.9", two.Utilisation, two.Worst.Utilisation)
	}
	if two.OverAdmission != 25 || two.Worst.OverAdmission != 50 || two.Worst.PeakExcessPct != 5 {
		t.Errorf("over-admission mean %v worst %v (peak %v%%), want 25, 50, 5%%", two.OverAdmission, two.Worst.OverAdmission, two.Worst.PeakExcessPct)
	}
	if *two.ConvergenceS != 6 || *two.Worst.ConvergenceS != 8 {
		t.Errorf("convergence mean %v worst %v, want 6 and 8", *two.ConvergenceS, *two.Worst.ConvergenceS)
	}
	never := Summarise([]*Result{fakeResult(1, 900, 1000, 0, 4*time.Second), fakeResult(2, 900, 1000, 0, -1)})
	if never.ConvergenceS != nil || never.Worst.ConvergenceS != nil {
		t.Errorf("a seed that never converged: convergence %v / %v, want null", never.ConvergenceS, never.Worst.ConvergenceS)
	}

	var js bytes.Buffer
	if err := WriteJSON(&js, []Row{two, never}); err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back) != 2 {
		t.Fatalf("WriteJSON wrote %s (%v)", js.String(), err)
	}
	if back[1]["convergence_s"] != nil || back[0]["convergence_s"] != 6.0 {
		t.Errorf("convergence_s = %v, %v; want 6 and null", back[0]["convergence_s"], back[1]["convergence_s"])
	}
	var tab, md bytes.Buffer
	if err := WriteTable(&tab, []Row{two, never}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tab.String(), "95.0% / 90.0%") || !strings.Contains(tab.String(), "never") {
		t.Errorf("table:\n%s", tab.String())
	}
	if err := WriteMarkdown(&md, []Row{two}, "# t"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(md.String(), "# t\n\n| SCENARIO |") || !strings.Contains(md.String(), "| x | rebalanced |") {
		t.Errorf("markdown:\n%s", md.String())
	}
}

func TestWritePlot(t *testing.T) {
	s := pinned()
	s.Duration = 20 * time.Second
	var runs []*Result
	for _, m := range s.Modes {
		runs = append(runs, run(t, s, m, 1))
	}
	for format, magic := range map[string]string{PNG: "\x89PNG", SVG: "<svg"} {
		var b bytes.Buffer
		if err := WritePlot(&b, format, s, runs); err != nil {
			t.Fatalf("WritePlot(%s): %v", format, err)
		}
		if !strings.Contains(b.String()[:min(b.Len(), 512)], magic) || b.Len() < 10_000 {
			t.Errorf("WritePlot(%s) wrote %d bytes not starting with %q", format, b.Len(), magic)
		}
	}
	if err := WritePlot(&bytes.Buffer{}, "gif", s, runs); err == nil {
		t.Error("WritePlot(gif) succeeded")
	}
}
