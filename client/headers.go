package client

import (
	"net/http"
	"time"

	"github.com/allot-dev/allot/ratelimitfields"
)

// SetRateLimitHeaders sets the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers-10 (pinned to revision -10; later
// revisions may change the syntax) from d:
//
//	RateLimit-Policy: "tenant";q=1000;w=1
//	RateLimit: "tenant";r=0;t=1
//
// The policy advertises the limiting limit's quota q per window w seconds
// (the global budget, for budget limits); RateLimit its remaining units r in
// this region and the seconds t until more quota: the retry-after when
// denied, the reset-after when allowed, rounded up. It sets nothing when no
// limit matched (d.Limit empty or d.Quota 0), or when the limit's name
// cannot be a Structured Field String (non-ASCII). It never sets
// Retry-After; the middleware does, on 429.
//
// It is package ratelimitfields' Set, through which the regional pod's
// HTTP and RLS answers write the same fields.
func SetRateLimitHeaders(h http.Header, d Decision) { ratelimitfields.Set(h, fields(d)) }

// RateLimitFields returns the values SetRateLimitHeaders sets, for callers
// that write headers other than into an http.Header (an Envoy RLS answer):
// the RateLimit-Policy and RateLimit fields, and ok false when it would set
// nothing.
func RateLimitFields(d Decision) (policy, ratelimit string, ok bool) {
	return ratelimitfields.Values(fields(d))
}

func fields(d Decision) ratelimitfields.Decision {
	return ratelimitfields.Decision{
		Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter,
		Limit: d.Limit, Quota: d.Quota, Window: d.Window,
	}
}

// retryAfterSeconds is the Retry-After value for a wait d (whole seconds,
// at least 1).
func retryAfterSeconds(d time.Duration) string { return ratelimitfields.RetryAfter(d) }
