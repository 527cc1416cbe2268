package regional

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
	"github.com/allot-dev/allot/ratelimitfields"
)

// maxBatch bounds DecideBatch and the descriptors of one RLS request.
const maxBatch = 256

// RegisterGRPC registers allot.v1.Limiter and Envoy's
// envoy.service.ratelimit.v3.RateLimitService on s: one implementation
// (Decide) behind both.
func (s *Service) RegisterGRPC(g grpc.ServiceRegistrar) {
	allotv1.RegisterLimiterServer(g, limiterAPI{s: s})
	rlsv3.RegisterRateLimitServiceServer(g, rlsAPI{s: s})
}

// RLS returns the service's envoy.service.ratelimit.v3.RateLimitService
// (the one RegisterGRPC registers), for transports of its own: the
// original service's /json endpoint.
func (s *Service) RLS() rlsv3.RateLimitServiceServer { return rlsAPI{s: s} }

// GRPCError maps a Decide error to a gRPC status: the one place this mapping
// lives for the regional gRPC APIs.
func GRPCError(err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, ErrBadRequest):
		code = codes.InvalidArgument
	case errors.Is(err, ErrNotReady):
		code = codes.Unavailable
	case errors.Is(err, ErrSettleGone):
		code = codes.NotFound
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

type limiterAPI struct {
	allotv1.UnimplementedLimiterServer
	s *Service
}

func toProto(d Decision) *allotv1.DecideResponse {
	return &allotv1.DecideResponse{
		Allowed: d.Allowed, Remaining: d.Remaining, RetryAfterMs: ceilMS(d.RetryAfter), ResetAfterMs: ceilMS(d.ResetAfter),
		Limit: d.Limit, Shadow: d.Shadow, Fallback: d.Fallback, Quota: d.Quota, WindowS: int64(d.Window / time.Second),
		Closed: d.Closed, SettleToken: d.SettleToken,
	}
}

func protoCost(c int64) int64 {
	if c == 0 {
		return 1
	}
	return c
}

func (a limiterAPI) Decide(ctx context.Context, r *allotv1.DecideRequest) (*allotv1.DecideResponse, error) {
	decide := a.s.Decide
	if r.GetReserve() {
		decide = a.s.Reserve
	}
	d, err := decide(ctx, r.GetDescriptors(), protoCost(r.GetCost()))
	if err != nil {
		return nil, GRPCError(err)
	}
	return toProto(d), nil
}

func (a limiterAPI) DecideBatch(ctx context.Context, r *allotv1.DecideBatchRequest) (*allotv1.DecideBatchResponse, error) {
	reqs := r.GetRequests()
	if len(reqs) > maxBatch {
		return nil, GRPCError(badRequest("requests: %d, at most %d per batch", len(reqs), maxBatch))
	}
	if !r.GetIndependent() {
		// Check every request before deciding any, so that a bad one
		// charges nothing.
		for i, q := range reqs {
			if err := checkRequest(q.GetDescriptors(), protoCost(q.GetCost())); err != nil {
				return nil, GRPCError(badRequestAt(i, err))
			}
		}
	}
	// One store round trip for the whole batch (DecideMany).
	in := make([]Request, len(reqs))
	for i, q := range reqs {
		in[i] = Request{Descriptors: q.GetDescriptors(), Cost: protoCost(q.GetCost())}
	}
	out := &allotv1.DecideBatchResponse{Responses: make([]*allotv1.DecideResponse, len(reqs))}
	for i, res := range a.s.DecideMany(ctx, in) {
		switch {
		case res.Err == nil:
			out.Responses[i] = toProto(res.Decision)
		case r.GetIndependent():
			st := status.Convert(GRPCError(res.Err))
			out.Responses[i] = &allotv1.DecideResponse{ErrorCode: int32(st.Code()), Error: st.Message()}
		default:
			return nil, GRPCError(badRequestAt(i, res.Err))
		}
	}
	return out, nil
}

// badRequestAt names request i in a bad request's message.
func badRequestAt(i int, err error) error {
	if errors.Is(err, ErrBadRequest) {
		return badRequest("requests[%d]: %s", i, strings.TrimPrefix(err.Error(), ErrBadRequest.Error()+": "))
	}
	return err
}

