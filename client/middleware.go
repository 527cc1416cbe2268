package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultHeaderPrefix is where FromHeaders, and the middleware by default,
// read descriptors: X-Allot-Tenant: t42 is the descriptor tenant=t42,
// X-Allot-Api-Key: k is api_key=k (lower case, dashes as underscores), and
// X-Allot-Cost is the cost. It is the convention of the regional service's
// forward-auth endpoint (regional.DefaultHeaderPrefix).
const DefaultHeaderPrefix = "X-Allot-"

// DescriptorsFunc extracts the descriptors and the cost of a request. An
// error answers 400 Bad Request with the error's text; return one when the
// request lacks what the limits need (an unauthenticated caller has no
// tenant). It is called concurrently.
type DescriptorsFunc func(r *http.Request) (descriptors map[string]string, cost int64, err error)

// FailureMode says what the middleware does when the limiter gives no
// decision (ErrUnavailable: unreachable, timed out, not ready).
type FailureMode int

const (
	// FailOpen serves the request as if allowed, without RateLimit fields
	// (default): the service stays up while its limiter is down.
	FailOpen FailureMode = iota
	// FailClosed answers 503 Service Unavailable with a Retry-After. Never
	// 429: a 429 tells the caller it exceeded its allowance, and an
	// unreachable limiter is not that.
	FailClosed
)

