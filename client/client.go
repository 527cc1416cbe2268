package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/coalesce"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// Errors callers branch on with errors.Is. Every error Decide and
// DecideBatch return is one or the other.
var (
	// ErrUnavailable: the limiter gave no decision. It was unreachable, did
	// not answer within the timeout, was not ready (no policy loaded yet),
	// or failed. The request itself may be fine; decide whether to fail open
	// or closed. The gRPC status survives: status.Code(err) tells which, and
	// errors.Is(err, context.DeadlineExceeded) holds when the call's deadline
	// passed.
	ErrUnavailable = errors.New("allot: limiter unavailable")
	// ErrInvalid: the request was bad (no tenant, cost < 1, cost above a
	// limit's burst, too many descriptors...). Retrying it unchanged will not
	// help. The message names the field.
	ErrInvalid = errors.New("allot: invalid request")
	// ErrSettleGone: a settle token that names no reservation: unknown,
	// expired (the pods' --settle-ttl), or settled already. Nothing
	// changed; retrying will not help.
	ErrSettleGone = errors.New("allot: settle token unknown, expired or already settled")
	// ErrNotReserved: Decision.Settle on a decision without a settle token
	// (not reserved, denied, or decided without the limiter's store).
	ErrNotReserved = errors.New("allot: decision has no settle token")
)

// DefaultTimeout bounds each call unless Config.Timeout says otherwise: a
// regional pod answers from Redis within a few milliseconds, and a request
// that waits longer on its rate limiter is better served by the failure mode.
const DefaultTimeout = 20 * time.Millisecond

// roundRobin spreads calls over every address the target resolves to (the
// pods of a region behind a headless service), rather than pinning all of
// one process's calls to the first pod.
const roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// Config configures a Client. Start from DefaultConfig.
type Config struct {
	// Target is the region's limiter (allot regional --grpc-listen) in the
	// syntax of grpc.NewClient: "dns:///allot-regional.allot.svc:9090",
	// "127.0.0.1:9090". Required.
	Target string
	// Timeout bounds each Decide and DecideBatch call, dial included, unless
	// the caller's context ends sooner. Default DefaultTimeout (20ms).
	Timeout time.Duration
	// TLS secures the connection (set Certificates for mTLS). It is cloned;
	// later changes to it do not affect the Client.
	TLS *tls.Config
	// Insecure connects in plaintext: loopback, or a mesh that does mTLS.
	// Set exactly one of TLS and Insecure, or neither and pass transport
	// credentials in DialOptions.
	Insecure bool
	// DialOptions are passed to grpc.NewClient after the Client's own
	// (transport credentials from TLS or Insecure; a round_robin default
	// service config; no idle timeout), so they can override them:
	// interceptors, keepalive, credentials, a different balancer.
	DialOptions []grpc.DialOption
	// Coalesce merges Decide calls made at the same time in this process
	// into DecideBatch RPCs, by natural batching: a call that finds fewer
	// than 4 RPCs in flight is sent at once, alone, so at low load nothing
	// changes; calls arriving while 4 are in flight wait and go together in
	// the next one. Under concurrency this cuts the CPU that the limiter and
	// this process spend per decision several-fold (BENCHMARKS.md). Each
	// call keeps its own answer, error and deadline. DefaultConfig sets it.
	Coalesce bool
	// MaxBatch caps the decisions merged into one RPC when Coalesce is set:
	// 1 to 256. DefaultConfig sets DefaultMaxBatch.
	MaxBatch int
}

// DefaultMaxBatch is Config.MaxBatch's default.
const DefaultMaxBatch = 64

// coalesceFlushers is how many merged RPCs may be in flight at once.
const coalesceFlushers = 4

// DefaultConfig returns the defaults; set Target and one of TLS or Insecure.
func DefaultConfig() Config {
	return Config{Timeout: DefaultTimeout, Coalesce: true, MaxBatch: DefaultMaxBatch}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case strings.TrimSpace(c.Target) == "":
		return errors.New("client config: Target: required, e.g. \"dns:///allot-regional:9090\"")
	case c.Timeout <= 0:
		return fmt.Errorf("client config: Timeout: %v: must be positive", c.Timeout)
	case c.Coalesce && (c.MaxBatch < 1 || c.MaxBatch > maxBatch):
		return fmt.Errorf("client config: MaxBatch: %d: must be 1 to %d when Coalesce is set", c.MaxBatch, maxBatch)
	case c.TLS != nil && c.Insecure:
		return errors.New("client config: TLS and Insecure: set one, not both")
	case c.TLS == nil && !c.Insecure && len(c.DialOptions) == 0:
		return errors.New("client config: TLS: required unless Insecure is set or DialOptions carry transport credentials")
	}
	return nil
}

