package regional

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
	"github.com/allot-dev/allot/shares"
)

// reporter sends the pod's counts to the leader every interval and applies
// the lease its answer carries. A report that fails is dropped (its counts
// are lost, not retried): the next interval's report carries fresh ones.
type reporter struct {
	s *Service

	mu     sync.Mutex
	leader string // gRPC address
	conn   *grpc.ClientConn
	// peers are the coordinators the last answer listed; tried in turn
	// when the leader and etcd are both out of reach.
	peers []string
	next  int
	// Dial opens a connection to a leader; tests may replace it.
	dial func(addr string) (*grpc.ClientConn, error)
}

func newReporter(s *Service) *reporter {
	creds := s.cfg.CoordinatorCreds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithChainUnaryInterceptor(newAnswerCheck(s).intercept),
	}
	if s.cfg.ReportToken != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(reportToken(s.cfg.ReportToken)))
	}
	return &reporter{s: s, dial: func(addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, opts...)
	}}
}

// promptSettle is how long a prompt report waits after the shrink that
// triggered it, so that the rest of the leader's batch (one etcd
// transaction, delivered as one watch response) is applied and acknowledged
// by the same report.
const promptSettle = 20 * time.Millisecond

// promptGate allows at most one prompt report per interval.
type promptGate struct {
	every time.Duration
	last  time.Time // zero: none yet
}

// allow reports whether a prompt report may be sent at now, and if so
// counts it.
func (g *promptGate) allow(now time.Time) bool {
	if !g.last.IsZero() && now.Sub(g.last) < g.every {
		return false
	}
	g.last = now
	return true
}

func (r *reporter) run(ctx context.Context) error {
	t := time.NewTicker(r.s.cfg.ReportInterval)
	defer t.Stop()
	defer r.close()
	// Besides every interval, report soon after applying a shrink (at most
	// once per interval): the leader may be holding a grow elsewhere until
	// this pod acknowledges it.
	gate := promptGate{every: r.s.cfg.ReportInterval}
	settle := time.NewTimer(promptSettle)
	settle.Stop()
	defer settle.Stop()
	// The first report goes at once: until a leader answers, the pod
	// enforces nothing for budget limits (and is not ready).
	r.report(ctx, r.s.counts.drain(), r.s.cfg.ReportInterval)
	last := r.s.cfg.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.s.view.shrunk:
			if gate.allow(r.s.cfg.Now()) {
				settle.Reset(promptSettle)
			}
			continue
		case <-settle.C:
		case <-t.C:
		}
		now := r.s.cfg.Now()
		usage := r.s.counts.drain()
		r.report(ctx, usage, now.Sub(last))
		last = now
	}
}

func (r *reporter) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn, r.leader = nil, ""
	}
}

// client returns a client of the leader, looking it up in the election
// when unknown.
func (r *reporter) client(ctx context.Context) (allotv1.CoordinatorClient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		addr := ""
		l, err := r.s.store.Leader(ctx)
		switch {
		case err == nil && l.GRPC != "":
			addr = l.GRPC
		case len(r.peers) > 0:
			// etcd is out of reach (or names no leader): ask the
			// coordinators the leader listed, in turn; a follower
			// names the leader.
			addr = r.peers[r.next%len(r.peers)]
			r.next++
		case err != nil:
			return nil, err
		default:
			return nil, errors.New("the leader publishes no gRPC address")
		}
		c, err := r.dial(addr)
		if err != nil {
			return nil, err
		}
		r.conn, r.leader = c, addr
	}
	return allotv1.NewCoordinatorClient(r.conn), nil
}

// redirect switches to the leader a follower named.
func (r *reporter) redirect(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		_ = r.conn.Close()
	}
	r.conn, r.leader = nil, ""
	if addr == "" {
		return
	}
	if c, err := r.dial(addr); err == nil {
		r.conn, r.leader = c, addr
	}
}