// rlsAPI serves Envoy's rate limit service. Each RLS descriptor (a list of
// key/value entries) is one allot request whose descriptors are its entries;
// hits_addend is the cost. The answer is OVER_LIMIT when any descriptor is,
// with duration_until_reset, the RateLimit fields and Retry-After as headers.
// The domain is not used: allot's policy is global. A request whose domain
// an envoyproxy/ratelimit configuration holds (SetEnvoyConfig) is answered
// from that configuration instead, as that service would.
type rlsAPI struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Service
}

// ShouldRateLimit decides one descriptor with Service.Decide, and several
// with Service.DecideMany: one store round trip for all of them, in order,
// each answered by its own status as if decided one by one. Every
// descriptor is checked first, so a malformed one fails the call and
// charges none; one the policy refuses (a cost above a limit's burst)
// fails the call after the others were decided, as one by one would have
// decided those before it.
func (a rlsAPI) ShouldRateLimit(ctx context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if t := a.s.envoy.Load(); t != nil && (t.opts.Only || t.cfg.HasDomain(r.GetDomain())) {
		return a.s.envoyRateLimit(ctx, t, r)
	}
	if a.s.cfg.Etcd == nil {
		a.s.m.envoyErrors.WithLabelValues("service_error").Inc()
		return nil, status.Error(codes.Unavailable, "no rate limit configuration loaded yet")
	}
	descs := r.GetDescriptors()
	if len(descs) == 0 {
		return nil, GRPCError(badRequest("descriptors: missing"))
	}
	if len(descs) > maxBatch {
		return nil, GRPCError(badRequest("descriptors: %d, at most %d", len(descs), maxBatch))
	}
	cost := int64(r.GetHitsAddend())
	if cost == 0 {
		cost = 1
	}
	var one [1]Result
	results := one[:]
	if ck, cv, ok := a.s.view.chargeEntry(); ok && hasEntry(descs, ck, cv) {
		// Charges (a cost already spent, say at the end of a stream) and
		// any other descriptors of the call, one by one.
		results = make([]Result, len(descs))
		for i, desc := range descs {
			d := make(map[string]string, len(desc.GetEntries()))
			c := rlsRequest(d, desc, cost)
			if d[ck] == cv {
				delete(d, ck)
				results[i].Decision, results[i].Err = a.s.Charge(ctx, d, c)
			} else {
				results[i].Decision, results[i].Err = a.s.Decide(ctx, d, c)
			}
		}
	} else if len(descs) == 1 {
		d := make(map[string]string, len(descs[0].GetEntries())) // on the stack: Decide keeps no reference
		c := rlsRequest(d, descs[0], cost)
		one[0].Decision, one[0].Err = a.s.Decide(ctx, d, c)
	} else {
		reqs := make([]Request, len(descs))
		for i, desc := range descs {
			d := make(map[string]string, len(desc.GetEntries()))
			c := rlsRequest(d, desc, cost)
			if err := checkRequest(d, c); err != nil {
				return nil, rlsError(i, err)
			}
			reqs[i] = Request{Descriptors: d, Cost: c}
		}
		results = a.s.DecideMany(ctx, reqs)
	}
	for i := range results {
		if err := results[i].Err; err != nil {
			return nil, rlsError(i, err)
		}
	}
	ar := newRLSArena(len(results))
	resp := &ar.resp
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	worst := -1 // the denial with the longest retry-after, else the first
	for i := range results {
		dec := &results[i].Decision
		st := &ar.st[i]
		st.Code = rlsv3.RateLimitResponse_OK
		st.LimitRemaining = uint32(min(max(dec.Remaining, 0), 1<<31))
		if dec.Quota > 0 {
			lim := &ar.lim[i]
			lim.Name, lim.RequestsPerUnit, lim.Unit = dec.Limit, uint32(min(dec.Quota, 1<<31)), rlsUnit(dec.Window)
			st.CurrentLimit = lim
		}
		if !dec.Allowed {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			st.DurationUntilReset = ar.duration(i, dec.RetryAfter)
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			if worst < 0 || results[worst].Decision.Allowed || dec.RetryAfter > results[worst].Decision.RetryAfter {
				worst = i
			}
		} else {
			st.DurationUntilReset = ar.duration(i, dec.ResetAfter)
			if worst < 0 {
				worst = i
			}
		}
	}
	resp.ResponseHeadersToAdd = ar.headers(&results[worst].Decision)
	return resp, nil
}

