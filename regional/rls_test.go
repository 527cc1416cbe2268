package regional

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rlsOneByOne answers r as ShouldRateLimit did before it used DecideMany
// and built its headers directly: one Service.Decide per descriptor, in
// order, the headers through an http.Header. It is the reference the
// handler must equal.
func rlsOneByOne(ctx context.Context, s *Service, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	cost := int64(r.GetHitsAddend())
	if cost == 0 {
		cost = 1
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	var worst *Decision
	for i, desc := range r.GetDescriptors() {
		d := make(map[string]string, len(desc.GetEntries()))
		for _, e := range desc.GetEntries() {
			d[e.GetKey()] = e.GetValue()
		}
		c := cost
		if hc := desc.GetHitsAddend(); hc != nil && hc.GetValue() > 0 {
			c = int64(hc.GetValue())
		}
		dec, err := s.Decide(ctx, d, c)
		if err != nil {
			if errors.Is(err, ErrBadRequest) {
				err = badRequest("descriptors[%d]: %s", i, strings.TrimPrefix(err.Error(), ErrBadRequest.Error()+": "))
			}
			return nil, GRPCError(err)
		}
		st := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:           rlsv3.RateLimitResponse_OK,
			LimitRemaining: uint32(min(max(dec.Remaining, 0), 1<<31)),
		}
		if dec.Quota > 0 {
			st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
				Name: dec.Limit, RequestsPerUnit: uint32(min(dec.Quota, 1<<31)), Unit: rlsUnit(dec.Window),
			}
		}
		if !dec.Allowed {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			st.DurationUntilReset = durationpb.New(dec.RetryAfter)
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			if worst == nil || worst.Allowed || dec.RetryAfter > worst.RetryAfter {
				dd := dec
				worst = &dd
			}
		} else {
			st.DurationUntilReset = durationpb.New(dec.ResetAfter)
			if worst == nil {
				dd := dec
				worst = &dd
			}
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	if worst != nil {
		h := http.Header{}
		setRateLimitHeaders(h, *worst)
		if !worst.Allowed {
			h.Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(worst.RetryAfter)), 10))
		}
		for _, k := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := h.Get(k); v != "" {
				resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: k, Value: v})
			}
		}
	}
	return resp, nil
}

// rlsDesc is one RLS descriptor: entries as key, value pairs, and its own
// hits_addend when hits > 0.
func rlsDesc(hits uint64, kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	if hits > 0 {
		d.HitsAddend = wrapperspb.UInt64(hits)
	}
	return d
}

// ShouldRateLimit, over gRPC, answers every request exactly as one Decide
// per descriptor did (rlsOneByOne): the same statuses in order, each
// descriptor's own code, the same overall code and headers, the same
// errors. Each request goes once to the handler on tenants a and b and
// once to the reference on tenants ra and rb, on one pod whose store's
// clock stands still between them, so both see the same state. The
// requests mix one and several descriptors, one tenant and two, enforced,
// shadow (user-hourly) and closed (login) limits, per-descriptor costs,
// and several descriptors of which one is over its limit.
func TestRLSMatchesOneByOne(t *testing.T) {
	p, clock := memPod(t)
	rls := rlsv3.NewRateLimitServiceClient(p.conn)
	ctx := context.Background()
	requests := func(a, b string) []*rlsv3.RateLimitRequest {
		return []*rlsv3.RateLimitRequest{
			{Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc(0, "tenant", a)}},
			{Descriptors: []*ratelimitv3.RateLimitDescriptor{
				rlsDesc(0, "tenant", a), rlsDesc(0, "tenant", a, "user", "u1"), rlsDesc(0, "tenant", a, "route", "/login"),
			}},
			{Descriptors: []*ratelimitv3.RateLimitDescriptor{
				rlsDesc(0, "tenant", a, "user", "u1"), rlsDesc(0, "tenant", b), rlsDesc(0, "tenant", a, "user", "u2"),
			}},
			{Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc(0, "tenant", b, "route", "/login"), rlsDesc(0, "tenant", a, "route", "/login")}},
			{HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc(1, "tenant", b), rlsDesc(0, "tenant", a)}},
			// Errors after the descriptors before them were decided, as
			// one by one did: the cost above the burst is the policy's
			// verdict, the missing tenant the request's.
			{Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc(0, "tenant", b), rlsDesc(4, "tenant", a)}},
			{Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc(0, "user", "u1")}},
		}
	}
	var overLimitAmongOK int
	for round := range 4 {
		got, want := requests("a", "b"), requests("ra", "rb")
		for i := range got {
			resp, err := rls.ShouldRateLimit(ctx, got[i])
			wresp, werr := rlsOneByOne(ctx, p.s, want[i])
			if (err == nil) != (werr == nil) || status.Code(err) != status.Code(werr) ||
				(err != nil && status.Convert(err).Message() != status.Convert(werr).Message()) {
				t.Fatalf("round %d, request %d: ShouldRateLimit error %v, one by one %v", round, i, err, werr)
			}
			if !proto.Equal(resp, wresp) {
				t.Fatalf("round %d, request %d: ShouldRateLimit = %v\none by one = %v", round, i, resp, wresp)
			}
			if codes := resp.GetStatuses(); len(codes) > 1 && resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				for _, st := range codes {
					if st.GetCode() == rlsv3.RateLimitResponse_OK {
						overLimitAmongOK++
						break
					}
				}
			}
		}
		clock.Add(300 * time.Millisecond)
	}
	if overLimitAmongOK == 0 {
		t.Fatal("no request had several descriptors with one over its limit and another allowed")
	}
}