// report sends one report (following one redirect) and applies the answer.
func (r *reporter) report(ctx context.Context, usage map[string]shares.Usage, interval time.Duration) {
	term, applied, held := r.s.view.reportState()
	req := &allotv1.ReportRequest{
		Region: r.s.cfg.Region, Pod: r.s.cfg.Pod, IntervalMs: max(1, interval.Milliseconds()),
		Term: term, AppliedEpoch: applied, LivePods: int32(r.s.livePods()),
	}
	req.Held, req.HeldSent = heldPB(held), held != nil
	for t, u := range usage {
		req.Usage = append(req.Usage, &allotv1.TenantUsage{Tenant: t, Offered: u.Offered, Admitted: u.Admitted})
	}
	for attempt := 0; attempt < 2; attempt++ {
		// The leader lookup reads etcd: bound it like the report, so a
		// pod cut off from etcd keeps reporting (and failing) every
		// interval instead of hanging on a dead connection.
		lctx, lcancel := context.WithTimeout(ctx, r.s.cfg.ReportTimeout)
		cl, err := r.client(lctx)
		lcancel()
		if err != nil {
			r.s.m.reports.WithLabelValues("no_leader").Inc()
			r.s.log.Debug("no leader to report to", "err", err)
			r.s.view.unanswered()
			return
		}
		rctx, cancel := context.WithTimeout(ctx, r.s.cfg.ReportTimeout)
		// The lease counts from when the report was sent (monotonic clock).
		sentAt := r.s.cfg.Now()
		resp, err := cl.Report(rctx, req, grpc.MaxCallRecvMsgSize(maxAnswerBytes))
		cancel()
		if regionNotInPolicy(err) {
			r.s.m.reports.WithLabelValues("region_removed").Inc()
			r.s.log.Warn("the leader says this pod's region is not in the policy: enforcing nothing for budget limits",
				"region", r.s.cfg.Region)
			r.s.view.removed()
			return
		}
		if status.Code(err) == codes.FailedPrecondition {
			// The leader has no policy yet (it loads one at its next
			// rebalance): not a failure of this pod's.
			r.s.m.reports.WithLabelValues("no_policy").Inc()
			r.s.log.Debug("the leader has no policy yet", "err", err)
			return
		}
		if err != nil {
			r.s.m.reports.WithLabelValues("failed").Inc()
			r.s.log.Debug("report failed", "err", err)
			r.redirect("") // look the leader up again next time
			r.s.view.unanswered()
			return
		}
		if !resp.GetAccepted() {
			r.s.m.reports.WithLabelValues("redirected").Inc()
			r.redirect(resp.GetLeader())
			r.s.view.unanswered()
			// Carry what the pod holds to the leader named (a new one may
			// renew it).
			term, applied, held = r.s.view.reportState()
			req.Term, req.AppliedEpoch, req.Held, req.HeldSent = term, applied, heldPB(held), held != nil
			continue
		}
		if p := resp.GetCoordinators(); len(p) > 0 {
			r.mu.Lock()
			r.peers = p
			r.mu.Unlock()
		}
		if resp.GetLearning() {
			r.s.m.reports.WithLabelValues("learning").Inc()
		} else {
			r.s.m.reports.WithLabelValues("accepted").Inc()
		}
		r.s.view.answered(sentAt, answerFromPB(resp), r.s.cfg.Now())
		return
	}
}

// regionNotInPolicy reports whether a report was refused because the pod's
// region is not in the policy.
func regionNotInPolicy(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == "REGION_NOT_IN_POLICY" {
			return true
		}
	}
	return false
}

// heldPB is held as sent (nil for nil).
func heldPB(held []shares.Entry) []*allotv1.Grant {
	if held == nil {
		return nil
	}
	out := make([]*allotv1.Grant, len(held))
	for i, e := range held {
		out[i] = &allotv1.Grant{Tenant: e.Tenant, Rate: e.Grant.Rate, Burst: e.Grant.Burst,
			FloorRate: e.Grant.FloorRate, FloorBurst: e.Grant.FloorBurst, Epoch: e.Grant.Epoch,
			BudgetRate: e.Grant.BudgetRate, BudgetBurst: e.Grant.BudgetBurst}
	}
	return out
}

// maxAnswerBytes bounds an answer (a full sync of every grant of a region:
// about 40 bytes per tenant).
const maxAnswerBytes = 256 << 20

func answerFromPB(resp *allotv1.ReportResponse) shares.Answer {
	a := shares.Answer{
		Term: resp.GetTerm(), Learning: resp.GetLearning(), Lease: time.Duration(resp.GetLeaseMs()) * time.Millisecond,
		Full: resp.GetFull(), Epoch: resp.GetEpoch(), HeldTerm: resp.GetHeldTerm(),
		LeasedFor: time.Duration(resp.GetLeasedForMs()) * time.Millisecond,
		Cold:      shares.Ceiling{Rate: resp.GetColdRate(), Burst: resp.GetColdBurst()},
		SharePods: int(resp.GetSharePods()), Pods: int(resp.GetPods()),
	}
	if gs := resp.GetGrants(); len(gs) > 0 {
		a.Entries = make([]shares.Entry, len(gs))
		for i, g := range gs {
			a.Entries[i] = shares.Entry{Tenant: g.GetTenant(), Grant: shares.Grant{Rate: g.GetRate(), Burst: g.GetBurst(),
				FloorRate: g.GetFloorRate(), FloorBurst: g.GetFloorBurst(), Epoch: g.GetEpoch(), Dropped: g.GetDropped(),
				BudgetRate: g.GetBudgetRate(), BudgetBurst: g.GetBudgetBurst()}}
		}
	}
	return a
}