// String names the mode.
func (m FailureMode) String() string {
	switch m {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return "FailureMode(" + strconv.Itoa(int(m)) + ")"
}

// MiddlewareOption configures Middleware.
type MiddlewareOption func(*middleware)

// WithDescriptors sets how descriptors and cost are read from a request.
// Default: FromHeaders(DefaultHeaderPrefix), which trusts the request's
// X-Allot-* headers; use it only behind a gateway that sets them after
// authenticating the caller and strips them from outside requests. nil keeps
// the default.
func WithDescriptors(fn DescriptorsFunc) MiddlewareOption {
	return func(m *middleware) {
		if fn != nil {
			m.descriptors = fn
		}
	}
}

// WithFailureMode sets what happens when the limiter is unavailable.
// Default FailOpen.
func WithFailureMode(mode FailureMode) MiddlewareOption {
	return func(m *middleware) { m.mode = mode }
}

// WithUnavailableRetryAfter sets the Retry-After of the 503 that FailClosed
// answers, rounded up to whole seconds. Default 1s; values below 1s mean 1s.
func WithUnavailableRetryAfter(d time.Duration) MiddlewareOption {
	return func(m *middleware) { m.unavailableRetry = d }
}

// WithOnError sets a hook called with every request the limiter did not
// decide: err wraps ErrInvalid (the descriptors could not be extracted, or
// the limiter rejected them: the middleware answers 400) or anything else
// (the limiter was unavailable: the middleware fails open or closed). Count
// these; alert on the unavailable ones. It is called concurrently, before
// the response is written.
func WithOnError(fn func(r *http.Request, err error)) MiddlewareOption {
	return func(m *middleware) { m.onError = fn }
}

// WithOnDecision sets a hook called with every decision the limiter made,
// before the response is written: count allowed, denied, shadow and fallback
// decisions per limit. It is called concurrently.
func WithOnDecision(fn func(r *http.Request, d Decision)) MiddlewareOption {
	return func(m *middleware) { m.onDecision = fn }
}

// WithLimitHandler sets the handler that writes the response to a denied
// request, for a body in the API's own format. When it is called, the
// Retry-After, RateLimit, RateLimit-Policy and Cache-Control: no-store fields
// are set and DecisionFromContext returns the decision; it should answer 429
// Too Many Requests. Default: 429 with a one-line text/plain body.
func WithLimitHandler(h http.Handler) MiddlewareOption {
	return func(m *middleware) { m.limited = h }
}

type middleware struct {
	d                Decider
	descriptors      DescriptorsFunc
	mode             FailureMode
	unavailableRetry time.Duration
	onError          func(*http.Request, error)
	onDecision       func(*http.Request, Decision)
	limited          http.Handler
}

// Middleware returns net/http middleware that asks d to decide every request
// before next serves it:
//   - allowed: next serves it, with the RateLimit and RateLimit-Policy fields
//     (SetRateLimitHeaders) set on the response and the decision in the
//     request's context (DecisionFromContext);
//   - denied: 429 Too Many Requests with Retry-After in whole seconds rounded
//     up (at least 1), the RateLimit fields and Cache-Control: no-store
//     (RFC 6585: a 429 must not be cached); next is not called;
//   - descriptors cannot be extracted, or the limiter rejects them
//     (ErrInvalid): 400 Bad Request naming the problem;
//   - the limiter gives no decision: as the FailureMode says (FailOpen:
//     served; FailClosed: 503 Service Unavailable with Retry-After, never 429).
//
// It panics if d is nil.
func Middleware(d Decider, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	if d == nil {
		panic("client.Middleware: nil Decider")
	}
	m := middleware{
		d:                d,
		descriptors:      FromHeaders(DefaultHeaderPrefix),
		unavailableRetry: time.Second,
	}
	for _, o := range opts {
		o(&m)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}
}

type decisionKey struct{}

// DecisionFromContext returns the decision the middleware made for the
// request whose context this is (in next, or in the limit handler).
func DecisionFromContext(ctx context.Context) (Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(Decision)
	return d, ok
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	desc, cost, err := m.descriptors(r)
	if err != nil {
		if !errors.Is(err, ErrInvalid) {
			err = fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		m.fail(w, r, next, err)
		return
	}
	dec, err := m.d.Decide(r.Context(), desc, cost)
	if err != nil {
		m.fail(w, r, next, err)
		return
	}
	if m.onDecision != nil {
		m.onDecision(r, dec)
	}
	h := w.Header()
	SetRateLimitHeaders(h, dec)
	r = r.WithContext(context.WithValue(r.Context(), decisionKey{}, dec))
	if dec.Allowed {
		next.ServeHTTP(w, r)
		return
	}
	h.Set("Retry-After", retryAfterSeconds(dec.RetryAfter))
	h.Set("Cache-Control", "no-store")
	if dec.Closed {
		// Not the caller's excess: the limiter's store is down and the
		// limit fails closed. 503, like an unreachable limiter failing closed.
		h.Del("RateLimit")
		h.Del("RateLimit-Policy")
		http.Error(w, "rate limiter unavailable: retry after "+retryAfterSeconds(dec.RetryAfter)+" s", http.StatusServiceUnavailable)
		return
	}
	if m.limited != nil {
		m.limited.ServeHTTP(w, r)
		return
	}
	by := ""
	if dec.Limit != "" {
		by = fmt.Sprintf(" by %q", dec.Limit)
	}
	http.Error(w, "rate limited"+by+": retry after "+retryAfterSeconds(dec.RetryAfter)+" s", http.StatusTooManyRequests)
}

// fail answers a request the limiter did not decide: 400 for a bad
// request; otherwise as the failure mode says.
func (m *middleware) fail(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	if m.onError != nil {
		m.onError(r, err)
	}
	switch {
	case errors.Is(err, ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case m.mode == FailClosed:
		retry := retryAfterSeconds(m.unavailableRetry)
		w.Header().Set("Retry-After", retry)
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "rate limiter unavailable: retry after "+retry+" s", http.StatusServiceUnavailable)
	default: // FailOpen, and any unknown mode: the documented default
		next.ServeHTTP(w, r)
	}
}

// FromHeader reads one descriptor from one request header, cost 1:
// FromHeader("X-Tenant", "tenant") turns X-Tenant: t42 into tenant=t42. A
// request without the header (or with it empty) is an error (400).
func FromHeader(header, descriptor string) DescriptorsFunc {
	return func(r *http.Request) (map[string]string, int64, error) {
		v := r.Header.Get(header)
		if v == "" {
			return nil, 0, fmt.Errorf("header %s: missing (it carries the %s)", header, descriptor)
		}
		return map[string]string{descriptor: v}, 1, nil
	}
}

// FromHeaders reads every header that starts with prefix (case-insensitive)
// as a descriptor, the forward-auth convention: with prefix "X-Allot-",
// X-Allot-Tenant: t42 is tenant=t42, X-Allot-Api-Key: k is api_key=k, and
// X-Allot-Cost: 3 is the cost (default 1). Of a repeated header the first
// value counts. A request with no such header, or a cost that is not a whole
// number, is an error (400). prefix "" means DefaultHeaderPrefix.
func FromHeaders(prefix string) DescriptorsFunc {
	if prefix == "" {
		prefix = DefaultHeaderPrefix
	}
	return func(r *http.Request) (map[string]string, int64, error) {
		d := map[string]string{}
		cost := int64(1)
		for name, vals := range r.Header {
			rest, ok := cutPrefixFold(name, prefix)
			if !ok || len(vals) == 0 {
				continue
			}
			if strings.EqualFold(rest, "cost") {
				c, err := strconv.ParseInt(strings.TrimSpace(vals[0]), 10, 64)
				if err != nil || c < 1 {
					return nil, 0, fmt.Errorf("header %s: %q: want a whole number of units ≥ 1", name, vals[0])
				}
				cost = c
				continue
			}
			d[strings.ReplaceAll(strings.ToLower(rest), "-", "_")] = vals[0]
		}
		if len(d) == 0 {
			return nil, 0, fmt.Errorf("headers %s*: none; want at least %sTenant", prefix, prefix)
		}
		return d, cost, nil
	}
}

// CostFromHeader reads the cost from a request header and names no
// descriptor; combine it with others through Merge. A request without the
// header costs 1; a value that is not a whole number ≥ 1 is an error (400).
func CostFromHeader(header string) DescriptorsFunc {
	return func(r *http.Request) (map[string]string, int64, error) {
		v := r.Header.Get(header)
		if v == "" {
			return nil, 1, nil
		}
		c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || c < 1 {
			return nil, 0, fmt.Errorf("header %s: %q: want a whole number of units ≥ 1", header, v)
		}
		return nil, c, nil
	}
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) <= len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", false
	}
	return s[len(prefix):], true
}

// Merge combines extractors: the union of their descriptors, and the
// largest of their costs. The first error wins; a descriptor two of them
// set to different values is an error.
func Merge(fns ...DescriptorsFunc) DescriptorsFunc {
	return func(r *http.Request) (map[string]string, int64, error) {
		out := map[string]string{}
		cost := int64(1)
		for _, fn := range fns {
			d, c, err := fn(r)
			if err != nil {
				return nil, 0, err
			}
			for k, v := range d {
				if old, ok := out[k]; ok && old != v {
					return nil, 0, fmt.Errorf("descriptor %s: set twice, to %q and %q", k, old, v)
				}
				out[k] = v
			}
			cost = max(cost, c)
		}
		return out, cost, nil
	}
}
