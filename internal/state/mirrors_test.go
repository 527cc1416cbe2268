package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy"
)

// budgetLog records what a BudgetMirror hands over.
type budgetLog struct {
	mu     sync.Mutex
	recs   map[string]BudgetRecord
	events []string // "reset a@1 b@1", "put a@2", "delete b"
	revs   []int64
}

func (l *budgetLog) ResetBudgets(recs map[string]BudgetRecord, rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = recs
	names := make([]string, 0, len(recs))
	for t, r := range recs {
		names = append(names, fmt.Sprintf("%s@%d", t, r.Version))
	}
	slices.Sort(names)
	l.events = append(l.events, strings.Join(append([]string{"reset"}, names...), " "))
	l.revs = append(l.revs, rev)
}

func (l *budgetLog) PutBudget(rec BudgetRecord, rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs[rec.Tenant] = rec
	l.events = append(l.events, fmt.Sprintf("put %s@%d", rec.Tenant, rec.Version))
	l.revs = append(l.revs, rev)
}

func (l *budgetLog) DeleteBudget(tenant string, rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.recs, tenant)
	l.events = append(l.events, "delete "+tenant)
	l.revs = append(l.revs, rev)
}

func (l *budgetLog) snapshot() ([]string, []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events), slices.Clone(l.revs)
}

// decodeLog collects the decode errors a mirror reports.
type decodeLog struct {
	mu   sync.Mutex
	errs []*DecodeError
}

func (d *decodeLog) report(e *DecodeError) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, e)
}

func (d *decodeLog) keys() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, e := range d.errs {
		out = append(out, e.Kind+" "+e.Key)
	}
	return out
}

// decodeErrorsOf reads allot_state_decode_errors_total{kind} from reg.
func decodeErrorsOf(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "allot_state_decode_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("allot_state_decode_errors_total{kind=%q} not exported", kind)
	return 0
}

// run runs a mirror's Run in a goroutine, and at cleanup stops it and
// checks that it returned ctx's error.
func run(t *testing.T, fn func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	})
}

// A budget record that fails to decode is reported (callback and counter)
// and left out; the records around it, before and after, are handed over
// in revision order with their versions; a bad write over a good record
// leaves the good one in force.
func TestBudgetMirrorReportsDecodeErrors(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.ApplyPolicy(ctx, policyText(t, "100/s"), 0, ""); err != nil {
		t.Fatal(err)
	}
	put := func(tenant, rate string) {
		t.Helper()
		if _, err := s.PutBudget(ctx, tenant, policy.Budget{Rate: rate, Burst: 3}, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(key, val string) {
		t.Helper()
		if _, err := s.c.Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "5/s")
	raw(s.BudgetsPrefix()+"broken", "{")
	put("b", "6/s")

	reg := prometheus.NewRegistry()
	var decoded decodeLog
	h := &budgetLog{}
	cfg := DefaultMirrorConfig()
	cfg.Retry, cfg.Registerer, cfg.OnDecodeError = 10*time.Millisecond, reg, decoded.report
	m, err := NewBudgetMirror(s, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m.Run)
	wait.Until(t, 10*time.Second, func() error {
		if ev, _ := h.snapshot(); len(ev) == 0 {
			return errors.New("no first reset yet")
		}
		return nil
	})

	for i := range 4 {
		put("a", fmt.Sprintf("%d/s", 10+i)) // versions 2 to 5
	}
	raw(s.budgetKey("b"), `{"tenant": "b", "rate": 7`) // over b's good record
	put("c", "8/s")
	if err := s.DeleteBudget(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	want := []string{"reset a@1 b@1", "put a@2", "put a@3", "put a@4", "put a@5", "put c@1", "delete a"}
	wait.Until(t, 10*time.Second, func() error {
		if ev, _ := h.snapshot(); len(ev) < len(want) {
			return fmt.Errorf("events %v, want %v", ev, want)
		}
		return nil
	})
	ev, revs := h.snapshot()
	if !slices.Equal(ev, want) {
		t.Errorf("handed over %q, want %q", ev, want)
	}
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			t.Errorf("revisions %v: not increasing at %d", revs, i)
		}
	}
	h.mu.Lock()
	if b := h.recs["b"]; b.Rate != "6/s" || b.Version != 1 {
		t.Errorf("after a bad write over b the handler holds %+v, want b's last good record (6/s, version 1)", b)
	}
	h.mu.Unlock()

	keys := decoded.keys()
	wantKeys := []string{"budget " + s.BudgetsPrefix() + "broken", "budget " + s.budgetKey("b")}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("decode errors reported for %q, want %q", keys, wantKeys)
	}
	decoded.mu.Lock()
	for _, e := range decoded.errs {
		if e.Rev <= 0 || e.Err == nil || !strings.Contains(e.Error(), e.Key) {
			t.Errorf("decode error %+v: want its revision, cause and key", e)
		}
	}
	decoded.mu.Unlock()
	if got := decodeErrorsOf(t, reg, KindBudget); got != 2 {
		t.Errorf("allot_state_decode_errors_total{kind=budget} = %v, want 2", got)
	}
	if got := decodeErrorsOf(t, reg, KindPolicy); got != 0 {
		t.Errorf("allot_state_decode_errors_total{kind=policy} = %v, want 0 (exported before any error)", got)
	}
}

