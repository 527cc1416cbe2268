package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/policy"
	"github.com/allot-dev/allot/shares"
)

// BudgetView is a tenant budget as the admin API shows it.
type BudgetView struct {
	Tenant string `json:"tenant"`
	// Budget names one of the tenant's named budgets (policy budgets:
	// NAME, taken by limits with rate: budget.NAME); "" is its budget.
	Budget    string             `json:"budget,omitempty"`
	Rate      string             `json:"rate"`
	Burst     int64              `json:"burst"`
	Mode      string             `json:"mode,omitempty"`
	Home      string             `json:"home,omitempty"`
	Weights   map[string]float64 `json:"weights,omitempty"`
	Shadow    bool               `json:"shadow,omitempty"`
	Version   int64              `json:"version,omitempty"`
	UpdatedAt string             `json:"updated_at,omitempty"`
}

func budgetView(r state.BudgetRecord) BudgetView {
	tenant, name := shares.SplitBudgetID(r.Tenant)
	return BudgetView{
		Tenant: tenant, Budget: name, Rate: r.Rate, Burst: r.Burst, Mode: r.Mode, Home: r.Home,
		Weights: r.Weights, Shadow: r.Shadow, Version: r.Version, UpdatedAt: r.UpdatedAt.Format(time.RFC3339),
	}
}

// PutBudget validates and stores a tenant's budget. ifVersion: 0 any, > 0
// only over that version, < 0 only when absent.
func (c *Coordinator) PutBudget(ctx context.Context, b BudgetView, ifVersion int64) (BudgetView, error) {
	id, err := budgetIDField(b.Tenant, b.Budget)
	if err != nil {
		return BudgetView{}, err
	}
	rec, err := c.store.PutBudget(ctx, id, policy.Budget{
		Rate: b.Rate, Burst: b.Burst, Mode: b.Mode, Home: b.Home, Weights: b.Weights,
	}, b.Shadow, ifVersion)
	if err != nil {
		return BudgetView{}, err
	}
	return budgetView(rec), nil
}

// tenantField checks a tenant name from a request (policy.ValidateTenant),
// as an error naming the field tenant.
func tenantField(tenant string) error {
	err := policy.ValidateTenant(tenant)
	var te *policy.TenantError
	if errors.As(err, &te) {
		return &policy.FieldError{Path: "tenant", Msg: fmt.Sprintf("%q: %s", te.Name, te.Rule)}
	}
	return err
}

// budgetIDField checks a tenant and a budget name from a request, naming
// the field at fault, and returns the budget's ID (shares.BudgetID).
func budgetIDField(tenant, name string) (string, error) {
	if err := tenantField(tenant); err != nil {
		return "", err
	}
	id := shares.BudgetID(tenant, name)
	if name != "" && (strings.ContainsAny(name, "/~") || policy.ValidateBudgetID(id) != nil) {
		return "", &policy.FieldError{Path: "budget", Msg: fmt.Sprintf("%q: want a budget name of the policy (lowercase letters, digits, '_' or '-')", name)}
	}
	return id, nil
}

// GetBudget returns a tenant's budget record: its budget, or with name its
// budget of that name.
func (c *Coordinator) GetBudget(ctx context.Context, tenant, name string) (BudgetView, error) {
	id, err := budgetIDField(tenant, name)
	if err != nil {
		return BudgetView{}, err
	}
	rec, err := c.store.Budget(ctx, id)
	if err != nil {
		return BudgetView{}, err
	}
	return budgetView(rec), nil
}

// ListBudgets returns every budget record, sorted by tenant.
func (c *Coordinator) ListBudgets(ctx context.Context) ([]BudgetView, error) {
	recs, _, err := c.store.Budgets(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]BudgetView, len(recs))
	for i, r := range recs {
		out[i] = budgetView(r)
	}
	return out, nil
}

// DeleteBudget removes a tenant's budget record. A name ValidateTenant
// refuses is refused, unless a record has it (one stored before the rule
// was tightened), which can then still be removed.
func (c *Coordinator) DeleteBudget(ctx context.Context, tenant, name string) error {
	id, err := budgetIDField(tenant, name)
	if err != nil {
		if name != "" {
			return err
		}
		if _, gerr := c.store.Budget(ctx, tenant); gerr != nil {
			return err
		}
		id = tenant
	}
	return c.store.DeleteBudget(ctx, id)
}

// RegionShare is one region's part of a tenant's budget.
type RegionShare struct {
	Region    string  `json:"region"`
	Rate      float64 `json:"rate"`
	Burst     int64   `json:"burst"`
	Epoch     uint64  `json:"epoch"`
	Demand    float64 `json:"demand"`
	FloorRate float64 `json:"floor_rate"`
	// Granted is false when the region holds no grant and enforces its
	// floor.
	Granted bool `json:"granted"`
}