// rlsArena holds one RLS answer's messages in as few allocations as its
// descriptor count allows: one for an answer of one descriptor (the common
// call), which otherwise cost eight or nine (the response, its status
// slice, status, limit and duration, the header slice and each header).
// gRPC marshals the answer after the handler returns, so nothing is reused.
type rlsArena struct {
	resp rlsv3.RateLimitResponse
	st   []rlsv3.RateLimitResponse_DescriptorStatus
	lim  []rlsv3.RateLimitResponse_RateLimit
	dur  []durationpb.Duration
	hs   [3]*corev3.HeaderValue
	h    [3]corev3.HeaderValue

	// The storage of st, lim, dur and resp.Statuses for one descriptor.
	st1  [1]rlsv3.RateLimitResponse_DescriptorStatus
	lim1 [1]rlsv3.RateLimitResponse_RateLimit
	dur1 [1]durationpb.Duration
	sts1 [1]*rlsv3.RateLimitResponse_DescriptorStatus
}

func newRLSArena(n int) *rlsArena {
	ar := &rlsArena{}
	if n == 1 {
		ar.st, ar.lim, ar.dur, ar.resp.Statuses = ar.st1[:], ar.lim1[:], ar.dur1[:], ar.sts1[:]
	} else {
		ar.st = make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
		ar.lim = make([]rlsv3.RateLimitResponse_RateLimit, n)
		ar.dur = make([]durationpb.Duration, n)
		ar.resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	for i := range ar.st {
		ar.resp.Statuses[i] = &ar.st[i]
	}
	return ar
}

// duration is durationpb.New(d) in the arena.
func (ar *rlsArena) duration(i int, d time.Duration) *durationpb.Duration {
	return setDuration(&ar.dur[i], d)
}

// setDuration sets p to d, as durationpb.New would make it, and returns p.
func setDuration(p *durationpb.Duration, d time.Duration) *durationpb.Duration {
	p.Seconds, p.Nanos = int64(d/time.Second), int32(d%time.Second)
	return p
}

// headers are the headers an RLS answer adds for its worst decision d, in
// the arena: the RateLimit fields and, when denied, Retry-After (whole
// seconds, at least 1), built directly rather than through an http.Header
// (whose canonical keys cost an allocation at each Set and Get). nil when
// there are none.
func (ar *rlsArena) headers(d *Decision) []*corev3.HeaderValue {
	hs := ar.hs[:0]
	add := func(k, v string) {
		h := &ar.h[len(hs)]
		h.Key, h.Value = k, v
		hs = append(hs, h)
	}
	if pol, rl, ok := ratelimitfields.Values(fields(d)); ok {
		add("RateLimit-Policy", pol)
		add("RateLimit", rl)
	}
	if !d.Allowed {
		add("Retry-After", strconv.FormatInt(max(1, ceilSeconds(d.RetryAfter)), 10))
	}
	if len(hs) == 0 {
		return nil
	}
	return hs
}

// hasEntry reports whether a descriptor holds the entry key=value.
func hasEntry(descs []*ratelimitv3.RateLimitDescriptor, key, value string) bool {
	for _, d := range descs {
		for _, e := range d.GetEntries() {
			if e.GetKey() == key && e.GetValue() == value {
				return true
			}
		}
	}
	return false
}

// rlsRequest reads an RLS descriptor as an allot request: its entries into
// d, and the cost it returns, its own hits_addend when set, else cost.
func rlsRequest(d map[string]string, desc *ratelimitv3.RateLimitDescriptor, cost int64) int64 {
	for _, e := range desc.GetEntries() {
		d[e.GetKey()] = e.GetValue()
	}
	if hc := desc.GetHitsAddend(); hc != nil && hc.GetValue() > 0 {
		cost = int64(hc.GetValue())
	}
	return cost
}

// rlsError is the gRPC status of descriptor i's error, naming the
// descriptor in a bad request's message.
func rlsError(i int, err error) error {
	if errors.Is(err, ErrBadRequest) {
		err = badRequest("descriptors[%d]: %s", i, strings.TrimPrefix(err.Error(), ErrBadRequest.Error()+": "))
	}
	return GRPCError(err)
}

func header(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, Value: v} }

func rlsUnit(w time.Duration) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch w {
	case time.Second:
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case time.Minute:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case 24 * time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_DAY
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

func (a limiterAPI) Settle(ctx context.Context, r *allotv1.SettleRequest) (*allotv1.SettleResponse, error) {
	got, err := a.s.Settle(ctx, r.GetToken(), r.GetActual())
	if err != nil {
		return nil, GRPCError(err)
	}
	return &allotv1.SettleResponse{Reserved: got.Reserved, Actual: got.Actual, Refunded: got.Refunded, Charged: got.Charged}, nil
}
