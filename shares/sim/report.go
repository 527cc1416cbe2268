package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/allot-dev/allot/shares"
)

// Row is the summary of one (scenario, mode) over one or more seeds: the
// mean over seeds, and in Worst each measure at its worst seed. It is what
// `allot sim --format json` prints, one per (scenario, mode).
type Row struct {
	Scenario string      `json:"scenario"`
	Mode     shares.Mode `json:"mode"`
	// Seeds is how many seeds were run; Seed the first.
	Seeds int    `json:"seeds"`
	Seed  uint64 `json:"seed"`

	// Rate and Burst are R and B; DurationS the simulated seconds and
	// WarmupS the leading seconds left out of the counts below.
	Rate      float64 `json:"rate"`
	Burst     int64   `json:"burst"`
	DurationS float64 `json:"duration_s"`
	WarmupS   float64 `json:"warmup_s"`

	// Offered, Admitted, Ideal: units after the warm-up (mean over seeds).
	Offered  float64 `json:"offered"`
	Admitted float64 `json:"admitted"`
	Ideal    float64 `json:"ideal"`
	// Utilisation is Admitted/Ideal (a fraction; above 1 over-admits).
	Utilisation float64 `json:"utilisation"`
	// DenyPct is the percentage of offered units denied.
	DenyPct float64 `json:"deny_pct"`

	// OverAdmission is max over W in {1, 10, 60 s} and windows of length
	// W of admitted − (B + R·W), floored at 0, in units.
	OverAdmission float64 `json:"over_admission"`
	// OverAdmissionPct is OverAdmission as a percentage of R·t (t the run).
	OverAdmissionPct float64 `json:"over_admission_pct"`
	// PeakExcessPct is the worst window's excess as a percentage of R·W.
	PeakExcessPct float64 `json:"peak_excess_pct"`

	// ConvergenceS is the worst time to converge after an event, in
	// seconds; null when some event never converged.
	ConvergenceS *float64 `json:"convergence_s"`
	// RegionErrorPct is the mean |admitted_i − R·d_i/D| in % of R.
	RegionErrorPct float64 `json:"region_error_pct"`

	// GrantChanges is the grant changes the leaders made per run;
	// GrantChangesPerMin those after the warm-up per simulated minute
	// after it. They travel to pods in
	// report answers (nothing is written to etcd).
	GrantChanges       float64 `json:"grant_changes"`
	GrantChangesPerMin float64 `json:"grant_changes_per_min"`
	// EntriesSent is the grants the answers carried per run (each change
	// once per pod of its region, all of them in a full sync).
	EntriesSent float64 `json:"entries_sent"`
	// Writes and WritesPerMin repeat GrantChanges and GrantChangesPerMin
	// under their protocol v1 names (when every change was an etcd write).
	//
	// Deprecated: use GrantChanges and GrantChangesPerMin.
	Writes       float64 `json:"writes"`
	WritesPerMin float64 `json:"writes_per_min"`

	// PeakRateSum and PeakBurstSum are the largest sums over regions of
	// the enforced rate and burst at one instant (I4: ≤ R, ≤ B).
	PeakRateSum  float64 `json:"peak_rate_sum"`
	PeakBurstSum int64   `json:"peak_burst_sum"`
	// LostReports is the mean count of reports lost.
	LostReports float64 `json:"lost_reports"`

	// ShiftLossS is the worst event's shift loss (Result.ShiftLossWorst),
	// in seconds of R, mean over seeds; TimeTo90S the worst event's time
	// until the region furthest below its fair share reached 90% of it,
	// in seconds, mean over seeds (null if some event never did).
	ShiftLossS float64  `json:"shift_loss_s"`
	TimeTo90S  *float64 `json:"time_to_90_s"`
	// NoEvents: the scenario has no event, so no shift loss or time to
	// 90% (both read "—").
	NoEvents bool `json:"no_events"`

	// Users summarises the per-user limits of a scenario with users (nil:
	// none).
	Users *UsersRow `json:"users,omitempty"`

	// Was is the same (scenario, mode) in a baseline run (see Compare),
	// shown beside this row's values; nil: none.
	Was *Row `json:"-"`

	// Worst holds each measure at its worst seed.
	Worst Worst `json:"worst"`
}

