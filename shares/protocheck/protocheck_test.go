package protocheck_test

import (
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/allot-dev/allot/shares"
	"github.com/allot-dev/allot/shares/protocheck"
)

var (
	seeds = flag.Int("seeds", 2000, "seeds to run")
	from  = flag.Uint64("from", 1, "first seed")
	// TestSeedsReplay's range (default: 40 seeds from 46744).
	replayFrom  = flag.Uint64("replay-from", 0, "first seed TestSeedsReplay runs twice")
	replaySeeds = flag.Int("replay-seeds", 400, "seeds TestSeedsReplay runs twice, with -replay-from")
)

// runSeeds runs n seeds in parallel and returns the failing results, the
// shortest (fewest events) first.
func runSeeds(n int, opt protocheck.Options) (fails []protocheck.Result, total protocheck.Result) {
	opt.NoTrace = true
	var mu sync.Mutex
	forSeeds(*from, n, func(s uint64) {
		r := protocheck.Run(s, opt)
		mu.Lock()
		total.Events += r.Events
		total.Reports += r.Reports
		total.Rejected += r.Rejected
		total.Terms += r.Terms
		total.Faults += r.Faults
		total.Forgotten += r.Forgotten
		total.Renewals += r.Renewals
		total.Pushes += r.Pushes
		total.Steps += r.Steps
		total.EarlyEnds += r.EarlyEnds
		total.PeakRatio = max(total.PeakRatio, r.PeakRatio)
		if r.Violation != nil {
			fails = append(fails, r)
		}
		mu.Unlock()
	})
	for i := range fails {
		for j := i + 1; j < len(fails); j++ {
			if fails[j].Events < fails[i].Events {
				fails[i], fails[j] = fails[j], fails[i]
			}
		}
	}
	return fails, total
}

func TestProtocol(t *testing.T) {
	n := *seeds
	if testing.Short() {
		n = 200
	}
	fails, total := runSeeds(n, protocheck.Options{})
	t.Logf("%d seeds from %d: %d events, %d reports (%d rejected), %d terms (%d learned early), %d faults, %d tenants forgotten, %d learning renewals, %d pushes, %d step changes; peak Σ/R %.4f; %d violations",
		n, *from, total.Events, total.Reports, total.Rejected, total.Terms, total.EarlyEnds, total.Faults, total.Forgotten, total.Renewals, total.Pushes, total.Steps, total.PeakRatio, len(fails))
	if len(fails) > 0 {
		f := fails[0]
		r := protocheck.Run(f.Seed, protocheck.Options{})
		tail := r.Trace
		if len(tail) > 80 {
			tail = tail[len(tail)-80:]
		}
		var seedsFailed []string
		for _, f := range fails {
			seedsFailed = append(seedsFailed, fmt.Sprint(f.Seed))
		}
		t.Fatalf("%d of %d seeds broke the invariant (%s); shortest: seed %d, %d events: %s\n%s",
			len(fails), n, strings.Join(seedsFailed, " "), f.Seed, f.Events, r.Violation, strings.Join(tail, "\n"))
	}
}

// The checker finds the hole when a leader trusts a roster that misses the
// pods older terms leased: learning then ends Deposed after the term starts,
// while their leases may still be valid.
func TestCheckerFindsAnEmptyRoster(t *testing.T) {
	n := 300
	fails, _ := runSeeds(n, protocheck.Options{Mutate: func(c *shares.LeaderConfig) {
		if !c.First {
			c.Roster, c.RosterKnown = nil, true
		}
	}})
	if len(fails) == 0 {
		t.Fatalf("%d seeds with every leader trusting an empty roster: no violation found", n)
	}
	t.Logf("%d of %d seeds broke the invariant with an empty roster (first: seed %d: %s)", len(fails), n, fails[0].Seed, fails[0].Violation)
}

// A seed replays the same run: a violation the checker reports can be
// replayed with its trace. Seed 46763 once did not (a pod's held grants
// came from a map, and a leader numbered their tenants in that order).
func TestSeedsReplay(t *testing.T) {
	first, n := uint64(46744), 40
	if *replayFrom != 0 {
		first, n = *replayFrom, *replaySeeds
	}
	forSeeds(first, n, func(s uint64) {
		a, b := protocheck.Run(s, protocheck.Options{}), protocheck.Run(s, protocheck.Options{})
		if a.Events != b.Events || len(a.Trace) != len(b.Trace) {
			t.Errorf("seed %d: %d events then %d", s, a.Events, b.Events)
		}
		for i := range min(len(a.Trace), len(b.Trace)) {
			if a.Trace[i] != b.Trace[i] {
				t.Errorf("seed %d diverges at event %d:\n%s\n%s", s, i, a.Trace[i], b.Trace[i])
				break
			}
		}
	})
}

// forSeeds calls fn for the n seeds from first, on every processor.
func forSeeds(first uint64, n int, fn func(seed uint64)) {
	var wg sync.WaitGroup
	next := make(chan uint64)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for s := range next {
				fn(s)
			}
		})
	}
	for s := range uint64(n) {
		next <- first + s
	}
	close(next)
	wg.Wait()
}
