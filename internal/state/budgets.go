package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allot-dev/allot/policy"
	"github.com/allot-dev/allot/shares"
)

// BudgetRecord is a tenant's budget as set through the admin API. It takes
// precedence over the policy document's tenant entry and tier.
type BudgetRecord struct {
	Tenant string `json:"tenant"`
	policy.Budget
	Shadow bool `json:"shadow,omitempty"`
	// Version counts writes of this tenant's budget from 1.
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
}

func (s *Store) budgetKey(tenant string) string {
	return s.prefix + "budgets/" + url.PathEscape(tenant)
}

// ValidateBudget checks a budget against the policy's regions, naming the
// field of every problem. tenant is a shares.BudgetID: a tenant, or
// tenant/NAME for its budget NAME, which the policy must have.
func ValidateBudget(doc *policy.Document, id string, b policy.Budget) error {
	if err := policy.ValidateBudgetID(id); err != nil {
		return &policy.FieldError{Path: "tenant", Msg: err.Error()}
	}
	tenant, name := shares.SplitBudgetID(id)
	d := *doc
	d.Tenants = map[string]policy.Tenant{tenant: {Budget: b}}
	pre := "tenants." + tenant + ".budget."
	if name != "" {
		if !slices.Contains(doc.BudgetNames(), name) {
			return &policy.FieldError{Path: "budget", Msg: fmt.Sprintf("%q: the policy has no budget of that name (its limits take: %s)", name, strings.Join(append([]string{`"" (the tenant's budget)`}, doc.BudgetNames()...), ", "))}
		}
		// The tenant's own tier, so that the budget is checked as it would
		// resolve.
		d.Tenants = map[string]policy.Tenant{tenant: {Tier: doc.Tenants[tenant].Tier, Budgets: map[string]policy.Budget{name: b}}}
		pre = "tenants." + tenant + ".budgets." + name + "."
	}
	if b.Rate == "" {
		return &policy.FieldError{Path: "rate", Msg: "missing: want the tenant's global rate, e.g. 1000/s"}
	}
	if b.Burst < 1 {
		return &policy.FieldError{Path: "burst", Msg: fmt.Sprintf("%d: want at least 1 unit", b.Burst)}
	}
	err := d.Validate()
	var es policy.Errors
	if errors.As(err, &es) {
		for _, e := range es {
			if strings.HasPrefix(e.Path, pre) {
				return &policy.FieldError{Path: strings.TrimPrefix(e.Path, pre), Msg: e.Msg}
			}
		}
		return fmt.Errorf("the stored policy is invalid: %w", err)
	}
	return err
}

// PutBudget validates b against the current policy and stores it. With
// ifVersion > 0 it writes only over that version of the tenant's budget
// (ifVersion < 0: only if the tenant has none).
func (s *Store) PutBudget(ctx context.Context, tenant string, b policy.Budget, shadow bool, ifVersion int64) (BudgetRecord, error) {
	_, doc, err := s.Policy(ctx)
	if errors.Is(err, ErrNotFound) {
		return BudgetRecord{}, fmt.Errorf("%w so that budgets know the regions", ErrNoPolicy)
	}
	if err != nil {
		return BudgetRecord{}, err
	}
	if err := ValidateBudget(doc, tenant, b); err != nil {
		return BudgetRecord{}, err
	}
	key := s.budgetKey(tenant)
	cur, rev, err := s.budget(ctx, tenant)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return BudgetRecord{}, err
	}
	switch {
	case ifVersion > 0 && cur.Version != ifVersion:
		return BudgetRecord{}, fmt.Errorf("budget %q is at version %d, not %d: %w", tenant, cur.Version, ifVersion, ErrConflict)
	case ifVersion < 0 && cur.Version != 0:
		return BudgetRecord{}, fmt.Errorf("budget %q exists (version %d): %w", tenant, cur.Version, ErrConflict)
	}
	rec := BudgetRecord{Tenant: tenant, Budget: b, Shadow: shadow, Version: cur.Version + 1, UpdatedAt: time.Now().UTC()}
	v, err := json.Marshal(rec)
	if err != nil {
		return BudgetRecord{}, err
	}
	r, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, string(v))).Commit()
	if err != nil {
		return BudgetRecord{}, fmt.Errorf("write budget %q: %w", tenant, err)
	}
	if !r.Succeeded {
		return BudgetRecord{}, fmt.Errorf("budget %q: %w", tenant, ErrConflict)
	}
	return rec, nil
}

func (s *Store) budget(ctx context.Context, tenant string) (BudgetRecord, int64, error) {
	r, err := s.c.Get(ctx, s.budgetKey(tenant))
	if err != nil {
		return BudgetRecord{}, 0, fmt.Errorf("read budget %q: %w", tenant, err)
	}
	if len(r.Kvs) == 0 {
		return BudgetRecord{}, 0, fmt.Errorf("budget %q: %w", tenant, ErrNotFound)
	}
	var rec BudgetRecord
	if err := json.Unmarshal(r.Kvs[0].Value, &rec); err != nil {
		return BudgetRecord{}, 0, fmt.Errorf("decode budget %q: %w", tenant, err)
	}
	return rec, r.Kvs[0].ModRevision, nil
}

// Budget returns a tenant's budget record, or ErrNotFound.
func (s *Store) Budget(ctx context.Context, tenant string) (BudgetRecord, error) {
	rec, _, err := s.budget(ctx, tenant)
	return rec, err
}

// Budgets returns every budget record, sorted by tenant, and the etcd
// revision they were read at (to start a watch from).
func (s *Store) Budgets(ctx context.Context) ([]BudgetRecord, int64, error) {
	r, err := s.c.Get(ctx, s.prefix+"budgets/", clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("read budgets: %w", err)
	}
	out := make([]BudgetRecord, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		var rec BudgetRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return nil, 0, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out, r.Header.Revision, nil
}

// DeleteBudget removes a tenant's budget record (the tenant falls back to
// the policy). It returns ErrNotFound when there was none.
func (s *Store) DeleteBudget(ctx context.Context, tenant string) error {
	r, err := s.c.Delete(ctx, s.budgetKey(tenant))
	if err != nil {
		return fmt.Errorf("delete budget %q: %w", tenant, err)
	}
	if r.Deleted == 0 {
		return fmt.Errorf("budget %q: %w", tenant, ErrNotFound)
	}
	return nil
}

// BudgetsPrefix is the key prefix of every budget record, to watch.
func (s *Store) BudgetsPrefix() string { return s.prefix + "budgets/" }

// DecodeBudget decodes one budget record.
func DecodeBudget(value []byte) (BudgetRecord, error) {
	var rec BudgetRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		return BudgetRecord{}, fmt.Errorf("decode budget: %w", err)
	}
	return rec, nil
}

// BudgetTenant returns the tenant a budget key names.
func (s *Store) BudgetTenant(key []byte) (string, error) {
	esc, ok := strings.CutPrefix(string(key), s.BudgetsPrefix())
	if !ok {
		return "", fmt.Errorf("budget key %q: not under %s", key, s.BudgetsPrefix())
	}
	return url.PathUnescape(esc)
}