// UsersRow is a Row's summary of Spec.Users over its seeds: means, but
// the safety measures at their worst seed.
type UsersRow struct {
	Count int     `json:"count"`
	Rate  float64 `json:"rate"`
	Burst int64   `json:"burst"`
	// Seen and Bound: users that sent a request, and that the central
	// limiter denied at least once after the warm-up.
	Seen  float64 `json:"seen"`
	Bound float64 `json:"bound"`
	// BusiestPct is what allot admitted of the busiest user's requests as
	// a percentage of what one central limiter admitted of them.
	BusiestPct float64 `json:"busiest_pct"`
	// UnderDeniedPct is the percentage of the requests of users under
	// their limit (never denied centrally) that allot denied.
	UnderDeniedPct float64 `json:"under_denied_pct"`
	// PeakRateSum, PeakBurstSum: the largest Σ over regions of what pods
	// enforced for one user (I4: ≤ Rate, Burst), worst seed.
	PeakRateSum  float64 `json:"peak_rate_sum"`
	PeakBurstSum int64   `json:"peak_burst_sum"`
	// RunMargin is the worst user's admissions over the run less R·t + B
	// (≤ 0 when every user kept its bound), worst seed; OverAdmission the
	// worst window excess of the busiest users, worst seed.
	RunMargin     float64 `json:"run_margin"`
	OverAdmission float64 `json:"over_admission"`
	// PeakIDs and MeanIDs: budget IDs the leader held at a rebalance.
	PeakIDs float64 `json:"peak_ids"`
	MeanIDs float64 `json:"mean_ids"`
	// EntriesPerReport is the mean usage entries a report carried.
	EntriesPerReport float64 `json:"entries_per_report"`
}

func summariseUsers(runs []*Result) *UsersRow {
	f := runs[0].Users
	if f == nil {
		return nil
	}
	n := float64(len(runs))
	u := &UsersRow{Count: f.Count, Rate: f.Rate, Burst: f.Burst, RunMargin: math.Inf(-1)}
	for _, r := range runs {
		x := r.Users
		u.Seen += float64(x.Seen) / n
		u.Bound += float64(x.Bound) / n
		if x.HeavyIdeal > 0 {
			u.BusiestPct += 100 * float64(x.HeavyAdmitted) / float64(x.HeavyIdeal) / n
		}
		if x.UnderOffered > 0 {
			u.UnderDeniedPct += 100 * float64(x.UnderDenied) / float64(x.UnderOffered) / n
		}
		u.PeakRateSum = math.Max(u.PeakRateSum, x.PeakRateSum)
		u.PeakBurstSum = max(u.PeakBurstSum, x.PeakBurstSum)
		u.RunMargin = math.Max(u.RunMargin, x.RunMargin)
		u.OverAdmission = math.Max(u.OverAdmission, x.OverAdmission.Units)
		u.PeakIDs += float64(x.PeakIDs) / n
		u.MeanIDs += x.MeanIDs / n
		if x.Reports > 0 {
			u.EntriesPerReport += float64(x.UsageEntries) / float64(x.Reports) / n
		}
	}
	return u
}

// usersLine describes a row's users in one sentence ("" without users).
func usersLine(r Row) string {
	u := r.Users
	if u == nil {
		return ""
	}
	return fmt.Sprintf("%s/%s: %d users at %g/s burst %d each, %.0f seen, %.0f bound; the busiest got %.1f%% of what one central limiter gave it; "+
		"users under their limit had %.2f%% of their requests denied; a user's Σ over regions peaked at %.2f of its rate, burst %d of %d; "+
		"the worst user's admissions less R·t + B: %.0f (window excess %.0f); the leader held %.0f budget IDs at most (%.0f mean), %.1f usage entries a report.",
		r.Scenario, r.Mode, u.Count, u.Rate, u.Burst, u.Seen, u.Bound, u.BusiestPct, u.UnderDeniedPct, u.PeakRateSum/u.Rate, u.PeakBurstSum, u.Burst,
		u.RunMargin, u.OverAdmission, u.PeakIDs, u.MeanIDs, u.EntriesPerReport)
}

