package envoydiff

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

var writeResults = flag.Bool("write-results", false, "also write the summary table to bench/results/envoydiff.md")

// windowMargin is how much of a fixed window of the original must be left
// when a sequence starts: a sequence takes well under a second, and never
// straddles a window boundary.
const windowMargin = 15 * time.Second

// kind is how a step's two answers must relate.
type kind int

const (
	// agree: both services answer alike.
	agree kind = iota
	// byDesign: GCRA or "a denied request costs nothing" makes them
	// differ; each must answer as stated.
	byDesign
	// knownDiff: a difference that is not by design, found by this test
	// and reported: each must answer as stated (as they do today), so that
	// a change to either fails here and the step is revisited (an agree
	// step once allot matches, a byDesign one once the difference is
	// documented as intended).
	knownDiff
)

// step is one request of a scenario's sequence.
type step struct {
	r    *rlsv3.RateLimitRequest
	kind kind
	// allot and envoy are the answers (render's form) a byDesign or
	// knownDiff step wants of each; why says why they differ.
	allot, envoy, why string
}

func same(r *rlsv3.RateLimitRequest) step { return step{r: r} }

// times repeats a request n times, each an agree step.
func times(n int, r *rlsv3.RateLimitRequest) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = same(r)
	}
	return out
}

func design(r *rlsv3.RateLimitRequest, allot, envoy, why string) step {
	return step{r: r, kind: byDesign, allot: allot, envoy: envoy, why: why}
}

func known(r *rlsv3.RateLimitRequest, allot, envoy, why string) step {
	return step{r: r, kind: knownDiff, allot: allot, envoy: envoy, why: why}
}

// seq joins steps and runs of steps into one sequence.
func seq(parts ...any) []step {
	var out []step
	for _, p := range parts {
		switch p := p.(type) {
		case step:
			out = append(out, p)
		case []step:
			out = append(out, p...)
		default:
			panic(fmt.Sprintf("seq: %T", p))
		}
	}
	return out
}

// scenario is one configuration, one environment and one request sequence.
type scenario struct {
	name   string
	config string   // ratelimit/config/config.yaml
	env    []string // settings beyond the common ones, for both
	// windows are the fixed windows of the original the limits use
	// (minute when empty): the sequence starts away from their ends.
	windows []time.Duration
	steps   []step
}

// row is one line of the summary table.
type row struct {
	scenario                         string
	requests, agreed, design, knowns int
	// timed: the two services were not asked the same sequence (each
	// at its own pace), so no request pairs agree or differ.
	timed bool
	note  string
}

var summary struct {
	sync.Mutex
	rows []row
}

func record(r row) {
	summary.Lock()
	defer summary.Unlock()
	summary.rows = append(summary.rows, r)
}

