package envoydiff

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rlsReq is an RLS request.
type rlsReq = rlsv3.RateLimitRequest

// req builds an RLS request; hits is the request's hits_addend (0: unset).
func req(domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: ds}
}

// desc builds a descriptor from "k=v,k2=v2" ("" has no entries), then
// applies opts.
func desc(kvs string, opts ...func(*ratelimitv3.RateLimitDescriptor)) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	if kvs != "" {
		for _, kv := range strings.Split(kvs, ",") {
			k, v, _ := strings.Cut(kv, "=")
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

// hits sets a descriptor's own hits_addend (0 included: check only).
func hits(n uint64) func(*ratelimitv3.RateLimitDescriptor) {
	return func(d *ratelimitv3.RateLimitDescriptor) { d.HitsAddend = wrapperspb.UInt64(n) }
}

// override sets a descriptor's own limit (Envoy's descriptor override).
func override(n uint32, unit typev3.RateLimitUnit) func(*ratelimitv3.RateLimitDescriptor) {
	return func(d *ratelimitv3.RateLimitDescriptor) {
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
	}
}

// render writes an answer in the form the comparisons and messages use:
//
//	OVER_LIMIT [OK 3/MINUTE rem=2 reset, OVER_LIMIT 3/MINUTE rem=0 reset] {RateLimit-Limit=3 ...}
//
// per descriptor its code, its current limit (requests per unit, unit and
// name), LimitRemaining ("max" for MaxUint32) and whether it carries a
// duration until reset (its value differs by design: window end against
// GCRA's rest time); then the headers to add, the reset header's value
// elided for the same reason. An error renders as its gRPC code.
func render(r *rlsv3.RateLimitResponse, err error) string {
	if err != nil {
		return "error " + status.Code(err).String()
	}
	var b strings.Builder
	b.WriteString(r.GetOverallCode().String())
	b.WriteString(" [")
	for i, s := range r.GetStatuses() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.GetCode().String())
		if l := s.GetCurrentLimit(); l != nil {
			fmt.Fprintf(&b, " %d/%s", l.GetRequestsPerUnit(), l.GetUnit())
			if l.GetName() != "" {
				fmt.Fprintf(&b, "(%s)", l.GetName())
			}
		}
		if s.GetLimitRemaining() == math.MaxUint32 {
			b.WriteString(" rem=max")
		} else {
			b.WriteString(" rem=" + strconv.FormatUint(uint64(s.GetLimitRemaining()), 10))
		}
		if s.GetDurationUntilReset() != nil {
			b.WriteString(" reset")
		}
	}
	b.WriteString("]")
	if hs := r.GetResponseHeadersToAdd(); len(hs) > 0 {
		var kv []string
		for _, h := range hs {
			v := h.GetValue()
			if strings.EqualFold(h.GetKey(), "RateLimit-Reset") {
				v = "*"
			}
			kv = append(kv, h.GetKey()+"="+v)
		}
		sort.Strings(kv)
		b.WriteString(" {" + strings.Join(kv, " ") + "}")
	}
	return b.String()
}

// describe writes a request compactly for failure messages.
func describe(r *rlsv3.RateLimitRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain %q", r.GetDomain())
	if r.GetHitsAddend() != 0 {
		fmt.Fprintf(&b, " hits_addend %d", r.GetHitsAddend())
	}
	for _, d := range r.GetDescriptors() {
		var es []string
		for _, e := range d.GetEntries() {
			es = append(es, e.GetKey()+"="+e.GetValue())
		}
		b.WriteString(" [" + strings.Join(es, ","))
		if h := d.GetHitsAddend(); h != nil {
			fmt.Fprintf(&b, " hits_addend %d", h.GetValue())
		}
		if l := d.GetLimit(); l != nil {
			fmt.Fprintf(&b, " limit %d/%s", l.GetRequestsPerUnit(), l.GetUnit())
		}
		b.WriteString("]")
	}
	return b.String()
}