// SharesView is how a tenant's budget is split now.
type SharesView struct {
	Tenant string `json:"tenant"`
	// Budget names the named budget shown ("" the tenant's budget).
	Budget  string        `json:"budget,omitempty"`
	Rate    float64       `json:"rate"`
	Burst   int64         `json:"burst"`
	Mode    string        `json:"mode"`
	Source  string        `json:"source"` // "leader" (live, with demand), "follower", or "other_shard"
	Regions []RegionShare `json:"regions"`
	// Shard is the coordinator shard the tenant belongs to; ShardLeader,
	// when Source is "other_shard", that shard's leader (ask it instead).
	Shard       int         `json:"shard"`
	ShardLeader *LeaderInfo `json:"shard_leader,omitempty"`
}

// Shares returns how tenant's budget (with name, its budget of that name)
// is split: from the leader's allocator when this instance leads, otherwise
// from the grants in etcd.
func (c *Coordinator) Shares(ctx context.Context, tenant, name string) (SharesView, error) {
	id, err := budgetIDField(tenant, name)
	if err != nil {
		return SharesView{}, err
	}
	_, doc, err := c.store.Policy(ctx)
	if err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return SharesView{}, ErrNoPolicy
		}
		return SharesView{}, err
	}
	var over *policy.Budget
	if rec, err := c.store.Budget(ctx, id); err == nil {
		over = &rec.Budget
	} else if !errors.Is(err, state.ErrNotFound) {
		return SharesView{}, err
	}
	rb, ok := doc.NamedBudget(tenant, name, over)
	if !ok {
		return SharesView{}, &policy.FieldError{Path: "budget", Msg: fmt.Sprintf("%q: the policy has no budget of that name (its limits take: %s)", name, strings.Join(doc.BudgetNames(), ", "))}
	}
	sb := rb.Shares()
	v := SharesView{Tenant: tenant, Budget: name, Rate: sb.Rate, Burst: sb.Burst, Mode: rb.Mode, Source: "etcd"}

	grants := map[string]shares.Grant{}
	var demand map[string]float64
	v.Source = "follower"
	n := int(c.shards.Load())
	v.Shard = shares.ShardOf(tenant, n)
	if !c.owns(tenant) {
		v.Source = "other_shard"
		if l, err := state.New(c.cfg.Etcd, c.cfg.Prefix).Shard(v.Shard).Leader(ctx); err == nil {
			v.ShardLeader = &l
		}
	}
	c.mu.Lock()
	if t := c.term; t != nil && t.lead != nil && c.owns(tenant) {
		a := t.lead.Allocator()
		grants, demand = a.Grants(id), a.Demand(id)
		v.Source = "leader"
	}
	c.mu.Unlock()
	for _, r := range doc.Regions {
		fr, _ := shares.Floor(sb, doc.Regions, r)
		g, ok := grants[r]
		rs := RegionShare{Region: r, FloorRate: fr, Demand: demand[r], Granted: ok}
		if ok {
			rs.Rate, rs.Burst, rs.Epoch = g.Rate, g.Burst, g.Epoch
		} else {
			rs.Rate, rs.Burst = shares.Floor(sb, doc.Regions, r)
		}
		v.Regions = append(v.Regions, rs)
	}
	return v, nil
}

// RegionStatus is what the leader knows of one region.
type RegionStatus struct {
	Region     string `json:"region"`
	Pods       int    `json:"pods"`
	LastReport string `json:"last_report,omitempty"`
	Applied    uint64 `json:"applied_epoch"`
	LeaseValid bool   `json:"lease_valid"`
	// Epoch is the last epoch issued to the region in this term.
	Epoch uint64 `json:"epoch"`
}

// Status is the coordinator's state (GET /v1/status; its fields are a contract).
type Status struct {
	IsLeader        bool           `json:"is_leader"`
	ID              string         `json:"id"`
	Leader          LeaderInfo     `json:"leader"`
	Regions         []RegionStatus `json:"regions"`
	LastRebalance   string         `json:"last_rebalance,omitempty"`
	LastRebalanceMS float64        `json:"last_rebalance_ms"`
	LastWrites      int            `json:"last_grant_writes"` // grants the last rebalance changed
	Term            uint64         `json:"term,omitempty"`
	Learning        bool           `json:"learning,omitempty"`
	Tenants         int            `json:"tenants"`
	PolicyVersion   int64          `json:"policy_version"`
	// Shard is the coordinator shard this instance runs, of Shards;
	// ShardLeaders names every shard's leader as etcd has it (an empty
	// entry: none elected), so that any coordinator's status finds them
	// all.
	Shard        int          `json:"shard"`
	Shards       int          `json:"shards"`
	ShardLeaders []LeaderInfo `json:"shard_leaders,omitempty"`
}

