package coordinator

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/promreg"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// ReportAuth says whose reports the coordinator takes (docs/protocol.md:
// reports are authenticated, by mutual TLS or a region token). A report is taken when
// any of these holds:
//   - Insecure is set;
//   - it arrived on a TLS connection whose client certificate was verified
//     (a gRPC listener built with a client CA: --tls-client-ca);
//   - its gRPC metadata carries "authorization: Bearer <Token>", compared
//     in constant time.
//
// Otherwise it is refused with codes.Unauthenticated and a message saying
// what to do, before it is decoded further or reaches the leader, and
// counted in allot_coordinator_reports_rejected_total{reason}. The zero
// value takes no report at all.
type ReportAuth struct {
	// Token is the region token pods send (their --report-token-file);
	// empty: none.
	Token string
	// Insecure takes every report, from anyone who reaches the gRPC
	// listener (--insecure-reports: tests, allot dev, trusted networks).
	Insecure bool
}

// Validate reports a token that gRPC metadata cannot carry, or a token
// together with Insecure (which would make the token pointless).
func (a ReportAuth) Validate() error {
	if a.Insecure && a.Token != "" {
		return errors.New("a token and Insecure: choose one (Insecure takes reports without it)")
	}
	for _, r := range a.Token {
		if r <= ' ' || r > '~' {
			return fmt.Errorf("token: %q: want printable ASCII without spaces (it travels as gRPC metadata)", r)
		}
	}
	return nil
}

// Reasons a report is refused (the reason label).
const (
	rejectNoCredentials = "no_credentials" // no token and no verified client certificate
	rejectWrongToken    = "wrong_token"    // a token other than the coordinator's
)

// reportGuard checks reports' credentials.
type reportGuard struct {
	auth     ReportAuth
	rejected *prometheus.CounterVec
	log      *slog.Logger

	mu     sync.Mutex
	logged map[string]time.Time // reason -> last Warn
}

// rejectLogEvery bounds the Warn lines about refused reports to one per
// reason per period; the metric counts every one.
const rejectLogEvery = 30 * time.Second

// newReportGuard builds the guard and registers its metric on reg (nil:
// none). A collector already registered under the metric's name (a second
// RegisterGRPC on one registry) is shared; any other registration failure
// is logged and leaves the metric unexported: authentication never
// depends on it.
func newReportGuard(auth ReportAuth, reg prometheus.Registerer, log *slog.Logger) *reportGuard {
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_coordinator_reports_rejected_total",
		Help: "Pod reports refused as unauthenticated, by reason (no_credentials, wrong_token).",
	}, []string{"reason"})
	rejected, err := promreg.Register(reg, rejected)
	if err != nil {
		log.Error("register allot_coordinator_reports_rejected_total", "err", err)
	}
	for _, r := range []string{rejectNoCredentials, rejectWrongToken} {
		rejected.WithLabelValues(r)
	}
	return &reportGuard{auth: auth, rejected: rejected, log: log, logged: map[string]time.Time{}}
}

// check returns nil when ctx carries credentials the coordinator takes, and
// otherwise a codes.Unauthenticated status saying what to do.
func (g *reportGuard) check(ctx context.Context) error {
	if g.auth.Insecure || verifiedClientCert(ctx) {
		return nil
	}
	tok, sent := bearer(ctx)
	switch {
	case sent && g.auth.Token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(g.auth.Token)) == 1:
		return nil
	case g.auth.Token == "":
		return g.reject(ctx, rejectNoCredentials, "this coordinator takes no reports: it has no region token (--report-token-file), "+
			"verifies no client certificates (--tls-client-ca) and was not started with --insecure-reports")
	case sent:
		return g.reject(ctx, rejectWrongToken, "the report's token is not this coordinator's: give pods and coordinators "+
			"the same token (--report-token-file)")
	default:
		return g.reject(ctx, rejectNoCredentials, "reports need the region token as gRPC metadata 'authorization: Bearer <token>' "+
			"(start the pod with --report-token-file holding the coordinator's token)")
	}
}

func (g *reportGuard) reject(ctx context.Context, reason, msg string) error {
	g.rejected.WithLabelValues(reason).Inc()
	now := time.Now()
	g.mu.Lock()
	warn := now.Sub(g.logged[reason]) >= rejectLogEvery
	if warn {
		g.logged[reason] = now
	}
	g.mu.Unlock()
	if warn {
		from := "unknown"
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			from = p.Addr.String()
		}
		g.log.Warn("refused an unauthenticated report (logged at most every 30s per reason; allot_coordinator_reports_rejected_total counts all)",
			"reason", reason, "peer", from)
	}
	return status.Error(codes.Unauthenticated, "unauthenticated report: "+msg)
}

// bearer returns the token of the request's "authorization: Bearer" metadata.
func bearer(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
			return strings.TrimSpace(tok), true
		}
	}
	return "", false
}

// verifiedClientCert reports whether the request came over TLS with a
// client certificate that the server verified.
func verifiedClientCert(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	return ok && len(ti.State.VerifiedChains) > 0
}

// reportGate serves allot.v1.Coordinator behind the guard. It embeds the
// Unimplemented server, not the API, on purpose: a method added to the
// service stays Unimplemented until it is forwarded here behind the check,
// so none is ever served unauthenticated by omission.
type reportGate struct {
	allotv1.UnimplementedCoordinatorServer
	api   allotv1.CoordinatorServer
	guard *reportGuard
}

func (g *reportGate) Report(ctx context.Context, r *allotv1.ReportRequest) (*allotv1.ReportResponse, error) {
	if err := g.guard.check(ctx); err != nil {
		return nil, err
	}
	return g.api.Report(ctx, r)
}

func (g *reportGate) Watch(r *allotv1.WatchRequest, stream allotv1.Coordinator_WatchServer) error {
	if err := g.guard.check(stream.Context()); err != nil {
		return err
	}
	return g.api.Watch(r, stream)
}

// gateReports wraps api in the coordinator's report authentication
// (Config.Reports).
func (c *Coordinator) gateReports(api allotv1.CoordinatorServer) allotv1.CoordinatorServer {
	return &reportGate{api: api, guard: newReportGuard(c.cfg.Reports, c.cfg.Registerer, c.log)}
}
