package envoydiff

import (
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Why the known differences (not by design) differ; see the report in the
// commit that added them.
const (
	whyErrorCode      = "a malformed request: the original fails it with gRPC Unknown (a panic it recovers), allot with InvalidArgument"
	whyCheckRemaining = "a check (descriptor hits_addend 0): the original answers what is left (N - count) and the duration until reset; " +
		"allot does not ask Redis and answers limit_remaining 0 without a duration"
	whyOverrideShared = "a descriptor's own limit (5/minute) on the entries of a configured limit (3/minute, all 3 spent): " +
		"the original's counter is named by the entries and the window, so the override counts on from 3 of 5; " +
		"allot keeps a counter per override (its limit and unit in the key), which starts fresh"
)

// scenarios are the deterministic sequences: minute and hour limits, cold
// keys, a few requests each, so that within one window of the original and
// with GCRA's refill negligible (one unit per unit/N, N ≤ 10) both answer
// alike except where a step says otherwise.
func scenarios() []scenario {
	const bare = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
`
	ra := func(v string) *rlsReq { return req("edge", 0, desc("remote_address="+v)) }
	minute, hour := typev3.RateLimitUnit_MINUTE, typev3.RateLimitUnit_HOUR
	return []scenario{
		{
			name:   "bare key, one value",
			config: bare,
			steps:  times(4, ra("10.0.0.1")), // OK OK OK OVER
		},
		{
			name:   "bare key, two values counted apart",
			config: bare,
			steps: seq(same(ra("a")), same(ra("b")), same(ra("a")), same(ra("b")),
				same(ra("a")), same(ra("a")), same(ra("b")), same(ra("b"))),
		},
		{
			name: "descriptors of one request counted independently",
			config: `domain: edge
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 3}
`,
			steps: seq(
				times(4, req("edge", 0, desc("a=1"), desc("b=1"))),
				same(req("edge", 0, desc("b=1"))),
				// The same descriptor twice in one request: two hits.
				times(2, req("edge", 0, desc("c=1"), desc("c=1"))),
				same(req("edge", 0, desc("c=1"))),
			),
		},
		{
			name: "wildcard values",
			config: `domain: edge
descriptors:
  - key: path
    value: /login/admin
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /login*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /a*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /ab*
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: api
    value: v1*
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 2}
`,
			steps: seq(
				times(3, req("edge", 0, desc("path=/login"))),       // the wildcard: 2
				same(req("edge", 0, desc("path=/login/x"))),         // its own counter
				times(2, req("edge", 0, desc("path=/login/admin"))), // the exact value first
				same(req("edge", 0, desc("path=/abc"))),             // the first wildcard that prefixes it
				same(req("edge", 0, desc("path=/abd"))),
				same(req("edge", 0, desc("path=/other"))), // the bare key
				same(req("edge", 0, desc("path=/other"))),
				times(3, req("edge", 0, desc("api=v1/users,method=GET"))), // below a wildcard
				same(req("edge", 0, desc("api=v1/users,method=POST"))),
				same(req("edge", 0, desc("api=v1/users"))),
			),
		},
		{
			name: "wildcard with share_threshold",
			config: `domain: edge
descriptors:
  - key: source
    value: bot*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
`,
			steps: seq(
				same(req("edge", 0, desc("source=bot1"))),
				same(req("edge", 0, desc("source=bot2"))),
				same(req("edge", 0, desc("source=bot3"))),
				same(req("edge", 0, desc("source=human"))),
			),
		},
		{
			name: "nested descriptors",
			config: `domain: edge
