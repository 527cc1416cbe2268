package regional

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/allot-dev/allot/ratelimitfields"
)

// DefaultHeaderPrefix is where forward-auth reads descriptors from:
// X-Allot-Tenant: t42 is the descriptor tenant=t42, X-Allot-Api-Key: k is
// api_key=k (lower case, dashes as underscores). X-Allot-Cost is the cost.
const DefaultHeaderPrefix = "X-Allot-"

// decideRequest is the body of POST /v1/decide.
type decideRequest struct {
	Descriptors map[string]string `json:"descriptors"`
	Cost        *int64            `json:"cost,omitempty"`
	// Reserve: cost is an estimate; an allowed answer carries a
	// settle_token for POST /v1/settle with the actual cost.
	Reserve bool `json:"reserve,omitempty"`
}

// settleRequest is the body of POST /v1/settle.
type settleRequest struct {
	Token  string `json:"token"`
	Actual *int64 `json:"actual"`
}

// settleResponse is its answer.
type settleResponse struct {
	Reserved int64 `json:"reserved"`
	Actual   int64 `json:"actual"`
	Refunded int64 `json:"refunded"`
	Charged  int64 `json:"charged"`
}

// decideResponse is its answer (a fixed contract, plus fallback).
type decideResponse struct {
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	Limit        string `json:"limit"`
	Shadow       bool   `json:"shadow"`
	Fallback     bool   `json:"fallback,omitempty"`
	Closed       bool   `json:"closed,omitempty"`
	SettleToken  string `json:"settle_token,omitempty"`
}

// ceilMS rounds a duration up to whole milliseconds.
func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// ceilSeconds rounds a duration up to whole seconds (RFC 9110 delay-seconds).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Handler returns the regional HTTP API: POST /v1/decide, POST /v1/settle,
// /v1/forward-auth (any method, and any path below it), /metrics (from
// gatherer), /healthz and /readyz.
// headerPrefix "" means DefaultHeaderPrefix.
func (s *Service) Handler(gatherer prometheus.Gatherer, headerPrefix string) http.Handler {
	if headerPrefix == "" {
		headerPrefix = DefaultHeaderPrefix
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/decide", s.httpDecide)
	mux.HandleFunc("POST /v1/settle", s.httpSettle)
	// Any method, and any path below it: Envoy's ext_authz (HTTP mode)
	// asks with the request's own method and appends its path.
	fa := func(w http.ResponseWriter, r *http.Request) { s.forwardAuth(w, r, headerPrefix) }
	mux.HandleFunc("/v1/forward-auth", fa)
	mux.HandleFunc("/v1/forward-auth/", fa)
	if gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Ready() {
			http.Error(w, "not ready: waiting for the policy from etcd and the first answer of the leading coordinator", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

// HTTPStatus maps a Decide error to an HTTP status: the one place this
// mapping lives for the regional HTTP API.
func HTTPStatus(err error) int {
	switch {
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotReady):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrSettleGone):
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	writeJSON(w, HTTPStatus(err), map[string]string{"error": strings.TrimPrefix(err.Error(), "bad request: ")})
}

func (s *Service) httpDecide(w http.ResponseWriter, r *http.Request) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 256<<10))
	dec.DisallowUnknownFields()
	var req decideRequest
	if err := dec.Decode(&req); err != nil {
		writeErr(w, fmt.Errorf("%w: body: %w", ErrBadRequest, err))
		return
	}
	cost := int64(1)
	if req.Cost != nil {
		cost = *req.Cost
	}
	decide := s.Decide
	if req.Reserve {
		decide = s.Reserve
	}
	d, err := decide(r.Context(), req.Descriptors, cost)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, decideResponse{
		Allowed: d.Allowed, Remaining: d.Remaining, RetryAfterMS: ceilMS(d.RetryAfter), ResetAfterMS: ceilMS(d.ResetAfter),
		Limit: d.Limit, Shadow: d.Shadow, Fallback: d.Fallback, Closed: d.Closed, SettleToken: d.SettleToken,
	})
}