// TestEnvoyDiff runs every scenario (in parallel: each has its own
// processes), then the GCRA bound on its own, and logs the summary.
func TestEnvoyDiff(t *testing.T) {
	start := time.Now()
	t.Run("scenarios", func(t *testing.T) {
		for _, sc := range scenarios() {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				sc.run(t)
			})
		}
		t.Run("config reload", func(t *testing.T) {
			t.Parallel()
			testReload(t)
		})
	})
	t.Run("gcra-bound", testBound)
	table := summaryTable()
	t.Logf("envoyproxy/ratelimit %s vs allot envoy-ratelimit (%v):\n%s", bins.envoyVersion, time.Since(start).Round(time.Millisecond), table)
	if *writeResults {
		out := filepath.Join(bins.repo, "bench", "results", "envoydiff.md")
		doc := fmt.Sprintf("# allot envoy-ratelimit vs envoyproxy/ratelimit %s\n\n"+
			"Written by `cd bench/peers && go test ./envoydiff -run TestEnvoyDiff -write-results` (%s).\n"+
			"Each scenario starts both services (each on its own redis-server, same settings and configuration)\n"+
			"and sends both the same ShouldRateLimit sequence from cold keys. *agreed*: same overall code,\n"+
			"per-descriptor code, limit and remaining; *by design*: GCRA or a denied request costing nothing\n"+
			"makes them differ; *known*: a difference that is not by design (see the step's note in diff_test.go).\n\n%s",
			bins.envoyVersion, time.Now().UTC().Format("2006-01-02"), table)
		if err := os.WriteFile(out, []byte(doc), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func summaryTable() string {
	summary.Lock()
	defer summary.Unlock()
	rows := slices.Clone(summary.rows)
	slices.SortStableFunc(rows, func(a, b row) int { return strings.Compare(a.scenario, b.scenario) })
	var b strings.Builder
	b.WriteString("| scenario | requests | agreed | differing by design | known differences | note |\n")
	b.WriteString("|---|---:|---:|---:|---:|---|\n")
	var tot row
	for _, r := range rows {
		agreed := fmt.Sprint(r.agreed)
		if r.timed {
			agreed = "–"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %s |\n", r.scenario, r.requests, agreed, r.design, r.knowns, r.note)
		if !r.timed {
			tot.requests += r.requests
		}
		tot.agreed += r.agreed
		tot.design += r.design
		tot.knowns += r.knowns
	}
	fmt.Fprintf(&b, "| **total** | %d | %d | %d | %d | requests of the sequences, each sent to both; the timed run's are in its own row |\n", tot.requests, tot.agreed, tot.design, tot.knowns)
	return b.String()
}

// run starts the scenario's pair, waits to be away from a window end, and
// sends each request to both, checking each pair of answers.
func (sc scenario) run(t *testing.T) {
	p := startPair(t, map[string]string{"config.yaml": sc.config}, sc.env...)
	awayFromWindowEnd(t, sc.windows)
	r := &row{scenario: sc.name}
	start := time.Now()
	for _, st := range sc.steps {
		p.check(t, r, st)
	}
	p.finish(t, r, start)
}

// check sends one step's request to both services and checks the answers,
// counting the step in r.
func (p *pair) check(t *testing.T, r *row, st step) {
	t.Helper()
	ro, eo := p.envoy.ask(st.r)
	ra, ea := p.allot.ask(st.r)
	o, a := render(ro, eo), render(ra, ea)
	where := fmt.Sprintf("scenario %q, request %d (%s)", r.scenario, r.requests, describe(st.r))
	r.requests++
	if st.kind == agree {
		if o != a {
			t.Errorf("%s:\n  envoyproxy/ratelimit: %s\n  allot:                %s", where, o, a)
			return
		}
		r.agreed++
		return
	}
	label := map[kind]string{byDesign: "by design", knownDiff: "known difference, not by design"}[st.kind]
	ok := true
	if a != st.allot {
		t.Errorf("%s (%s: %s):\n  allot answered        %s\n  want                  %s\n  (envoyproxy/ratelimit %s)", where, label, st.why, a, st.allot, o)
		ok = false
	}
	if o != st.envoy {
		t.Errorf("%s (%s: %s):\n  envoyproxy/ratelimit answered %s\n  the test expects              %s\n  (allot %s)", where, label, st.why, o, st.envoy, a)
		ok = false
	}
	switch {
	case !ok:
	case st.kind == byDesign:
		r.design++
	default:
		r.knowns++
	}
}

// finish checks that allot decided everything with Redis and that the
// sequence begun at start stayed within one window, and records r.
func (p *pair) finish(t *testing.T, r *row, start time.Time) {
	t.Helper()
	p.noFallbacks(t, r.scenario)
	if t.Failed() {
		p.logTails(t)
	}
	if took := time.Since(start); took > windowMargin {
		t.Errorf("scenario %q: the sequence took %v, more than the %v margin kept before a window end: the original's counters may have reset midway", r.scenario, took, windowMargin)
	}
	record(*r)
}

// awayFromWindowEnd waits, when less than windowMargin is left of the
// current epoch-aligned window of any of periods (the original's fixed
// windows), until the next window starts.
func awayFromWindowEnd(t *testing.T, periods []time.Duration) {
	t.Helper()
	if len(periods) == 0 {
		periods = []time.Duration{time.Minute}
	}
	periods = slices.Clone(periods)
	slices.Sort(periods)
	slices.Reverse(periods) // the longest first: its start is a start of the shorter
	for _, p := range periods {
		now := time.Now()
		left := p - time.Duration(now.UnixNano()%int64(p))
		if left >= windowMargin {
			continue
		}
		wait := left + 50*time.Millisecond
		t.Logf("%v of the current %v window left: waiting %v for the next", left.Round(time.Millisecond), p, wait.Round(time.Millisecond))
		tm := time.NewTimer(wait)
		<-tm.C
	}
}