// Worst is each measure of a Row at its worst seed.
type Worst struct {
	Utilisation      float64  `json:"utilisation"`
	OverAdmission    float64  `json:"over_admission"`
	OverAdmissionPct float64  `json:"over_admission_pct"`
	PeakExcessPct    float64  `json:"peak_excess_pct"`
	ConvergenceS     *float64 `json:"convergence_s"`
	RegionErrorPct   float64  `json:"region_error_pct"`
	ShiftLossS       float64  `json:"shift_loss_s"`
	TimeTo90S        *float64 `json:"time_to_90_s"`
	// GrantChangesPerMin; WritesPerMin repeats it under its v1 name.
	GrantChangesPerMin float64 `json:"grant_changes_per_min"`
	// Deprecated: use GrantChangesPerMin.
	WritesPerMin float64 `json:"writes_per_min"`
	DenyPct      float64 `json:"deny_pct"`
}

// Summarise folds the runs of one (scenario, mode), one per seed, into a
// Row. It panics on no runs.
func Summarise(runs []*Result) Row {
	f := runs[0]
	n := float64(len(runs))
	row := Row{
		Scenario: f.Scenario, Mode: f.Mode, Seeds: len(runs), Seed: f.Seed,
		Rate: f.Rate, Burst: f.Burst, DurationS: f.Duration.Seconds(), WarmupS: f.Warmup.Seconds(),
	}
	w := &row.Worst
	w.Utilisation = math.Inf(1)
	var convSum, t90Sum float64
	never, t90Never := false, false
	events := len(f.ShiftLoss) > 0
	for _, r := range runs {
		row.Offered += float64(r.Offered) / n
		row.Admitted += float64(r.Admitted) / n
		row.Ideal += float64(r.Ideal) / n
		row.Utilisation += r.Utilisation / n
		deny := denyPct(r)
		row.DenyPct += deny / n
		row.OverAdmission += r.OverAdmission.Units / n
		row.OverAdmissionPct += r.OverAdmissionPct() / n
		row.PeakExcessPct += r.PeakExcessPct() / n
		row.RegionErrorPct += 100 * r.RegionError / n
		row.GrantChanges += float64(r.GrantChanges) / n
		row.GrantChangesPerMin += r.GrantChangesPerMinute() / n
		row.EntriesSent += float64(r.EntriesSent) / n
		row.PeakRateSum = math.Max(row.PeakRateSum, r.PeakRateSum)
		row.PeakBurstSum = max(row.PeakBurstSum, r.PeakBurstSum)
		row.LostReports += float64(r.LostReports) / n

		w.Utilisation = math.Min(w.Utilisation, r.Utilisation)
		w.OverAdmission = math.Max(w.OverAdmission, r.OverAdmission.Units)
		w.OverAdmissionPct = math.Max(w.OverAdmissionPct, r.OverAdmissionPct())
		w.PeakExcessPct = math.Max(w.PeakExcessPct, r.PeakExcessPct())
		w.RegionErrorPct = math.Max(w.RegionErrorPct, 100*r.RegionError)
		w.GrantChangesPerMin = math.Max(w.GrantChangesPerMin, r.GrantChangesPerMinute())
		w.DenyPct = math.Max(w.DenyPct, deny)
		row.ShiftLossS += r.ShiftLossWorst / n
		w.ShiftLossS = math.Max(w.ShiftLossS, r.ShiftLossWorst)
		if r.TimeTo90Worst < 0 {
			t90Never = true
		} else {
			c := r.TimeTo90Worst.Seconds()
			t90Sum += c
			if w.TimeTo90S == nil || c > *w.TimeTo90S {
				w.TimeTo90S = &c
			}
		}
		if r.ConvergenceWorst < 0 {
			never = true
		} else {
			c := r.ConvergenceWorst.Seconds()
			convSum += c
			if w.ConvergenceS == nil || c > *w.ConvergenceS {
				w.ConvergenceS = &c
			}
		}
	}
	switch {
	case !events:
		w.TimeTo90S = nil
		row.NoEvents = true
	case t90Never:
		w.TimeTo90S = nil
	default:
		m := t90Sum / n
		row.TimeTo90S = &m
	}
	row.Writes, row.WritesPerMin, w.WritesPerMin = row.GrantChanges, row.GrantChangesPerMin, w.GrantChangesPerMin
	row.Users = summariseUsers(runs)
	if never {
		w.ConvergenceS = nil
	} else {
		m := convSum / n
		row.ConvergenceS = &m
	}
	return row
}