func (s *Service) httpSettle(w http.ResponseWriter, r *http.Request) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	dec.DisallowUnknownFields()
	var req settleRequest
	if err := dec.Decode(&req); err != nil {
		writeErr(w, fmt.Errorf("%w: body: %w", ErrBadRequest, err))
		return
	}
	if req.Actual == nil {
		writeErr(w, badRequest("actual: missing: want the units the request really cost, e.g. {\"token\": \"s1....\", \"actual\": 812}"))
		return
	}
	got, err := s.Settle(r.Context(), req.Token, *req.Actual)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, settleResponse(got))
}

// descriptorName turns a header name after the prefix into a descriptor
// key: lower case, dashes as underscores.
func descriptorName(h string) string { return strings.ReplaceAll(strings.ToLower(h), "-", "_") }

// setRateLimitHeaders sets the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers-10 for d, with the one definition of
// their syntax (package ratelimitfields): the policy advertises the
// limiting limit's quota per window (the global budget for budget limits),
// RateLimit its remaining units in this region and the seconds until more.
func setRateLimitHeaders(h http.Header, d Decision) { ratelimitfields.Set(h, fields(&d)) }

// fields is what the RateLimit fields say of d.
func fields(d *Decision) ratelimitfields.Decision {
	return ratelimitfields.Decision{
		Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter,
		Limit: d.Limit, Quota: d.Quota, Window: d.Window,
	}
}

func (s *Service) forwardAuth(w http.ResponseWriter, r *http.Request, prefix string) {
	// A proxy whose auth hook understands only 2xx, 401 and 403 (nginx's
	// auth_request) asks for those instead of 429 and 503, and turns them
	// back (deploy/proxies).
	denyStatus, err := statusParam(r, "deny_status", http.StatusTooManyRequests)
	if err != nil {
		writeErr(w, err)
		return
	}
	unavailableStatus, err := statusParam(r, "unavailable_status", http.StatusServiceUnavailable)
	if err != nil {
		writeErr(w, err)
		return
	}
	d := map[string]string{}
	cost := int64(1)
	for name, vals := range r.Header {
		rest, ok := cutPrefixFold(name, prefix)
		if !ok || len(vals) == 0 {
			continue
		}
		if strings.EqualFold(rest, "cost") {
			c, err := strconv.ParseInt(vals[0], 10, 64)
			if err != nil {
				writeErr(w, fmt.Errorf("%w: header %s: %q is not a whole number", ErrBadRequest, name, vals[0]))
				return
			}
			cost = c
			continue
		}
		d[descriptorName(rest)] = vals[0]
	}
	dec, err := s.Decide(r.Context(), d, cost)
	if err != nil {
		writeErr(w, err)
		return
	}
	if dec.Allowed {
		setRateLimitHeaders(w.Header(), dec)
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(dec.RetryAfter)), 10))
	w.Header().Set("Cache-Control", "no-store") // RFC 6585: 429 must not be cached
	if dec.Closed {
		// Not the caller's excess: the limiter's store is unavailable and
		// this limit fails closed.
		http.Error(w, fmt.Sprintf("limit %q unavailable (fails closed): retry after %d s", dec.Limit, max(1, ceilSeconds(dec.RetryAfter))), unavailableStatus)
		return
	}
	setRateLimitHeaders(w.Header(), dec)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(denyStatus)
	_, _ = fmt.Fprintf(w, "rate limited by %q: retry after %d s\n", dec.Limit, max(1, ceilSeconds(dec.RetryAfter)))
}

// statusParam reads the query parameter name as the status to answer
// instead of def: def itself, 401 or 403 (what every auth hook accepts).
func statusParam(r *http.Request, name string, def int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || (n != def && n != http.StatusUnauthorized && n != http.StatusForbidden) {
		return 0, badRequest("%s: %q: want %d (the default), 401 or 403", name, v, def)
	}
	return n, nil
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) <= len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", false
	}
	return s[len(prefix):], true
}