// Several descriptors, one over its limit: the statuses answer each in
// order, the overall code is OVER_LIMIT, and the headers are the denied
// descriptor's, Retry-After included. A malformed descriptor among several
// fails the request, named by index, and charges none of them.
func TestRLSSeveralDescriptors(t *testing.T) {
	p, _ := memPod(t)
	rls := rlsv3.NewRateLimitServiceClient(p.conn)
	ctx := context.Background()
	// The free tier's budget: burst 3, shared by every descriptor of t1.
	resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		rlsDesc(0, "tenant", "t1"), rlsDesc(0, "tenant", "t1", "user", "u1"), rlsDesc(0, "tenant", "t1"), rlsDesc(0, "tenant", "t1"), rlsDesc(0, "tenant", "t2"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
		limit     string
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	wants := []want{{ok, 2, "tenant"}, {ok, 1, "tenant"}, {ok, 0, "tenant"}, {over, 0, "tenant"}, {ok, 2, "tenant"}}
	if len(resp.GetStatuses()) != len(wants) || resp.GetOverallCode() != over {
		t.Fatalf("ShouldRateLimit = %v; want %d statuses, OVER_LIMIT", resp, len(wants))
	}
	for i, w := range wants {
		st := resp.GetStatuses()[i]
		if st.GetCode() != w.code || st.GetLimitRemaining() != w.remaining || st.GetCurrentLimit().GetName() != w.limit {
			t.Errorf("status %d = %v; want %v, %d remaining, limit %s", i, st, w.code, w.remaining, w.limit)
		}
	}
	if d := resp.GetStatuses()[3].GetDurationUntilReset().AsDuration(); d != 200*time.Millisecond {
		t.Errorf("denied status's duration_until_reset = %v, want 200ms (5/s)", d)
	}
	headers := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		headers[h.GetKey()] = h.GetValue()
	}
	if len(headers) != 3 || headers["RateLimit-Policy"] != `"tenant";q=5;w=1` || headers["RateLimit"] != `"tenant";r=0;t=1` ||
		headers["Retry-After"] != "1" {
		t.Errorf("headers %v; want the denied descriptor's RateLimit fields and Retry-After: 1", headers)
	}

	_, err = rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{
		rlsDesc(0, "tenant", "t3"), rlsDesc(0, "user", "u1"), rlsDesc(0, "tenant", "t3"),
	}})
	if st := status.Convert(err); st.Code() != 3 || !strings.Contains(st.Message(), "descriptors[1]: descriptors.tenant: missing") {
		t.Fatalf("malformed second descriptor: %v; want InvalidArgument naming descriptors[1].tenant", err)
	}
	if d, err := p.s.Decide(ctx, map[string]string{"tenant": "t3"}, 1); err != nil || d.Remaining != 2 {
		t.Fatalf("after the refused request, Decide(t3) = %+v, %v; want 2 remaining of 3: nothing charged", d, err)
	}
}
