package coordinator

import (
	"fmt"

	"context"
	"errors"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/policy"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
	"github.com/allot-dev/allot/shares"
)

// RegisterGRPC registers allot.v1.Coordinator, behind the report
// authentication of Config.Reports (reportauth.go), and allot.v1.Admin, whose
// writes auth guards, on s.
func (c *Coordinator) RegisterGRPC(s grpc.ServiceRegistrar, auth Auth) {
	g := &grpcAPI{c: c, auth: auth}
	allotv1.RegisterCoordinatorServer(s, c.gateReports(g))
	allotv1.RegisterAdminServer(s, g)
}

type grpcAPI struct {
	allotv1.UnimplementedCoordinatorServer
	allotv1.UnimplementedAdminServer
	c    *Coordinator
	auth Auth
}

// GRPCError maps a domain error to a gRPC status: the one place this mapping
// lives for the coordinator's gRPC API.
func GRPCError(err error) error {
	if err == nil {
		return nil
	}
	var nl *NotLeaderError
	code := codes.Internal
	switch {
	case errors.Is(err, errUnauthorized):
		code = codes.Unauthenticated
	case errors.Is(err, shares.ErrTooManyPods):
		code = codes.ResourceExhausted
	case errors.Is(err, errBadRequest), errors.Is(err, policy.ErrInvalid), errors.Is(err, ErrBadReport):
		code = codes.InvalidArgument
	case errors.Is(err, state.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, state.ErrConflict):
		code = codes.Aborted
	case errors.Is(err, ErrNoPolicy):
		code = codes.FailedPrecondition
	case errors.As(err, &nl), errors.Is(err, ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

func (g *grpcAPI) Report(ctx context.Context, r *allotv1.ReportRequest) (*allotv1.ReportResponse, error) {
	usage := make(map[string]shares.Usage, len(r.GetUsage()))
	for _, u := range r.GetUsage() {
		acc := usage[u.GetTenant()]
		acc.Offered += u.GetOffered()
		acc.Admitted += u.GetAdmitted()
		acc.Step = acc.Step || u.GetStep()
		usage[u.GetTenant()] = acc
	}
	held := heldFromPB(r)
	ans, err := g.c.Report(ctx, PodReport{
		Region: r.GetRegion(), Pod: r.GetPod(), Interval: time.Duration(r.GetIntervalMs()) * time.Millisecond,
		Term: r.GetTerm(), Applied: r.GetAppliedEpoch(), Usage: usage, LivePods: int(r.GetLivePods()), Held: held,
		Seq: r.GetSeq(), Partial: r.GetPartial(),
		Heard: r.GetHeardTerm(), RenewedBy: r.GetRenewedBy(), Leased: r.GetLeased(),
	})
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		return &allotv1.ReportResponse{Accepted: false, Leader: nl.Leader}, nil
	}
	if err != nil {
		return nil, GRPCError(err)
	}
	if ans.RegionRemoved {
		// Refused as invalid; the detail tells an honest pod of that
		// region to drop what it holds (its region left the policy).
		st, _ := status.New(codes.InvalidArgument, fmt.Sprintf("region %q is not in the policy", r.GetRegion())).
			WithDetails(&errdetails.ErrorInfo{Reason: ReasonRegionNotInPolicy, Domain: "allot"})
		return nil, st.Err()
	}
	out := g.answerPB(ans.Answer)
	out.Coordinators = ans.Coordinators
	return out, nil
}

// answerPB is an answer (or a push) as sent.
func (g *grpcAPI) answerPB(ans shares.Answer) *allotv1.ReportResponse {
	out := &allotv1.ReportResponse{
		Accepted: true, Leader: g.c.cfg.GRPCAddr, LeaseMs: ans.Lease.Milliseconds(),
		Term: ans.Term, Learning: ans.Learning, Full: ans.Full, Epoch: ans.Epoch, HeldTerm: ans.HeldTerm,
		LeasedForMs: ans.LeasedFor.Milliseconds(),
		ColdRate:    ans.Cold.Rate, ColdBurst: ans.Cold.Burst, SharePods: int32(ans.SharePods), Pods: int32(ans.Pods),
		ReportNow: ans.ReportNow,
	}
	if len(ans.ColdNamed) > 0 {
		out.ColdNamed = make(map[string]*allotv1.ColdFloor, len(ans.ColdNamed))
		for name, c := range ans.ColdNamed {
			out.ColdNamed[name] = &allotv1.ColdFloor{Rate: c.Rate, Burst: c.Burst}
		}
	}
	if len(ans.Entries) > 0 {
		out.Grants = make([]*allotv1.Grant, len(ans.Entries))
		for i, e := range ans.Entries {
			out.Grants[i] = ToGrantPB(e)
		}
	}
	return out
}

// Watch streams pushes of the pod's region's grants (Coordinator.Push) as
// they change, until the pod goes or this coordinator stops leading.
func (g *grpcAPI) Watch(r *allotv1.WatchRequest, stream allotv1.Coordinator_WatchServer) error {
	signals, cancel, err := g.c.Watch(r.GetRegion(), r.GetPod())
	if err != nil {
		return GRPCError(err)
	}
	defer cancel()
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, open := <-signals:
			if !open {
				return status.Error(codes.Unavailable, "this coordinator no longer leads, or a newer watch of this pod replaced this one")
			}
			ans, ok, err := g.c.Push(r.GetRegion(), r.GetPod())
			if err != nil {
				return GRPCError(err)
			}
			if !ok {
				continue
			}
			if err := stream.Send(g.answerPB(ans)); err != nil {
				return err
			}
		}
	}
}