descriptors:
  - key: client
    value: web
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
`,
			steps: seq(
				same(req("edge", 0, desc("client=web"))), // too short
				times(3, req("edge", 0, desc("client=web,route=/a"))),
				same(req("edge", 0, desc("client=web,route=/a,extra=x"))), // too deep
				same(req("edge", 0, desc("client=app,route=/a"))),         // no such value
				same(req("edge", 0, desc("route=/a"))),                    // not at the top
				same(req("edge", 0, desc("tenant=t"))),
				same(req("edge", 0, desc("tenant=t,user=u"))),
				same(req("edge", 0, desc("tenant=t"))),
				times(2, req("edge", 0, desc("tenant=t,user=u"))),
				same(req("edge", 0, desc("tenant=t,user=u,x=y"))),
			),
		},
		{
			name: "unlimited",
			config: `domain: edge
descriptors:
  - key: path
    value: /free
    rate_limit: {unlimited: true}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1}
`,
			steps: seq(
				times(3, req("edge", 0, desc("path=/free"))),
				times(2, req("edge", 0, desc("path=/paid"))),
				same(req("edge", 0, desc("path=/free"), desc("path=/paid"))),
			),
		},
		{
			name: "shadow_mode",
			config: `domain: edge
descriptors:
  - key: path
    value: /shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1}
`,
			steps: seq(
				times(3, req("edge", 0, desc("path=/shadow"))),
				times(2, req("edge", 0, desc("path=/shadow"), desc("path=/x"))),
			),
		},
		{
			name: "quota_mode",
			config: `domain: edge
descriptors:
  - key: path
    value: /quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`,
			steps: seq(
				same(req("edge", 0, desc("path=/quota"))),
				times(2, req("edge", 0, desc("path=/quota"))), // over its quota: OK, no reset
			),
		},
		{
			name: "replaces",
			config: `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, name: per-user}
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 4
      replaces: [{name: per-user}]
  - key: free
    rate_limit:
      unlimited: true
      replaces: [{name: per-user}]
  - key: user2
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-user}
  - key: x
    rate_limit:
      unit: minute
      requests_per_unit: 2
      name: X
      replaces: [{name: "Y"}]
  - key: "y"
    rate_limit:
      unit: minute
      requests_per_unit: 2
      name: "Y"
      replaces: [{name: X}]
`,
			steps: seq(
				times(2, req("edge", 0, desc("user=u"))),
				same(req("edge", 0, desc("user=u"), desc("vip=v"))),
				same(req("edge", 0, desc("vip=v"), desc("user=u2"))),
				same(req("edge", 0, desc("user=u"), desc("free=f"))),
				same(req("edge", 0, desc("vip=v"))),
				same(req("edge", 0, desc("user=u2"))),
				same(req("edge", 0, desc("user2=u"), desc("vip=v"))), // a name two limits share
				same(req("edge", 0, desc("user2=u"))),
				same(req("edge", 0, desc("x=1"), desc("y=1"))), // each replaces the other
				same(req("edge", 0, desc("x=1"))),
			),
		},
		{
			name: "requests_per_unit 0",
			config: `domain: edge
