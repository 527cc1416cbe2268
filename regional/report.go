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

	"github.com/allot-dev/allot/internal/state"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
	"github.com/allot-dev/allot/shares"
)

// reporter sends the pod's counts of one coordinator shard's tenants to
// that shard's leader every interval and applies the lease its answer
// carries. A report that fails is dropped (its counts are lost, not
// retried): the next interval's report carries fresh ones. A pod runs one
// per shard.
type reporter struct {
	s      *Service
	shard  int
	store  *state.Store // the shard's election
	counts *counters    // the shard's tenants' counts
	shrunk <-chan struct{}

	mu     sync.Mutex
	leader string // gRPC address
	conn   *grpc.ClientConn
	// peers are the coordinators the last answer listed; tried in turn
	// when the leader and etcd are both out of reach.
	peers []string
	next  int
	// Dial opens a connection to a leader; tests may replace it.
	dial func(addr string) (*grpc.ClientConn, error)
	// seq numbers the reports (only the reporter goroutine touches it).
	seq uint64
	// answered is signalled (without blocking; buffered 1) when a leader
	// accepted a report: a watch stream waiting out its backoff opens
	// again at once, so that pushes reach the pod as soon as a leader
	// answers it (a pod that started, or found a new leader).
	answered chan struct{}
}

func newReporter(s *Service, shard int, counts *counters) *reporter {
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
	return &reporter{s: s, shard: shard, store: s.store.Shard(shard), counts: counts, shrunk: s.view.shrunk[shard], answered: make(chan struct{}, 1), dial: func(addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, opts...)
	}}
}

// Times of the reports a pod sends out of its period (docs/protocol.md,
// "Early reports"): a step goes at most once per stepGap (a first sight,
// which asks for a grant, within ackGap), the
// acknowledgement of a shrink (which a grow elsewhere may wait for) within
// ackGap, long enough for the rest of a batch of changes to arrive with it.
// After a report failed the pod reports again after resendAfter, doubling
// up to resendMax (or the interval): a pod cut off from the coordinators
// learns within half a second that it reaches them again.
const (
	stepGap     = 100 * time.Millisecond
	ackGap      = 20 * time.Millisecond
	resendAfter = 250 * time.Millisecond
	resendMax   = 500 * time.Millisecond
)

// firstSights spaces the early reports that carry a tenant's first sight:
// ackGap after the last early report, at most firstPerSec a second (a
// bucket of firstBurst), so that a caller inventing new keys (a per-user
// limit's values) cannot make a pod report every ackGap; past that, a first
// sight waits stepGap as any step.
type firstSights struct {
	tokens float64
	at     time.Time
}

const (
	firstPerSec = 10
	firstBurst  = 5
)

// gap returns the least gap before the early report of tr's steps at now:
// ackGap for a first sight (the pod enforces its cold floor until the
// answer: it asks for its grant at once) while the budget lasts, else
// stepGap.
func (f *firstSights) gap(tr *shares.Tracker, now time.Time) time.Duration {
	if tr.FirstSights() == 0 || f.left(now) < 1 {
		return stepGap
	}
	return ackGap
}

// sent spends the budget of one early report, sent at now, that carries a
// first sight.
func (f *firstSights) sent(now time.Time) { f.tokens = max(0, f.left(now)-1) }

// left refills the budget to now and returns it.
func (f *firstSights) left(now time.Time) float64 {
	if f.at.IsZero() {
		f.tokens = firstBurst
	} else {
		f.tokens = min(firstBurst, f.tokens+now.Sub(f.at).Seconds()*firstPerSec)
	}
	f.at = now
	return f.tokens
}

// earlyGate spaces the reports sent out of period.
type earlyGate struct {
	last time.Time // the last early report (zero: none)
	due  time.Time // one is scheduled then (zero: none)
}

// next returns when an early report wanted at now with the least gap gap
// may go, and whether one is already scheduled by then.
func (g *earlyGate) next(now time.Time, gap time.Duration) (time.Time, bool) {
	at := now
	if !g.last.IsZero() && g.last.Add(gap).After(at) {
		at = g.last.Add(gap)
	}
	if !g.due.IsZero() && !g.due.After(at) {
		return g.due, true
	}
	return at, false
}