// policyLog records what a PolicyMirror hands over.
type policyLog struct {
	mu       sync.Mutex
	versions []int64
	revs     []int64
	rate     string // the default tier's budget rate of the last one
}

func (l *policyLog) SetPolicy(pv PolicyVersion, doc *policy.Document, rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.versions = append(l.versions, pv.Version)
	l.revs = append(l.revs, rev)
	l.rate = doc.Resolve("nobody").Budget.Rate.String()
}

func (l *policyLog) snapshot() ([]int64, []int64, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.versions), slices.Clone(l.revs), l.rate
}

// A current-policy record that does not decode, or whose document no
// longer parses, is reported and the last good policy stays; the policies
// applied around them are handed over in version order, each once.
func TestPolicyMirrorReportsDecodeErrors(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.ApplyPolicy(ctx, policyText(t, "100/s"), 0, ""); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var decoded decodeLog
	h := &policyLog{}
	cfg := DefaultMirrorConfig()
	cfg.Retry, cfg.Registerer, cfg.OnDecodeError = 10*time.Millisecond, reg, decoded.report
	m, err := NewPolicyMirror(s, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m.Run)
	wait.Until(t, 10*time.Second, func() error {
		if v, _, _ := h.snapshot(); len(v) != 1 {
			return fmt.Errorf("versions %v, want version 1", v)
		}
		return nil
	})

	raw := func(val string) {
		t.Helper()
		if _, err := s.c.Put(ctx, s.PolicyKey(), val); err != nil {
			t.Fatal(err)
		}
	}
	raw("{")                                            // not a record
	raw(`{"version": 2, "document": "regions: [oops"}`) // a record whose document does not parse
	// Another key under the watched prefix is no policy at all.
	if _, err := s.c.Put(ctx, s.PolicyKey()+"-not", "{"); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		if k := decoded.keys(); len(k) != 2 {
			return fmt.Errorf("decode errors for %v, want two", k)
		}
		return nil
	})
	if v, _, rate := h.snapshot(); !slices.Equal(v, []int64{1}) || rate != "100/s" {
		t.Fatalf("after two bad records the handler has versions %v (rate %s), want version 1 kept", v, rate)
	}
	if _, err := s.ApplyPolicy(ctx, policyText(t, "200/s"), 0, ""); err != nil { // version 3
		t.Fatal(err)
	}
	if _, err := s.RollbackPolicy(ctx, 1, 0); err != nil { // version 4, as 1
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		if v, _, _ := h.snapshot(); len(v) != 3 {
			return fmt.Errorf("versions %v, want 1, 3 and 4", v)
		}
		return nil
	})
	v, revs, rate := h.snapshot()
	if !slices.Equal(v, []int64{1, 3, 4}) || rate != "100/s" {
		t.Errorf("handed over versions %v (last rate %s), want [1 3 4] ending at version 1's 100/s", v, rate)
	}
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			t.Errorf("revisions %v: not increasing at %d", revs, i)
		}
	}
	want := []string{"policy " + s.PolicyKey(), "policy " + s.PolicyKey()}
	if got := decoded.keys(); !slices.Equal(got, want) {
		t.Errorf("decode errors reported for %q, want %q", got, want)
	}
	decoded.mu.Lock()
	if e := decoded.errs[1]; !errors.Is(e, policy.ErrInvalid) {
		t.Errorf("the unparsable document's error %v, want it to wrap policy.ErrInvalid", e)
	}
	decoded.mu.Unlock()
	if got := decodeErrorsOf(t, reg, KindPolicy); got != 2 {
		t.Errorf("allot_state_decode_errors_total{kind=policy} = %v, want 2", got)
	}
}

