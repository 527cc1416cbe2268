package client

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxSFInteger is the largest Structured Field Integer (RFC 9651 §3.3.1).
const maxSFInteger = 999_999_999_999_999

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
// The regional pod's HTTP answers set the same fields through this
// function, and its RLS answers through RateLimitFields.
func SetRateLimitHeaders(h http.Header, d Decision) {
	if pol, rl, ok := RateLimitFields(d); ok {
		h.Set("RateLimit-Policy", pol)
		h.Set("RateLimit", rl)
	}
}

// RateLimitFields returns the values SetRateLimitHeaders sets, for callers
// that write headers other than into an http.Header (an Envoy RLS answer):
// the RateLimit-Policy and RateLimit fields, and ok false when it would set
// nothing.
func RateLimitFields(d Decision) (policy, ratelimit string, ok bool) {
	if d.Limit == "" || d.Quota <= 0 {
		return "", "", false
	}
	name, ok := sfString(d.Limit)
	if !ok {
		return "", "", false
	}
	t := d.ResetAfter
	if !d.Allowed {
		t = d.RetryAfter
	}
	w := max(1, int64(d.Window/time.Second))
	return name + ";q=" + sfInt(d.Quota) + ";w=" + sfInt(w), name + ";r=" + sfInt(d.Remaining) + ";t=" + sfInt(ceilSeconds(t)), true
}

// sfInt formats a non-negative Structured Field Integer, clamped to its
// range.
func sfInt(n int64) string { return strconv.FormatInt(min(max(n, 0), maxSFInteger), 10) }

// sfString serializes s as a Structured Field String (RFC 9651 §4.1.6):
// printable ASCII in double quotes, with '"' and '\' escaped. It reports
// false when s holds any other byte.
func sfString(s string) (string, bool) {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := range len(s) {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return "", false
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), true
}

// ceilSeconds rounds d up to whole seconds (RFC 9110 delay-seconds); 0 for
// d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds is the Retry-After value for a wait d: whole seconds
// rounded up, at least 1 (a 0 invites an immediate retry that the limiter
// would deny again).
func retryAfterSeconds(d time.Duration) string {
	return strconv.FormatInt(max(1, ceilSeconds(d)), 10)
}
