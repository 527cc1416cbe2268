package envoydiff

import (
	"fmt"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The hammered limit: boundN per second, for hammerFor, starting
// hammerPhase into a second of the wall clock.
const (
	boundN      = 10
	boundUnit   = time.Second
	hammerFor   = 2500 * time.Millisecond
	hammerPhase = 400 * time.Millisecond
	// clockSlack absorbs the difference between this process's clock and
	// Redis's TIME, which allot decides by.
	clockSlack = time.Millisecond
)

// shot is one request of a hammer: when it left, when its answer came,
// whether it was admitted.
type shot struct {
	send, recv time.Time
	ok         bool
	err        error
}

// testBound hammers a per-second limit of N on both services at once, one
// request at a time each, and checks allot against GCRA's exact bound: over
// any interval of length d between two decisions, at most N + ⌊N·d/unit⌋
// admitted (so never more than N within 100 ms); and, since the demand never
// stops, at least N + ⌊N·d/unit⌋ - 1 over the whole run. What the original
// admitted is recorded: its fixed windows reset at each second, so starting
// 0.4 s into one it admits 2N within 0.6 s around the first boundary.
func testBound(t *testing.T) {
	p := startPair(t, map[string]string{"config.yaml": fmt.Sprintf(`domain: edge
descriptors:
  - key: burst
    rate_limit: {unit: second, requests_per_unit: %d}
`, boundN)})
	r := req("edge", 0, desc("burst=1"))
	into := time.Duration(time.Now().UnixNano() % int64(time.Second))
	tm := time.NewTimer((time.Second + hammerPhase - into) % time.Second)
	<-tm.C
	end := time.Now().Add(hammerFor)
	var shots [2][]shot
	var wg sync.WaitGroup
	for i, s := range []*service{p.envoy, p.allot} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			shots[i] = hammer(s, r, end)
		}()
	}
	wg.Wait()
	envoy, allot := shots[0], shots[1]
	for i, ss := range shots {
		name := []string{"envoyproxy/ratelimit", "allot"}[i]
		for k, s := range ss {
			if s.err != nil {
				t.Fatalf("gcra-bound: request %d to %s: %v", k, name, s.err)
			}
		}
	}

	// allot: the exact bound over every interval, and the floor.
	admitted := okOnly(allot)
	worst, wi, wj := excess(admitted)
	if worst > 0 {
		d := admitted[wj].recv.Sub(admitted[wi].send)
		t.Errorf("gcra-bound: allot admitted %d requests (%d..%d) within %v, more than GCRA's bound %d for %d per %v",
			wj-wi+1, wi, wj, d, bound(d), boundN, boundUnit)
	}
	if len(admitted) == 0 {
		t.Fatalf("gcra-bound: allot admitted none of %d requests", len(allot))
	}
	span := allot[len(allot)-1].send.Sub(allot[0].recv)
	if floor := boundN + int(int64(boundN)*int64(span)/int64(boundUnit)) - 1; len(admitted) < floor {
		t.Errorf("gcra-bound: allot admitted %d of %d requests over %v of continuous demand, want at least %d", len(admitted), len(allot), span, floor)
	}
	whole := allot[len(allot)-1].recv.Sub(allot[0].send)
	t.Logf("allot: %d of %d admitted over %v (GCRA's bound %d)", len(admitted), len(allot), whole.Round(time.Millisecond), bound(whole))

	p.noFallbacks(t, "gcra-bound")
	if t.Failed() {
		p.logTails(t)
	}

	// The original: its windows, and how far beyond GCRA's bound it went.
	eAdmitted := okOnly(envoy)
	perWindow := map[int64]int{}
	for _, s := range eAdmitted {
		if w := s.send.Unix(); w == s.recv.Unix() {
			perWindow[w]++
		}
	}
	for w, n := range perWindow {
		if n > boundN {
			t.Errorf("gcra-bound: envoyproxy/ratelimit admitted %d requests within the second %d, more than its fixed window's %d: the test's model of the original is wrong", n, w, boundN)
		}
	}
	eWorst, ei, ej := excess(eAdmitted)
	held := "GCRA's bound held"
	if worst > 0 {
		held = fmt.Sprintf("GCRA's bound exceeded by %d", worst)
	}
	note := fmt.Sprintf("%d per second, %v of one request at a time each: allot admitted %d of %d (%s); the original %d of %d",
		boundN, hammerFor, len(admitted), len(allot), held, len(eAdmitted), len(envoy))
	design := 0
	if eWorst > 0 {
		design = 1
		d := eAdmitted[ej].recv.Sub(eAdmitted[ei].send)
		note += fmt.Sprintf(", %d within %v (GCRA's bound: %d) around its window boundary", ej-ei+1, d.Round(time.Millisecond), bound(d))
	}
	t.Log(note)
	record(row{scenario: "per-second limit hammered (GCRA bound)", requests: len(allot) + len(envoy), timed: true, design: design, note: note})
}

// hammer sends r to s one at a time until end.
func hammer(s *service, r *rlsv3.RateLimitRequest, end time.Time) []shot {
	var out []shot
	for time.Now().Before(end) {
		send := time.Now()
		resp, err := s.ask(r)
		out = append(out, shot{send: send, recv: time.Now(), ok: err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, err: err})
		if err != nil {
			break
		}
	}
	return out
}

func okOnly(ss []shot) []shot {
	var out []shot
	for _, s := range ss {
		if s.ok {
			out = append(out, s)
		}
	}
	return out
}

// bound is GCRA's most admitted decisions within d: N + ⌊N·d/unit⌋, with d
// widened by clockSlack.
func bound(d time.Duration) int {
	return boundN + int(int64(boundN)*int64(d+clockSlack)/int64(boundUnit))
}

// excess returns the most admitted requests beyond bound over any interval
// of admitted (in order), and the interval's ends. The interval between
// decisions i and j is at most admitted[j].recv - admitted[i].send.
func excess(admitted []shot) (worst, wi, wj int) {
	worst = -1 << 31
	for i := range admitted {
		for j := i; j < len(admitted); j++ {
			if e := j - i + 1 - bound(admitted[j].recv.Sub(admitted[i].send)); e > worst {
				worst, wi, wj = e, i, j
			}
		}
	}
	return worst, wi, wj
}
