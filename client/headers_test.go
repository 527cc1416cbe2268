package client_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
)

// RateLimitFields formats the draft-10 fields: quota per window, remaining
// units and the seconds until more quota (retry-after when denied,
// reset-after when allowed, rounded up); nothing without a named limit and
// a quota, or for a name that is not a Structured Field String.
// SetRateLimitHeaders sets exactly those values.
func TestRateLimitFields(t *testing.T) {
	cases := []struct {
		name       string
		d          client.Decision
		policy, rl string
		ok         bool
	}{
		{"allowed", client.Decision{Allowed: true, Remaining: 2, ResetAfter: 600 * time.Millisecond, RetryAfter: 9 * time.Second,
			Limit: "tenant", Quota: 5, Window: time.Second}, `"tenant";q=5;w=1`, `"tenant";r=2;t=1`, true},
		{"denied", client.Decision{RetryAfter: 1500 * time.Millisecond, ResetAfter: time.Hour,
			Limit: "user", Quota: 100, Window: time.Minute}, `"user";q=100;w=60`, `"user";r=0;t=2`, true},
		{"rested", client.Decision{Allowed: true, Remaining: 3, Limit: "t", Quota: 3, Window: time.Hour}, `"t";q=3;w=3600`, `"t";r=3;t=0`, true},
		{"window under a second", client.Decision{Allowed: true, Limit: "t", Quota: 1, Window: time.Millisecond}, `"t";q=1;w=1`, `"t";r=0;t=0`, true},
		{"escaped name", client.Decision{Allowed: true, Limit: `a"b\c`, Quota: 1, Window: time.Second}, `"a\"b\\c";q=1;w=1`, `"a\"b\\c";r=0;t=0`, true},
		{"clamped", client.Decision{Allowed: true, Remaining: -4, Limit: "t", Quota: 1 << 62, Window: time.Second},
			`"t";q=999999999999999;w=1`, `"t";r=0;t=0`, true},
		{"no limit", client.Decision{Allowed: true, Quota: 5, Window: time.Second}, "", "", false},
		{"no quota", client.Decision{Allowed: true, Limit: "t", Window: time.Second}, "", "", false},
		{"non-ASCII name", client.Decision{Allowed: true, Limit: "tenänt", Quota: 5, Window: time.Second}, "", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol, rl, ok := client.RateLimitFields(tc.d)
			if pol != tc.policy || rl != tc.rl || ok != tc.ok {
				t.Errorf("RateLimitFields(%+v) = %q, %q, %v; want %q, %q, %v", tc.d, pol, rl, ok, tc.policy, tc.rl, tc.ok)
			}
			h := http.Header{}
			client.SetRateLimitHeaders(h, tc.d)
			if len(h) != map[bool]int{true: 2, false: 0}[tc.ok] || h.Get("RateLimit-Policy") != tc.policy || h.Get("RateLimit") != tc.rl {
				t.Errorf("SetRateLimitHeaders(%+v) set %v; want RateLimit-Policy %q and RateLimit %q", tc.d, h, tc.policy, tc.rl)
			}
		})
	}
}
