package state

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/policy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The embedded etcd server and client keep a few long-lived
		// goroutines that stop after the tests' cleanups return.
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	)
}

func policyText(t *testing.T, rate string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../deploy/policy.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return []byte(strings.Replace(string(b), "budget: {rate: 100/s, burst: 20}", "budget: {rate: "+rate+", burst: 20}", 1))
}

func newStore(t *testing.T) *Store {
	return New(etcdtest.Start(t).Client(t), "")
}

func TestPolicyVersions(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, _, err := s.Policy(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Policy() on empty etcd = %v, want ErrNotFound", err)
	}
	texts := [][]byte{policyText(t, "100/s"), policyText(t, "200/s"), policyText(t, "300/s")}
	for i, txt := range texts {
		pv, err := s.ApplyPolicy(ctx, txt, 0, "test")
		if err != nil || pv.Version != int64(i+1) {
			t.Fatalf("ApplyPolicy #%d = %d, %v; want version %d", i, pv.Version, err, i+1)
		}
	}
	// A bad apply changes nothing.
	if _, err := s.ApplyPolicy(ctx, []byte("version: 1\nregions: []\n"), 0, "bad"); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("bad ApplyPolicy = %v, want ErrInvalid", err)
	}
	pv, doc, err := s.Policy(ctx)
	if err != nil || pv.Version != 3 || pv.Document != string(texts[2]) {
		t.Fatalf("after bad apply: version %d, err %v; want version 3 unchanged", pv.Version, err)
	}
	if got := doc.Resolve("nobody").Budget.Rate.String(); got != "300/s" {
		t.Errorf("current default budget = %s, want 300/s", got)
	}
	// ifVersion guards against stale writers.
	if _, err := s.ApplyPolicy(ctx, texts[0], 2, "stale"); !errors.Is(err, ErrConflict) {
		t.Errorf("ApplyPolicy(ifVersion=2) at version 3 = %v, want ErrConflict", err)
	}
	// Rollback restores the exact previous document as a new version.
	rb, err := s.RollbackPolicy(ctx, 0, 0)
	if err != nil || rb.Version != 4 || rb.RestoredFrom != 2 || rb.Document != string(texts[1]) {
		t.Fatalf("RollbackPolicy() = v%d from %d, %v; want v4 restoring 2 byte-identical", rb.Version, rb.RestoredFrom, err)
	}
	rb, err = s.RollbackPolicy(ctx, 1, 0)
	if err != nil || rb.Document != string(texts[0]) {
		t.Fatalf("RollbackPolicy(1) = %v; want version 1's text", err)
	}
	h, err := s.PolicyHistory(ctx, 0)
	if err != nil || len(h) != 5 || h[0].Version != 5 || h[4].Version != 1 {
		t.Fatalf("PolicyHistory = %d entries, %v; want 5 newest first", len(h), err)
	}
	if _, err := s.RollbackPolicy(ctx, 99, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("RollbackPolicy(99) = %v, want ErrNotFound", err)
	}
}

// Two concurrent applies from the same version: one wins, one conflicts.
func TestPolicyConcurrentApply(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.ApplyPolicy(ctx, policyText(t, "100/s"), 0, ""); err != nil {
		t.Fatal(err)
	}
	for round := range 10 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		cur, _, _ := s.Policy(ctx)
		for i := range 2 {
			wg.Go(func() {
				_, errs[i] = s.ApplyPolicy(ctx, policyText(t, "5/s"), cur.Version, "")
			})
		}
		wg.Wait()
		wins, conflicts := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ErrConflict):
				conflicts++
			default:
				t.Fatalf("round %d: unexpected error %v", round, err)
			}
		}
		if wins != 1 || conflicts != 1 {
			t.Fatalf("round %d: %d wins, %d conflicts; want 1 and 1", round, wins, conflicts)
		}
	}
}

func TestBudgets(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.PutBudget(ctx, "t1", policy.Budget{Rate: "5/s", Burst: 3}, false, 0); err == nil || !strings.Contains(err.Error(), "apply one first") {
		t.Fatalf("PutBudget before any policy = %v, want advice to apply a policy", err)
	}
	if _, err := s.ApplyPolicy(ctx, policyText(t, "100/s"), 0, ""); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		tenant string
		b      policy.Budget
		field  string
	}{
		{"t1", policy.Budget{Rate: "10/x", Burst: 3}, "rate"},
		{"t1", policy.Budget{Burst: 3}, "rate"},
		{"t1", policy.Budget{Rate: "5/s"}, "burst"},
		{"t1", policy.Budget{Rate: "5/s", Burst: 3, Mode: "pinned"}, "home"},
		{"t1", policy.Budget{Rate: "5/s", Burst: 3, Mode: "pinned", Home: "mars"}, "home"},
		{"t1", policy.Budget{Rate: "5/s", Burst: 3, Mode: "sideways"}, "mode"},
		{"", policy.Budget{Rate: "5/s", Burst: 3}, "tenant"},
	}
	for _, c := range bad {
		_, err := s.PutBudget(ctx, c.tenant, c.b, false, 0)
		var fe *policy.FieldError
		if !errors.As(err, &fe) || fe.Path != c.field {
			t.Errorf("PutBudget(%q, %+v) = %v, want an error naming %q", c.tenant, c.b, err, c.field)
		}
	}
	if _, err := s.Budget(ctx, "t1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bad puts stored something: Budget(t1) err = %v", err)
	}
	rec, err := s.PutBudget(ctx, "t1", policy.Budget{Rate: "5/s", Burst: 3, Mode: "pinned", Home: "us-east"}, false, -1)
	if err != nil || rec.Version != 1 {
		t.Fatalf("PutBudget = %+v, %v", rec, err)
	}
	if _, err := s.PutBudget(ctx, "t1", policy.Budget{Rate: "6/s", Burst: 3}, false, -1); !errors.Is(err, ErrConflict) {
		t.Errorf("create-only PutBudget over an existing budget = %v, want ErrConflict", err)
	}
	if _, err := s.PutBudget(ctx, "a:b@c.d", policy.Budget{Rate: "6/s", Burst: 3}, true, 0); err != nil {
		t.Fatal(err)
	}
	list, _, err := s.Budgets(ctx)
	if err != nil || len(list) != 2 || list[0].Tenant != "a:b@c.d" || list[1].Home != "us-east" || !list[0].Shadow {
		t.Fatalf("Budgets = %+v, %v", list, err)
	}
	if err := s.DeleteBudget(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteBudget(ctx, "t1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second DeleteBudget = %v, want ErrNotFound", err)
	}
}