// Status returns this instance's view. Only the leader knows the regions'
// reports; a follower returns its leader and the policy.
func (c *Coordinator) Status(ctx context.Context) (Status, error) {
	pv, _, err := c.store.Policy(ctx)
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		return Status{}, fmt.Errorf("status: %w", err)
	}
	n := int(c.shards.Load())
	var leaders []LeaderInfo
	if n > 1 {
		root := state.New(c.cfg.Etcd, c.cfg.Prefix)
		for i := range n {
			l, err := root.Shard(i).Leader(ctx)
			if err != nil && !errors.Is(err, state.ErrNotFound) {
				return Status{}, fmt.Errorf("status: shard %d: %w", i, err)
			}
			l.Shard = i
			leaders = append(leaders, l)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{ID: c.cfg.ID, Leader: c.leader, PolicyVersion: pv.Version, Regions: []RegionStatus{},
		Shard: c.cfg.Shard, Shards: n, ShardLeaders: leaders}
	t := c.term
	if t == nil {
		return s, nil
	}
	s.IsLeader = true
	now := c.cfg.Now()
	if !c.lastRun.IsZero() {
		s.LastRebalance = c.lastRun.UTC().Format(time.RFC3339Nano)
		s.LastRebalanceMS = float64(c.lastDur.Microseconds()) / 1000
	}
	s.LastWrites = c.lastWrites
	if t.lead != nil {
		s.Tenants = t.lead.Tenants()
		s.Term, s.Learning = t.lead.Term(), t.lead.Learning(now)
	}
	for _, r := range t.regions {
		rs := RegionStatus{Region: r}
		var last time.Time
		first := true
		if t.lead != nil {
			rs.Epoch = t.lead.Epoch(r)
			for _, p := range t.lead.Pods(r, now) {
				rs.Pods++
				rs.LeaseValid = true
				if first || p.Acked < rs.Applied {
					rs.Applied = p.Acked
				}
				first = false
				if p.LastSeen.After(last) {
					last = p.LastSeen
				}
			}
		}
		if !last.IsZero() {
			rs.LastReport = last.UTC().Format(time.RFC3339Nano)
		}
		s.Regions = append(s.Regions, rs)
	}
	sort.Slice(s.Regions, func(i, j int) bool { return s.Regions[i].Region < s.Regions[j].Region })
	return s, nil
}

// PolicyView is one policy version as the admin API shows it.
type PolicyView struct {
	Version      int64  `json:"version"`
	Document     string `json:"document"`
	AppliedAt    string `json:"applied_at"`
	Note         string `json:"note,omitempty"`
	RestoredFrom int64  `json:"restored_from,omitempty"`
}

func policyView(p state.PolicyVersion) PolicyView {
	return PolicyView{Version: p.Version, Document: p.Document, AppliedAt: p.AppliedAt.Format(time.RFC3339), Note: p.Note, RestoredFrom: p.RestoredFrom}
}

// ApplyPolicy validates and stores a policy document as the next version.
func (c *Coordinator) ApplyPolicy(ctx context.Context, doc string, ifVersion int64, note string) (PolicyView, error) {
	pv, err := c.store.ApplyPolicy(ctx, []byte(doc), ifVersion, note)
	if err != nil {
		return PolicyView{}, err
	}
	return policyView(pv), nil
}

// GetPolicy returns the current policy version.
func (c *Coordinator) GetPolicy(ctx context.Context) (PolicyView, error) {
	pv, _, err := c.store.Policy(ctx)
	if err != nil {
		return PolicyView{}, err
	}
	return policyView(pv), nil
}

// PolicyHistory returns up to limit versions, newest first.
func (c *Coordinator) PolicyHistory(ctx context.Context, limit int) ([]PolicyView, error) {
	h, err := c.store.PolicyHistory(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]PolicyView, len(h))
	for i, p := range h {
		out[i] = policyView(p)
	}
	return out, nil
}

// RollbackPolicy restores version to (0: the previous one) as a new version.
func (c *Coordinator) RollbackPolicy(ctx context.Context, to, ifVersion int64) (PolicyView, error) {
	pv, err := c.store.RollbackPolicy(ctx, to, ifVersion)
	if err != nil {
		return PolicyView{}, err
	}
	return policyView(pv), nil
}