func denyPct(r *Result) float64 {
	if r.Offered == 0 {
		return 0
	}
	return 100 * float64(r.Denied) / float64(r.Offered)
}

// WriteJSON writes rows as one indented JSON array.
// ReadJSON reads rows written by WriteJSON.
func ReadJSON(r io.Reader) ([]Row, error) {
	var rows []Row
	if err := json.NewDecoder(r).Decode(&rows); err != nil {
		return nil, fmt.Errorf("sim rows: %w", err)
	}
	return rows, nil
}

// Compare sets each row's Was to the baseline row of the same scenario and
// mode, and returns how many found one.
func Compare(rows, baseline []Row) int {
	by := make(map[string]*Row, len(baseline))
	for i := range baseline {
		b := &baseline[i]
		by[b.Scenario+"/"+string(b.Mode)] = b
	}
	n := 0
	for i := range rows {
		if b, ok := by[rows[i].Scenario+"/"+string(rows[i].Mode)]; ok {
			rows[i].Was = b
			n++
		}
	}
	return n
}

func WriteJSON(w io.Writer, rows []Row) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if rows == nil {
		rows = []Row{}
	}
	return enc.Encode(rows)
}

// eventCell is c, or "—" for a scenario without events.
func eventCell(r Row, c string) string {
	if r.NoEvents {
		return "—"
	}
	return c
}

func fmtT90(c *float64) string {
	if c == nil {
		return "never"
	}
	return fmt.Sprintf("%.1fs", *c)
}

func fmtConv(c *float64) string {
	if c == nil {
		return "never"
	}
	return fmt.Sprintf("%.0fs", *c)
}

// cells returns a row's table cells; with several seeds the measures that
// have a worst read "mean / worst".
func cells(r Row) []string {
	both := func(mean, worst string) string {
		if r.Seeds > 1 {
			return mean + " / " + worst
		}
		return mean
	}
	// was appends the baseline's mean, when there is one.
	was := func(cell string, f func(Row) string) string {
		if r.Was == nil {
			return cell
		}
		return cell + " (was " + f(*r.Was) + ")"
	}
	return []string{
		r.Scenario,
		string(r.Mode),
		fmt.Sprintf("%.0f", r.Offered),
		fmt.Sprintf("%.0f", r.Admitted),
		fmt.Sprintf("%.0f", r.Ideal),
		was(both(fmt.Sprintf("%.1f%%", 100*r.Utilisation), fmt.Sprintf("%.1f%%", 100*r.Worst.Utilisation)),
			func(b Row) string { return fmt.Sprintf("%.1f%%", 100*b.Utilisation) }),
		both(fmt.Sprintf("%.0f", r.OverAdmission), fmt.Sprintf("%.0f", r.Worst.OverAdmission)),
		both(fmt.Sprintf("%.2f%%", r.OverAdmissionPct), fmt.Sprintf("%.2f%%", r.Worst.OverAdmissionPct)),
		both(fmt.Sprintf("%.1f%%", r.PeakExcessPct), fmt.Sprintf("%.1f%%", r.Worst.PeakExcessPct)),
		both(fmtConv(r.ConvergenceS), fmtConv(r.Worst.ConvergenceS)),
		eventCell(r, was(both(fmt.Sprintf("%.2fs", r.ShiftLossS), fmt.Sprintf("%.2fs", r.Worst.ShiftLossS)),
			func(b Row) string { return fmt.Sprintf("%.2fs", b.ShiftLossS) })),
		eventCell(r, was(both(fmtT90(r.TimeTo90S), fmtT90(r.Worst.TimeTo90S)),
			func(b Row) string { return fmtT90(b.TimeTo90S) })),
		both(fmt.Sprintf("%.1f%%", r.RegionErrorPct), fmt.Sprintf("%.1f%%", r.Worst.RegionErrorPct)),
		both(fmt.Sprintf("%.1f", r.GrantChangesPerMin), fmt.Sprintf("%.1f", r.Worst.GrantChangesPerMin)),
		fmt.Sprintf("%.2f%%", r.DenyPct),
		fmt.Sprintf("%.2fR", r.PeakRateSum/r.Rate),
	}
}