descriptors:
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 0}
`,
			steps: seq(
				times(2, req("edge", 0, desc("closed=x"))),
				same(req("edge", 3, desc("closed=x"))),
			),
		},
		{
			name:   "unknown descriptor",
			config: bare,
			steps: seq(
				times(2, req("edge", 0, desc("nope=1"))),
				same(req("edge", 0, desc(""))), // no entries
				same(req("edge", 0, desc("remote_address=1"), desc("nope=1"))),
				same(req("edge", 0, desc("remote_address=1,nope=1"))),
				same(req("edge", 0, desc("nope=1,remote_address=1"))),
				same(req("edge", 0, desc("remote_address="))), // an empty value: the bare key
			),
		},
		{
			name:   "unknown domain",
			config: bare,
			steps:  times(4, req("other", 0, desc("remote_address=10.0.0.1"))),
		},
		{
			name:    "descriptor limit override",
			config:  bare,
			windows: []time.Duration{time.Hour, time.Minute},
			steps: seq(
				times(3, req("edge", 0, desc("custom=x", override(2, minute)))),
				times(2, req("edge", 0, desc("custom=y", override(1, hour)))),
				same(req("edge", 0, desc("custom=z", override(0, minute)))),
				same(req("other", 0, desc("custom=x", override(2, minute)))), // unknown domain: no limit
				same(req("edge", 0, desc("custom=w", override(4, minute), hits(3)))),
				same(req("edge", 2, desc("custom=w", override(4, minute)))),
			),
		},
		{
			name: "hits_addend within the limit until over",
			config: `domain: edge
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 10}
`,
			steps: seq(
				same(req("edge", 3, desc("tokens=a"))),
				same(req("edge", 4, desc("tokens=a"))),
				same(req("edge", 3, desc("tokens=a"))),
				same(req("edge", 1, desc("tokens=a"))),
				// A descriptor's own hits_addend wins over the request's.
				same(req("edge", 5, desc("tokens=b", hits(1)))),
				same(req("edge", 0, desc("tokens=b", hits(4)))),
				same(req("edge", 3, desc("tokens=c", hits(2)), desc("tokens=d"))),
				same(req("edge", 10, desc("tokens=e"))),
				same(req("edge", 11, desc("tokens=f"))), // above the limit from a cold key
			),
		},
		{
			name: "check only (descriptor hits_addend 0)",
			config: `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 0}
`,
			steps: seq(
				known(req("edge", 0, desc("remote_address=1", hits(0))),
					"OK [OK 3/MINUTE rem=0]", "OK [OK 3/MINUTE rem=3 reset]", whyCheckRemaining),
				same(req("edge", 0, desc("remote_address=1"))),
				known(req("edge", 0, desc("remote_address=1", hits(0))),
					"OK [OK 3/MINUTE rem=0]", "OK [OK 3/MINUTE rem=2 reset]", whyCheckRemaining),
				times(2, req("edge", 0, desc("remote_address=1"))),
				known(req("edge", 0, desc("remote_address=1", hits(0))),
					"OK [OK 3/MINUTE rem=0]", "OK [OK 3/MINUTE rem=0 reset]", whyCheckRemaining),
				same(req("edge", 0, desc("remote_address=1"))),
				known(req("edge", 0, desc("closed=x", hits(0))),
					"OK [OK 0/MINUTE rem=0]", "OK [OK 0/MINUTE rem=0 reset]", whyCheckRemaining),
			),
		},
		{
			// Envoy Gateway's cost-based limits: a check as the request
			// starts, its real cost when the stream ends. With
			// ALLOT_CHARGE_OVER_LIMIT (the original ignores it) allot
			// charges hits past the limit, as the original counts them,
			// and answers checks from the key: within the first window
			// both answer every step alike.
			name: "check then charge (ALLOT_CHARGE_OVER_LIMIT=true)",
			config: `domain: edge
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 10}
`,
			env: []string{"ALLOT_CHARGE_OVER_LIMIT=true"},
			steps: seq(
				same(req("edge", 0, desc("tokens=t", hits(0)))),
				same(req("edge", 0, desc("tokens=t", hits(6)))),
				same(req("edge", 0, desc("tokens=t", hits(0)))),
				same(req("edge", 0, desc("tokens=t", hits(9)))), // over, and counted
				same(req("edge", 0, desc("tokens=t", hits(0)))), // past the limit: over
				same(req("edge", 0, desc("tokens=t", hits(1)))),
				same(req("edge", 0, desc("tokens=t", hits(0)))),
			),
		},
		{
			name:   "override of a configured descriptor",
			config: bare,
			steps: seq(
				times(3, ra("1")),
				known(req("edge", 0, desc("remote_address=1", override(5, minute))),
					"OK [OK 5/MINUTE rem=4 reset]", "OK [OK 5/MINUTE rem=1 reset]", whyOverrideShared),
				known(req("edge", 0, desc("remote_address=1", override(5, minute))),
					"OK [OK 5/MINUTE rem=3 reset]", "OK [OK 5/MINUTE rem=0 reset]", whyOverrideShared),
				same(ra("1")),
			),
		},
		{
			name: "limit response headers",
			config: `domain: edge
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: u
    rate_limit: {unlimited: true}