// ReasonRegionNotInPolicy is the ErrorInfo reason of a report refused
// because its region is not in the policy.
const ReasonRegionNotInPolicy = "REGION_NOT_IN_POLICY"

// ToGrantPB is a grant as sent.
func ToGrantPB(e shares.Entry) *allotv1.Grant {
	return &allotv1.Grant{Tenant: e.Tenant, Rate: e.Grant.Rate, Burst: e.Grant.Burst,
		FloorRate: e.Grant.FloorRate, FloorBurst: e.Grant.FloorBurst, Epoch: e.Grant.Epoch, Dropped: e.Grant.Dropped,
		BudgetRate: e.Grant.BudgetRate, BudgetBurst: e.Grant.BudgetBurst}
}

// heldFromPB returns the grants a report says its pod holds: nil when it
// says nothing, empty (not nil) when it says the pod holds none.
func heldFromPB(r *allotv1.ReportRequest) []shares.Entry {
	h := r.GetHeld()
	if h == nil && !r.GetHeldSent() {
		return nil
	}
	held := make([]shares.Entry, 0, len(h))
	for _, e := range h {
		held = append(held, shares.Entry{Tenant: e.GetTenant(), Grant: fromGrantPB(e)})
	}
	return held
}

func fromGrantPB(g *allotv1.Grant) shares.Grant {
	return shares.Grant{Rate: g.GetRate(), Burst: g.GetBurst(), FloorRate: g.GetFloorRate(), FloorBurst: g.GetFloorBurst(),
		Epoch: g.GetEpoch(), Dropped: g.GetDropped(), BudgetRate: g.GetBudgetRate(), BudgetBurst: g.GetBudgetBurst()}
}

func (g *grpcAPI) authorize(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	var h string
	if v := md.Get("authorization"); len(v) > 0 {
		h = v[0]
	}
	if !g.auth.allows(h) {
		return GRPCError(errUnauthorized)
	}
	return nil
}

func toBudget(b BudgetView) *allotv1.Budget {
	return &allotv1.Budget{
		Tenant: b.Tenant, Name: b.Budget, Rate: b.Rate, Burst: b.Burst, Mode: b.Mode, Home: b.Home,
		Weights: b.Weights, Shadow: b.Shadow, Version: b.Version, UpdatedAt: b.UpdatedAt,
	}
}

func (g *grpcAPI) PutBudget(ctx context.Context, r *allotv1.PutBudgetRequest) (*allotv1.Budget, error) {
	if err := g.authorize(ctx); err != nil {
		return nil, err
	}
	b := r.GetBudget()
	v, err := g.c.PutBudget(ctx, BudgetView{
		Tenant: b.GetTenant(), Budget: b.GetName(), Rate: b.GetRate(), Burst: b.GetBurst(), Mode: b.GetMode(),
		Home: b.GetHome(), Weights: b.GetWeights(), Shadow: b.GetShadow(),
	}, r.GetIfVersion())
	if err != nil {
		return nil, GRPCError(err)
	}
	return toBudget(v), nil
}

func (g *grpcAPI) GetBudget(ctx context.Context, r *allotv1.GetBudgetRequest) (*allotv1.Budget, error) {
	v, err := g.c.GetBudget(ctx, r.GetTenant(), r.GetName())
	if err != nil {
		return nil, GRPCError(err)
	}
	return toBudget(v), nil
}

func (g *grpcAPI) ListBudgets(ctx context.Context, _ *allotv1.ListBudgetsRequest) (*allotv1.ListBudgetsResponse, error) {
	vs, err := g.c.ListBudgets(ctx)
	if err != nil {
		return nil, GRPCError(err)
	}
	out := &allotv1.ListBudgetsResponse{}
	for _, v := range vs {
		out.Budgets = append(out.Budgets, toBudget(v))
	}
	return out, nil
}