var headers = []string{
	"SCENARIO", "MODE", "OFFERED", "ADMITTED", "IDEAL", "UTIL", "OVER-ADM", "OVER/R·t",
	"PEAK/R·W", "CONV", "SHIFT-LOSS", "TO-90%", "REGION-ERR", "CHANGES/MIN", "DENIED", "MAX ΣGRANT",
}

// WriteTable writes rows as aligned columns for people.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(headers, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(cells(r), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if l := usersLine(r); l != "" {
			if _, err := fmt.Fprintln(w, l); err != nil {
				return err
			}
		}
	}
	if len(rows) > 0 && rows[0].Seeds > 1 {
		_, err := fmt.Fprintf(w, "(%d seeds from %d: cells with two values read mean / worst)\n", rows[0].Seeds, rows[0].Seed)
		return err
	}
	return nil
}

// Legend explains the columns of the tables.
const Legend = `Columns: OFFERED, ADMITTED and IDEAL count units after the warm-up (IDEAL is
what one central GCRA with (R, B) admits of the same merged arrivals, retries
included); UTIL = ADMITTED / IDEAL; OVER-ADM = worst over W ∈ {1, 10, 60 s}
and every window of length W of admitted − (B + R·W), floored at 0, over the
whole run; OVER/R·t is it as a share of R times the run; PEAK/R·W as a share
of R·W of its window; CONV = worst time after a demand shift or fault until
the world's and every region's admitted rate (3-s centred mean) stay within
5% of R of the ideal split d_i·min(1, R/D) for 5 s (from the start when the
scenario has no event; "never" if not within the period); REGION-ERR = mean
|admitted_i − ideal_i| over regions and steady seconds, in % of R;
CHANGES/MIN = grant changes the leader made per simulated minute after the
warm-up (they reach pods in answers and pushes; nothing is written to etcd); DENIED =
denied / offered; MAX ΣGRANT = the largest sum over regions of the largest
rate any pod of the region enforced, at one instant (I4 wants ≤ 1.00R).`

// WriteMarkdown writes rows as a markdown table with a short preamble.
func WriteMarkdown(w io.Writer, rows []Row, preamble string) error {
	var b strings.Builder
	if preamble != "" {
		b.WriteString(preamble)
		b.WriteString("\n\n")
	}
	b.WriteString("| " + strings.Join(headers, " | ") + " |\n|")
	for range headers {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(cells(r), " | ") + " |\n")
	}
	if len(rows) > 0 && rows[0].Seeds > 1 {
		fmt.Fprintf(&b, "\n%d seeds from %d; cells with two values read mean / worst.\n", rows[0].Seeds, rows[0].Seed)
	}
	first := true
	for _, r := range rows {
		if l := usersLine(r); l != "" {
			if first {
				b.WriteString("\nPer-user limits:\n\n")
				first = false
			}
			b.WriteString("- " + l + "\n")
		}
	}
	b.WriteString("\n" + Legend + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Describe returns a one-line summary of the reference setup of s.
func Describe(s *Spec) string {
	return fmt.Sprintf("R = %g/s, B = %d, %d regions × %d pods, P = %v, L = %v, messages delayed %v–%v, %v simulated (warm-up %v)",
		s.Budget.Rate, s.Budget.Burst, len(s.Regions), s.pods(), s.Interval, s.Lease, s.Network.Report.Min, s.Network.Report.Max,
		s.Duration.Round(time.Second), s.Warmup)
}