func (r *reporter) run(ctx context.Context) error {
	cfg := r.s.cfg
	t := time.NewTicker(cfg.ReportInterval)
	defer t.Stop()
	defer r.close()
	tr, err := shares.NewTracker(cfg.Now(), shares.TrackerConfig{})
	if err != nil {
		return err
	}
	// The tracker sees the counts every StepCheck; a tenant counted for the
	// first time is seen at once.
	var check <-chan time.Time
	if cfg.StepCheck > 0 {
		ct := time.NewTicker(cfg.StepCheck)
		defer ct.Stop()
		check = ct.C
	}
	early := time.NewTimer(time.Hour)
	early.Stop()
	defer early.Stop()
	resend := time.NewTimer(time.Hour)
	resend.Stop()
	defer resend.Stop()
	// Pushes come on a watch stream of their own, beside the reports.
	var wg sync.WaitGroup
	wctx, stopWatch := context.WithCancel(ctx)
	wg.Go(func() { r.watch(wctx) })
	defer wg.Wait()
	defer stopWatch()
	var gate earlyGate
	var firsts firstSights
	fails := 0
	want := func(gap time.Duration) {
		now := cfg.Now()
		at, scheduled := gate.next(now, gap)
		if scheduled {
			return
		}
		gate.due = at
		early.Reset(at.Sub(now))
	}
	full := func() {
		ok := r.report(ctx, r.take(tr, true))
		resend.Stop()
		if ok {
			fails = 0
			return
		}
		resend.Reset(min(resendAfter<<min(fails, 10), resendMax, cfg.ReportInterval))
		fails++
	}
	// The first report goes at once: until a leader answers, the pod
	// enforces nothing for budget limits (and is not ready).
	full()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			full()
		case <-resend.C:
			full()
		case <-check:
			if r.feed(tr, false) {
				want(firsts.gap(tr, cfg.Now()))
			}
		case <-r.counts.fresh:
			if r.feed(tr, false) {
				want(firsts.gap(tr, cfg.Now()))
			}
		case <-r.shrunk:
			want(ackGap)
		case <-early.C:
			gate.last, gate.due = cfg.Now(), time.Time{}
			if tr.FirstSights() > 0 {
				firsts.sent(gate.last)
			}
			if !r.report(ctx, r.take(tr, false)) {
				resend.Reset(min(resendAfter<<min(fails, 10), resendMax, cfg.ReportInterval))
				fails++
			}
		}
	}
}

// watch keeps a watch stream open to the leader and applies what it pushes
// (grants that changed, as they change: docs/protocol.md, "Pushes"). When
// the stream ends (the leader changed, or the connection broke) it opens it
// again, at once after a stream that delivered, else after a backoff.
func (r *reporter) watch(ctx context.Context) {
	backoff := resendAfter
	for ctx.Err() == nil {
		if r.watchOnce(ctx) {
			backoff = resendAfter
		}
		wait := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			wait.Stop()
			return
		case <-wait.C:
			backoff = min(2*backoff, r.s.cfg.ReportInterval)
		case <-r.answered:
			// A leader answers now: open the stream to it at once.
			wait.Stop()
		}
	}
}

// watchOnce runs one watch stream, and reports whether it delivered.
func (r *reporter) watchOnce(ctx context.Context) bool {
	lctx, cancel := context.WithTimeout(ctx, r.s.cfg.ReportTimeout)
	cl, err := r.client(lctx)
	cancel()
	if err != nil {
		return false
	}
	stream, err := cl.Watch(ctx, &allotv1.WatchRequest{Region: r.s.cfg.Region, Pod: r.s.cfg.Pod}, grpc.MaxCallRecvMsgSize(maxAnswerBytes))
	if err != nil {
		return false
	}
	got := false
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				r.s.m.pushes.WithLabelValues("reconnect").Inc()
				r.s.log.Debug("watch stream ended", "err", err)
			}
			return got
		}
		if !resp.GetAccepted() {
			continue
		}
		r.s.view.pushed(r.shard, answerFromPB(resp), r.s.cfg.Now())
		r.s.m.pushes.WithLabelValues("applied").Inc()
		got = true
	}
}