// Decision is the limiter's answer to one request. It mirrors the decision
// of the regional service (package regional).
type Decision struct {
	// Allowed: admit the request.
	Allowed bool
	// Remaining whole units of the limiting limit in this region after this
	// decision.
	Remaining int64
	// RetryAfter is the wait before the same request could be admitted; set
	// when denied.
	RetryAfter time.Duration
	// ResetAfter is the wait until the limiting limit is fully rested.
	ResetAfter time.Duration
	// Limit names the limiting limit; "" when no limit matched.
	Limit string
	// Shadow: a shadow limit would have denied; the request is not denied
	// for it.
	Shadow bool
	// Closed: denied only because the limiter's store is unavailable and
	// the limit fails closed; the caller did not exceed its allowance. The
	// middleware answers 503, not 429.
	Closed bool
	// Fallback: the limiter decided without its store (Redis failed), as the
	// limit's on_failure says.
	Fallback bool
	// Quota units per Window is the limiting limit's advertised policy (the
	// global budget for budget limits), for RateLimit-Policy.
	Quota  int64
	Window time.Duration
	// SettleToken settles a reserved decision (Client.Reserve) with its
	// actual cost; "" when there is nothing to settle.
	SettleToken string

	client *Client // that reserved it, for Settle
}

// Settle settles a reserved decision with its actual cost (Client.Settle).
// A decision without a settle token returns ErrNotReserved.
func (d Decision) Settle(ctx context.Context, actual int64) (Settled, error) {
	if d.SettleToken == "" || d.client == nil {
		return Settled{}, ErrNotReserved
	}
	return d.client.Settle(ctx, d.SettleToken, actual)
}

// Settled is what a settle did: units given back to every limit the
// decision charged (Refunded), or owed by each as debt (Charged).
type Settled struct {
	Reserved, Actual, Refunded, Charged int64
}

// Request is one request of a batch.
type Request struct {
	// Descriptors name the caller, e.g. {"tenant": "t42", "user": "7"}.
	Descriptors map[string]string
	// Cost is the units the request counts as, at least 1.
	Cost int64
}

// Decider decides requests: the narrow interface the middleware needs.
// *Client satisfies it; so does DeciderFunc.
type Decider interface {
	// Decide decides one request of cost units. Errors should wrap
	// ErrInvalid when the request is bad; any other error is treated as the
	// limiter being unavailable.
	Decide(ctx context.Context, descriptors map[string]string, cost int64) (Decision, error)
}

// DeciderFunc adapts a function to Decider, for tests and for wrapping a
// Client (caching, logging, a second region...).
type DeciderFunc func(ctx context.Context, descriptors map[string]string, cost int64) (Decision, error)

// Decide calls f.
func (f DeciderFunc) Decide(ctx context.Context, descriptors map[string]string, cost int64) (Decision, error) {
	return f(ctx, descriptors, cost)
}

// Client calls a region's allot.v1.Limiter over gRPC. It is safe for
// concurrent use; create one per process and Close it on shutdown.
type Client struct {
	timeout time.Duration
	conn    *grpc.ClientConn
	api     allotv1.LimiterClient
	co      *coalesce.Coalescer[*allotv1.DecideRequest, answer] // nil: Coalesce off
}

// maxBatch is the regional service's cap on one DecideBatch.
const maxBatch = 256

// answer is one coalesced decision's outcome: a response or a gRPC error.
type answer struct {
	resp *allotv1.DecideResponse
	err  error
}

var _ Decider = (*Client)(nil)

// New validates cfg and creates a Client. It starts connecting at once, in
// the background, so that the first call does not pay the whole dial; it
// never blocks on the network. cfg is not modified.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := make([]grpc.DialOption, 0, 2+len(cfg.DialOptions))
	switch {
	case cfg.TLS != nil:
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg.TLS.Clone())))
	case cfg.Insecure:
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	// Never idle: a quiet half hour must not make the next request pay a
	// whole dial against a 20ms timeout (gRPC's default idles after 30m).
	opts = append(opts, grpc.WithDefaultServiceConfig(roundRobin), grpc.WithIdleTimeout(0))
	opts = append(opts, slices.Clone(cfg.DialOptions)...)
	conn, err := grpc.NewClient(cfg.Target, opts...)
	if err != nil {
		return nil, fmt.Errorf("client: %s: %w", cfg.Target, err)
	}
	conn.Connect()
	c := &Client{timeout: cfg.Timeout, conn: conn, api: allotv1.NewLimiterClient(conn)}
	if cfg.Coalesce {
		cc := coalesce.DefaultConfig()
		cc.MaxBatch, cc.Flushers, cc.Timeout = cfg.MaxBatch, coalesceFlushers, cfg.Timeout
		if c.co, err = coalesce.New(c.send, cc); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("client: %w", err)
		}
	}
	return c, nil
}