`,
			env: []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"},
			steps: seq(
				same(req("edge", 0, desc("a=1"))),
				same(req("edge", 0, desc("b=1"), desc("a=1"))),
				same(req("edge", 0, desc("a=1"), desc("b=1"))),
				same(req("edge", 0, desc("a=1"), desc("b=1"))),
				same(req("edge", 0, desc("u=1"))),
				same(req("edge", 0, desc("nope=1"))),
				known(req("edge", 0, desc("b=1", hits(0))),
					"OK [OK 5/MINUTE rem=0]", "OK [OK 5/MINUTE rem=2 reset] {RateLimit-Limit=5 RateLimit-Remaining=2 RateLimit-Reset=*}",
					whyCheckRemaining+"; so the headers, which follow the descriptor closest to its limit, leave a check out"),
			),
		},
		{
			name:   "global SHADOW_MODE",
			config: bare,
			env:    []string{"SHADOW_MODE=true"},
			steps:  times(4, ra("1")),
		},
		{
			name:   "global QUOTA_MODE",
			config: bare,
			env:    []string{"QUOTA_MODE=true"},
			steps:  times(4, ra("1")), // the fourth over its quota: OK, no reset
		},
		{
			name: "values holding the original's key separator",
			config: `domain: edge
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: k_a
    rate_limit: {unit: minute, requests_per_unit: 2}
`,
			steps: seq(
				times(2, req("edge", 0, desc("k=a_b"))),
				known(req("edge", 0, desc("k_a=b")),
					"OK [OK 2/MINUTE rem=1 reset]", "OVER_LIMIT [OVER_LIMIT 2/MINUTE rem=0 reset]",
					"the original joins a counter's key from domain, keys and values with '_' unescaped, so [k=a_b] and [k_a=b] are one counter (edge_k_a_b_<window>); allot escapes each part"),
			),
		},
		{
			name: "hour limit",
			config: `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
`,
			windows: []time.Duration{time.Hour},
			steps:   times(3, ra("1")),
		},
		{
			name:   "malformed requests",
			config: bare,
			steps: seq(
				known(req("", 0, desc("remote_address=1")), "error InvalidArgument", "error Unknown", whyErrorCode),
				known(req("edge", 0), "error InvalidArgument", "error Unknown", whyErrorCode),
			),
		},
		{
			name: "hits_addend after a denial",
			config: `domain: edge
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 5}
`,
			steps: seq(
				same(req("edge", 3, desc("tokens=a"))),
				same(req("edge", 3, desc("tokens=a"))),
				design(req("edge", 2, desc("tokens=a")),
					"OK [OK 5/MINUTE rem=0 reset]", "OVER_LIMIT [OVER_LIMIT 5/MINUTE rem=0 reset]",
					"the denied 3 cost nothing in allot (2 left); the original counted them (6 of 5)"),
				same(req("edge", 1, desc("tokens=a"))),
				design(req("edge", 0, desc("tokens=a", hits(0))),
					"OK [OK 5/MINUTE rem=0]", "OVER_LIMIT [OVER_LIMIT 5/MINUTE rem=0 reset]",
					"a check after denials: the original's counter is beyond the limit (7 of 5), allot's at it (denials cost nothing)"),
				same(req("edge", 6, desc("tokens=b"))),
				design(req("edge", 1, desc("tokens=b")),
					"OK [OK 5/MINUTE rem=4 reset]", "OVER_LIMIT [OVER_LIMIT 5/MINUTE rem=0 reset]",
					"a cost above the limit is denied and costs nothing in allot; the original counted 6"),
			),
		},
	}
}