// feed hands the counts since the last feed to the tracker (with evict, as
// a periodic report does, forgetting idle tenants' counters), and reports
// whether some tenant stepped and is not reported yet.
func (r *reporter) feed(tr *shares.Tracker, evict bool) bool {
	now := r.s.cfg.Now()
	for t, u := range r.counts.drain(evict) {
		if u.Decisions > 0 {
			tr.AddDecisions(now, t, u.Offered, u.Admitted, u.Decisions)
		} else {
			tr.Add(now, t, u.Offered, u.Admitted)
		}
	}
	return tr.Steps() > 0
}

// outgoing is a report's usage: periodic (full), or early (partial: the
// tenants that stepped, or none).
type outgoing struct {
	usage    map[string]shares.Usage
	interval time.Duration
	partial  bool
}

// take builds the next report from the tracker: with full every tenant's
// counts since the last periodic report, else the tenants that stepped.
func (r *reporter) take(tr *shares.Tracker, full bool) outgoing {
	r.feed(tr, full)
	now := r.s.cfg.Now()
	if full {
		u, iv := tr.TakeAll(now)
		return outgoing{usage: u, interval: iv}
	}
	u, iv := tr.TakeSteps(now)
	r.s.m.earlyReports.WithLabelValues(earlyReason(len(u))).Inc()
	return outgoing{usage: u, interval: max(iv, time.Millisecond), partial: true}
}

func earlyReason(steps int) string {
	if steps > 0 {
		return "step"
	}
	return "ack"
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
		l, err := r.store.Leader(ctx)
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

// report sends one report (following one redirect), applies the answer,
// and reports whether a leader answered.
func (r *reporter) report(ctx context.Context, out outgoing) bool {
	r.seq++
	req := &allotv1.ReportRequest{
		Region: r.s.cfg.Region, Pod: r.s.cfg.Pod, IntervalMs: max(1, out.interval.Milliseconds()),
		LivePods: int32(r.s.livePods()), Seq: r.seq, Partial: out.partial,
	}
	r.setState(req)
	for t, u := range out.usage {
		req.Usage = append(req.Usage, &allotv1.TenantUsage{Tenant: t, Offered: u.Offered, Admitted: u.Admitted, Step: u.Step})
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
			r.s.view.unanswered(r.shard)
			return false
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
			r.s.view.removed(r.shard)
			return true
		}
		if status.Code(err) == codes.FailedPrecondition {
			// The leader has no policy yet (it loads one at its next
			// rebalance): not a failure of this pod's.
			r.s.m.reports.WithLabelValues("no_policy").Inc()
			r.s.log.Debug("the leader has no policy yet", "err", err)
			return true
		}
		if err != nil {
			r.s.m.reports.WithLabelValues("failed").Inc()
			r.s.log.Debug("report failed", "err", err)
			r.redirect("") // look the leader up again next time
			r.s.view.unanswered(r.shard)
			return false
		}
		if !resp.GetAccepted() {
			r.s.m.reports.WithLabelValues("redirected").Inc()
			r.redirect(resp.GetLeader())
			r.s.view.unanswered(r.shard)
			// Carry what the pod holds to the leader named (a new one may
			// renew it).
			r.setState(req)
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
		r.s.view.answered(r.shard, sentAt, answerFromPB(resp), r.s.cfg.Now())
		select {
		case r.answered <- struct{}{}:
		default:
		}
		return true
	}
	return false
}

// setState sets what req says of the grants the pod holds and of its
// standing, read at once.
func (r *reporter) setState(req *allotv1.ReportRequest) {
	term, applied, held, st := r.s.view.reportState(r.shard, r.s.cfg.Now())
	req.Term, req.AppliedEpoch = term, applied
	req.Held, req.HeldSent = heldPB(held), held != nil
	req.HeardTerm, req.RenewedBy, req.Leased = st.heard, st.renewedBy, st.leased
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
		SharePods: int(resp.GetSharePods()), Pods: int(resp.GetPods()), ReportNow: resp.GetReportNow(),
	}
	if cn := resp.GetColdNamed(); len(cn) > 0 {
		a.ColdNamed = make(map[string]shares.Ceiling, len(cn))
		for name, c := range cn {
			a.ColdNamed[name] = shares.Ceiling{Rate: c.GetRate(), Burst: c.GetBurst()}
		}
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
