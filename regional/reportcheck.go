package regional

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// answerCheck reads the leader's answers to this pod's reports for what only
// they can tell about the pod's settings, and says so at Warn: a lease
// that, less Drift, does not outlast ReportInterval (the lease lapses
// between reports and the pod falls back to its floors every time; the
// lease is the coordinator's --lease, so no check at start can see this),
// and a report refused as unauthenticated (a missing or wrong
// --report-token-file), which the reporter only counts as failed.
// It is a unary client interceptor on the reporter's connections; it
// changes no call.
type answerCheck struct {
	interval, drift time.Duration
	log             *slog.Logger

	mu        sync.Mutex
	warnedFor time.Duration // the lease last warned about; 0: none
	refusedAt time.Time     // last warning about a refused report
}

func newAnswerCheck(s *Service) *answerCheck {
	return &answerCheck{interval: s.cfg.ReportInterval, drift: s.cfg.Drift, log: s.log}
}

func (a *answerCheck) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if resp, ok := reply.(*allotv1.ReportResponse); ok && err == nil && resp.GetAccepted() {
		a.lease(time.Duration(resp.GetLeaseMs()) * time.Millisecond)
	}
	if status.Code(err) == codes.Unauthenticated {
		a.refused(err)
	}
	return err
}

// refused warns, at most once per refusedLogEvery, that the coordinator
// refused a report as unauthenticated, with its reason (which says what to
// do). The reporter itself only counts the failure.
func (a *answerCheck) refused(err error) {
	now := time.Now()
	a.mu.Lock()
	warn := a.refusedAt.IsZero() || now.Sub(a.refusedAt) >= refusedLogEvery
	if warn {
		a.refusedAt = now
	}
	a.mu.Unlock()
	if warn {
		a.log.Warn("the coordinator refused this pod's report as unauthenticated: its lease lapses: it enforces the floors a leader gave it, or nothing if none ever answered it "+
			"(logged at most every 30s)", "err", status.Convert(err).Message())
	}
}

// refusedLogEvery bounds the warnings about refused reports.
const refusedLogEvery = 30 * time.Second

// lease checks one answer's lease, warning once per lease value.
func (a *answerCheck) lease(l time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l-a.drift > a.interval {
		a.warnedFor = 0 // fine again; a later short lease warns again
		return
	}
	if a.warnedFor == l {
		return
	}
	a.warnedFor = l
	a.log.Warn("the leader's lease minus --lease-drift does not outlast --report-interval: this pod's lease lapses between reports "+
		"and it enforces its floors until the next answer; lower --report-interval or --lease-drift, or raise the coordinator's --lease",
		"lease", l, "lease_drift", a.drift, "report_interval", a.interval)
}
