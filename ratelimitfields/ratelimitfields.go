// Package ratelimitfields writes the RateLimit and RateLimit-Policy HTTP
// fields of draft-ietf-httpapi-ratelimit-headers-10 (pinned to revision
// -10; later revisions may change the syntax), and Retry-After, for a rate
// limit decision: the one definition their syntax has in allot. The Go
// client (package client) and the regional service (its HTTP, forward-auth
// and Envoy RLS answers) both write them through it.
package ratelimitfields

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Decision is what the fields describe: the limiting limit's name and its
// quota per window, and what is left of it.
type Decision struct {
	Allowed bool
	// Remaining whole units of the limiting limit.
	Remaining int64
	// RetryAfter (when denied) and ResetAfter (when allowed) give t.
	RetryAfter, ResetAfter time.Duration
	// Limit names the limiting limit; Quota units per Window is its
	// advertised policy.
	Limit  string
	Quota  int64
	Window time.Duration
}

// maxSFInteger is the largest Structured Field Integer (RFC 9651 §3.3.1).
const maxSFInteger = 999_999_999_999_999

// Set sets RateLimit-Policy and RateLimit from d:
//
//	RateLimit-Policy: "tenant";q=1000;w=1
//	RateLimit: "tenant";r=0;t=1
//
// The policy advertises the limiting limit's quota q per window w seconds;
// RateLimit its remaining units r and the seconds t until more quota: the
// retry-after when denied, the reset-after when allowed, rounded up. It
// sets nothing when no limit matched (d.Limit empty or d.Quota 0), or when
// the limit's name cannot be a Structured Field String (non-ASCII). It
// never sets Retry-After (see RetryAfter).
func Set(h http.Header, d Decision) {
	if pol, rl, ok := Values(d); ok {
		h.Set("RateLimit-Policy", pol)
		h.Set("RateLimit", rl)
	}
}

// Values returns the values Set sets, for callers that write headers other
// than into an http.Header (an Envoy RLS answer): RateLimit-Policy and
// RateLimit, and ok false when Set would set nothing.
func Values(d Decision) (policy, ratelimit string, ok bool) {
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
	return name + ";q=" + sfInt(d.Quota) + ";w=" + sfInt(w), name + ";r=" + sfInt(d.Remaining) + ";t=" + sfInt(CeilSeconds(t)), true
}

// RetryAfter is the Retry-After value for a wait d: whole seconds rounded
// up, at least 1 (a 0 invites an immediate retry that the limiter would
// deny again).
func RetryAfter(d time.Duration) string {
	return strconv.FormatInt(max(1, CeilSeconds(d)), 10)
}

// CeilSeconds rounds d up to whole seconds (RFC 9110 delay-seconds); 0 for
// d ≤ 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
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