// Close closes the connection. Calls after Close fail with ErrUnavailable.
func (c *Client) Close() error { return c.conn.Close() }

// Decide decides one request of cost units (at least 1) for the caller the
// descriptors name; every matching limit is checked, all or nothing. The
// call is bounded by the Client's timeout and by ctx. An error wraps
// ErrUnavailable or ErrInvalid.
func (c *Client) Decide(ctx context.Context, descriptors map[string]string, cost int64) (Decision, error) {
	if cost < 1 {
		return Decision{}, invalidf("cost: %d: want a whole number of units ≥ 1", cost)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req := &allotv1.DecideRequest{Descriptors: descriptors, Cost: cost}
	if c.co == nil {
		r, err := c.api.Decide(ctx, req)
		if err != nil {
			return Decision{}, classify(ctx, err)
		}
		return fromProto(r), nil
	}
	a, err := c.co.Do(ctx, []*allotv1.DecideRequest{req})
	switch {
	case err != nil: // ctx ended while waiting for its turn
		return Decision{}, classify(ctx, status.FromContextError(err).Err())
	case a[0].err != nil:
		return Decision{}, classify(ctx, a[0].err)
	}
	return fromProto(a[0].resp), nil
}

// Reserve decides one request like Decide, with cost an estimate (a
// completion's max_tokens, say): an allowed decision carries a settle
// token, and Decision.Settle (or Settle) then corrects the charge with the
// actual cost, at most the pods' --settle-ttl later. It is never coalesced
// into a batch. A decision the limiter made without its store, or denied,
// carries no token.
func (c *Client) Reserve(ctx context.Context, descriptors map[string]string, cost int64) (Decision, error) {
	if cost < 1 {
		return Decision{}, invalidf("cost: %d: want a whole number of units ≥ 1", cost)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r, err := c.api.Decide(ctx, &allotv1.DecideRequest{Descriptors: descriptors, Cost: cost, Reserve: true})
	if err != nil {
		return Decision{}, classify(ctx, err)
	}
	d := fromProto(r)
	if d.SettleToken != "" {
		d.client = c
	}
	return d, nil
}

// Settle settles the reservation behind token with the units the request
// really cost (≥ 0): unused ones go back to every limit it charged (never
// beyond full), those beyond its estimate are owed as debt (later requests
// wait until it is paid). An error wraps ErrSettleGone (unknown, expired,
// or settled already), ErrInvalid (a negative actual, a malformed token),
// or ErrUnavailable; then nothing changed, except that an ErrUnavailable
// settle may have been applied (a second try then gets ErrSettleGone).
func (c *Client) Settle(ctx context.Context, token string, actual int64) (Settled, error) {
	if actual < 0 {
		return Settled{}, invalidf("actual: %d: want a whole number of units ≥ 0", actual)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r, err := c.api.Settle(ctx, &allotv1.SettleRequest{Token: token, Actual: actual})
	if err != nil {
		return Settled{}, classify(ctx, err)
	}
	return Settled{Reserved: r.GetReserved(), Actual: r.GetActual(), Refunded: r.GetRefunded(), Charged: r.GetCharged()}, nil
}

// send is one coalesced exchange: a lone decision is a Decide RPC; more
// are one independent DecideBatch, each answer carrying its own error.
func (c *Client) send(ctx context.Context, reqs []*allotv1.DecideRequest) []answer {
	out := make([]answer, len(reqs))
	if len(reqs) == 1 {
		out[0].resp, out[0].err = c.api.Decide(ctx, reqs[0])
		return out
	}
	resp, err := c.api.DecideBatch(ctx, &allotv1.DecideBatchRequest{Requests: reqs, Independent: true})
	switch {
	case status.Code(err) == codes.InvalidArgument:
		// A limiter that predates independent batches refused the whole
		// batch for one bad request, having checked them all before
		// deciding any: decide each on its own so that only the bad one
		// fails.
		var wg sync.WaitGroup
		for i := range reqs {
			wg.Go(func() { out[i].resp, out[i].err = c.api.Decide(ctx, reqs[i]) })
		}
		wg.Wait()
		return out
	case err == nil && len(resp.GetResponses()) != len(reqs):
		err = status.Errorf(codes.Internal, "the limiter answered %d decisions for %d requests", len(resp.GetResponses()), len(reqs))
	}
	for i := range out {
		switch {
		case err != nil:
			out[i].err = err
		case resp.GetResponses()[i].GetErrorCode() != 0:
			r := resp.GetResponses()[i]
			out[i].err = status.Error(codes.Code(r.GetErrorCode()), r.GetError())
		default:
			out[i].resp = resp.GetResponses()[i]
		}
	}
	return out
}

// DecideBatch decides independent requests in one call: one decision per
// request, in order. A bad request fails the whole batch with ErrInvalid
// naming it (requests[i]). Costs below 1 are rejected here, before anything
// is sent. The regional service checks every request's form before
// deciding any, so a malformed one (say, one without a tenant) charges
// nothing; one it rejects only while deciding (a cost above a limit's
// burst) fails the batch after the others were charged. One tenant's
// requests are decided in order.
// It takes at most 256 requests per batch.
func (c *Client) DecideBatch(ctx context.Context, reqs []Request) ([]Decision, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	in := &allotv1.DecideBatchRequest{Requests: make([]*allotv1.DecideRequest, len(reqs))}
	for i, r := range reqs {
		if r.Cost < 1 {
			return nil, invalidf("requests[%d]: cost: %d: want a whole number of units ≥ 1", i, r.Cost)
		}
		in.Requests[i] = &allotv1.DecideRequest{Descriptors: r.Descriptors, Cost: r.Cost}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	out, err := c.api.DecideBatch(ctx, in)
	if err != nil {
		return nil, classify(ctx, err)
	}
	if len(out.GetResponses()) != len(reqs) {
		return nil, fmt.Errorf("%w: the limiter answered %d decisions for %d requests", ErrUnavailable, len(out.GetResponses()), len(reqs))
	}
	ds := make([]Decision, len(reqs))
	for i, r := range out.GetResponses() {
		ds[i] = fromProto(r)
	}
	return ds, nil
}

func fromProto(r *allotv1.DecideResponse) Decision {
	return Decision{
		Allowed:    r.GetAllowed(),
		Remaining:  r.GetRemaining(),
		RetryAfter: time.Duration(r.GetRetryAfterMs()) * time.Millisecond,
		ResetAfter: time.Duration(r.GetResetAfterMs()) * time.Millisecond,
		Limit:      r.GetLimit(),
		Shadow:     r.GetShadow(),
		Fallback:   r.GetFallback(),
		Closed:     r.GetClosed(),
		Quota:      r.GetQuota(),
		Window:     time.Duration(r.GetWindowS()) * time.Second,

		SettleToken: r.GetSettleToken(),
	}
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// callError is a failed call: its kind (ErrInvalid or ErrUnavailable), the
// gRPC status, and the context's error when the call's context ended.
type callError struct {
	kind error
	st   *status.Status
	ctx  error
}

func (e *callError) Error() string {
	if errors.Is(e.kind, ErrInvalid) {
		// The service prefixes its own "bad request: " (for a batch, once
		// more inside); the kind says it already.
		return e.kind.Error() + ": " + strings.ReplaceAll(e.st.Message(), "bad request: ", "")
	}
	return e.kind.Error() + ": " + e.st.Code().String() + ": " + e.st.Message()
}

func (e *callError) Unwrap() []error {
	errs := []error{e.kind, e.st.Err()}
	if e.ctx != nil {
		errs = append(errs, e.ctx)
	}
	return errs
}

// GRPCStatus lets status.Code and status.FromError see the call's status.
func (e *callError) GRPCStatus() *status.Status { return e.st }

// classify maps a gRPC error to ErrInvalid or ErrUnavailable: the one place
// this mapping lives in the client. Only the request being malformed is
// ErrInvalid; everything else means no decision was made.
func classify(ctx context.Context, err error) error {
	st := status.Convert(err)
	kind := ErrUnavailable
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange:
		kind = ErrInvalid
	case codes.NotFound:
		kind = ErrSettleGone
	}
	return &callError{kind: kind, st: st, ctx: ctx.Err()}
}

// Meter returns a Metered for a response whose cost is learnt as it is
// produced (a streamed completion): Add counts units as they are known,
// Finish settles the decision with their total, once. On a decision
// without a settle token Finish returns ErrNotReserved.
func (d Decision) Meter() *Metered { return &Metered{d: d} }

// Metered is a reserved decision being measured (Decision.Meter). Add and
// Finish are safe for concurrent use.
type Metered struct {
	d    Decision
	mu   sync.Mutex
	n    int64
	done bool
}

// Add counts units (≥ 0) of the response's actual cost.
func (m *Metered) Add(units int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if units > 0 && !m.done {
		m.n = min(m.n+units, math.MaxInt64/2) // (saturates: the limiter refuses what no key can owe)
		if m.n < 0 {
			m.n = math.MaxInt64 / 2
		}
	}
}

// Finish settles the decision with the units counted so far. Later calls
// settle nothing and return ErrSettleGone.
func (m *Metered) Finish(ctx context.Context) (Settled, error) {
	m.mu.Lock()
	if m.done {
		m.mu.Unlock()
		return Settled{}, ErrSettleGone
	}
	m.done = true
	n := m.n
	m.mu.Unlock()
	return m.d.Settle(ctx, n)
}