func (g *grpcAPI) DeleteBudget(ctx context.Context, r *allotv1.DeleteBudgetRequest) (*allotv1.DeleteBudgetResponse, error) {
	if err := g.authorize(ctx); err != nil {
		return nil, err
	}
	if err := g.c.DeleteBudget(ctx, r.GetTenant(), r.GetName()); err != nil {
		return nil, GRPCError(err)
	}
	return &allotv1.DeleteBudgetResponse{}, nil
}

func (g *grpcAPI) GetShares(ctx context.Context, r *allotv1.GetSharesRequest) (*allotv1.Shares, error) {
	v, err := g.c.Shares(ctx, r.GetTenant(), r.GetName())
	if err != nil {
		return nil, GRPCError(err)
	}
	out := &allotv1.Shares{Tenant: v.Tenant, Rate: v.Rate, Burst: v.Burst, Mode: v.Mode, Source: v.Source, Shard: int32(v.Shard)}
	if l := v.ShardLeader; l != nil {
		out.ShardLeader = &allotv1.ShardLeader{Shard: int32(l.Shard), Id: l.ID, Grpc: l.GRPC, Http: l.HTTP}
	}
	for _, s := range v.Regions {
		out.Regions = append(out.Regions, &allotv1.RegionShare{
			Region: s.Region, Rate: s.Rate, Burst: s.Burst, Epoch: s.Epoch, Demand: s.Demand, FloorRate: s.FloorRate,
		})
	}
	return out, nil
}

func (g *grpcAPI) Status(ctx context.Context, _ *allotv1.StatusRequest) (*allotv1.StatusResponse, error) {
	s, err := g.c.Status(ctx)
	if err != nil {
		return nil, GRPCError(err)
	}
	out := &allotv1.StatusResponse{
		IsLeader: s.IsLeader, Leader: s.Leader.GRPC, Id: s.ID, LastRebalance: s.LastRebalance,
		LastRebalanceMs: s.LastRebalanceMS, Tenants: int64(s.Tenants), PolicyVersion: s.PolicyVersion,
		Shard: int32(s.Shard), Shards: int32(s.Shards),
	}
	for _, l := range s.ShardLeaders {
		out.ShardLeaders = append(out.ShardLeaders, &allotv1.ShardLeader{Shard: int32(l.Shard), Id: l.ID, Grpc: l.GRPC, Http: l.HTTP})
	}
	for _, r := range s.Regions {
		out.Regions = append(out.Regions, &allotv1.RegionStatus{
			Region: r.Region, Pods: int32(r.Pods), LastReport: r.LastReport, AppliedEpoch: r.Applied, LeaseValid: r.LeaseValid,
		})
	}
	return out, nil
}

func toPolicy(p PolicyView) *allotv1.PolicyVersion {
	return &allotv1.PolicyVersion{Version: p.Version, Document: p.Document, AppliedAt: p.AppliedAt, Note: p.Note, RestoredFrom: p.RestoredFrom}
}

func (g *grpcAPI) ApplyPolicy(ctx context.Context, r *allotv1.ApplyPolicyRequest) (*allotv1.PolicyVersion, error) {
	if err := g.authorize(ctx); err != nil {
		return nil, err
	}
	v, err := g.c.ApplyPolicy(ctx, r.GetDocument(), r.GetIfVersion(), r.GetNote())
	if err != nil {
		return nil, GRPCError(err)
	}
	return toPolicy(v), nil
}

func (g *grpcAPI) GetPolicy(ctx context.Context, _ *allotv1.GetPolicyRequest) (*allotv1.PolicyVersion, error) {
	v, err := g.c.GetPolicy(ctx)
	if err != nil {
		return nil, GRPCError(err)
	}
	return toPolicy(v), nil
}

func (g *grpcAPI) PolicyHistory(ctx context.Context, r *allotv1.PolicyHistoryRequest) (*allotv1.PolicyHistoryResponse, error) {
	vs, err := g.c.PolicyHistory(ctx, int(r.GetLimit()))
	if err != nil {
		return nil, GRPCError(err)
	}
	out := &allotv1.PolicyHistoryResponse{}
	for _, v := range vs {
		out.Versions = append(out.Versions, toPolicy(v))
	}
	return out, nil
}

func (g *grpcAPI) RollbackPolicy(ctx context.Context, r *allotv1.RollbackPolicyRequest) (*allotv1.PolicyVersion, error) {
	if err := g.authorize(ctx); err != nil {
		return nil, err
	}
	v, err := g.c.RollbackPolicy(ctx, r.GetTo(), r.GetIfVersion())
	if err != nil {
		return nil, GRPCError(err)
	}
	return toPolicy(v), nil
}