func TestMirrorConfig(t *testing.T) {
	s := New(nil, "")
	h := &budgetLog{}
	bad := DefaultMirrorConfig()
	bad.Retry = 0
	if _, err := NewBudgetMirror(s, h, bad); err == nil || !strings.Contains(err.Error(), "Retry") {
		t.Errorf("NewBudgetMirror(Retry 0) = %v, want an error naming Retry", err)
	}
	if _, err := NewBudgetMirror(s, nil, DefaultMirrorConfig()); err == nil {
		t.Error("NewBudgetMirror(nil handler) accepted")
	}
	if _, err := NewPolicyMirror(nil, &policyLog{}, DefaultMirrorConfig()); err == nil {
		t.Error("NewPolicyMirror(nil store) accepted")
	}
	// Mirrors of one process share a registry, and so the counter.
	reg := prometheus.NewRegistry()
	cfg := DefaultMirrorConfig()
	cfg.Registerer = reg
	for range 2 {
		if _, err := NewBudgetMirror(s, h, cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := NewPolicyMirror(s, &policyLog{}, cfg); err != nil {
			t.Fatal(err)
		}
	}
	// A registry holding another collector of that name refuses.
	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "allot_state_decode_errors_total", Help: "not ours"}))
	cfg.Registerer = other
	if _, err := NewBudgetMirror(s, h, cfg); err == nil || !strings.Contains(err.Error(), "Registerer") {
		t.Errorf("NewBudgetMirror over a conflicting collector = %v, want an error naming Registerer", err)
	}
}

// blockingPolicy blocks its first SetPolicy until release is closed.
type blockingPolicy struct {
	policyLog
	once    sync.Once
	release chan struct{}
}

func (b *blockingPolicy) SetPolicy(pv PolicyVersion, doc *policy.Document, rev int64) {
	b.policyLog.SetPolicy(pv, doc, rev)
	b.once.Do(func() { <-b.release })
}

// After a resync (here: the watch's start revision was compacted away) the
// policy mirror hands over the current policy only if it is newer than the
// one it handed over: a handler never sees a version twice or go back.
func TestPolicyMirrorResyncKeepsOrder(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.ApplyPolicy(ctx, policyText(t, "100/s"), 0, ""); err != nil {
		t.Fatal(err)
	}
	h := &blockingPolicy{release: make(chan struct{})}
	var mu sync.Mutex
	resyncs := 0
	cfg := DefaultMirrorConfig()
	cfg.Retry = 10 * time.Millisecond
	cfg.OnResync = func(error) { mu.Lock(); resyncs++; mu.Unlock() }
	m, err := NewPolicyMirror(s, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m.Run)
	wait.Until(t, 10*time.Second, func() error {
		if v, _, _ := h.snapshot(); len(v) != 1 {
			return fmt.Errorf("versions %v, want version 1", v)
		}
		return nil
	})
	// While the mirror is between its read and its watch, etcd moves on
	// (not the policy) and compacts.
	if _, err := s.c.Put(ctx, s.PolicyKey()+"-other", "x"); err != nil {
		t.Fatal(err)
	}
	r, err := s.c.Put(ctx, s.PolicyKey()+"-other", "y")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Compact(ctx, r.Header.Revision); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	wait.Until(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if resyncs == 0 {
			return errors.New("no resync yet")
		}
		return nil
	})
	if _, err := s.ApplyPolicy(ctx, policyText(t, "200/s"), 0, ""); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		if v, _, _ := h.snapshot(); len(v) < 2 {
			return fmt.Errorf("versions %v, want version 2 after 1", v)
		}
		return nil
	})
	if v, _, rate := h.snapshot(); !slices.Equal(v, []int64{1, 2}) || rate != "200/s" {
		t.Errorf("handed over versions %v (last rate %s), want [1 2]: version 1 once, despite the resync", v, rate)
	}
}
