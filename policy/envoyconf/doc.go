// Package envoyconf reads the configuration of Envoy's reference rate limit
// service (envoyproxy/ratelimit) and answers, for an RLS request, which limit
// each of its descriptors is subject to, with that service's matching rules.
//
// A file holds one domain and a tree of descriptors:
//
//	domain: edge
//	descriptors:
//	  - key: remote_address
//	    rate_limit: {unit: second, requests_per_unit: 10}
//	  - key: path
//	    value: /login*
//	    rate_limit: {unit: minute, requests_per_unit: 5}
//
// ParseFile checks one file as that service does (unknown keys, empty domain
// or key, duplicate keys, units, unlimited, replaces, share_threshold) and
// reports what it rejects as a *FieldError naming the file, the line and the
// field. Build joins files into a Config (a domain in two files is an error
// unless merged). Config.Match walks a request descriptor's entries down the
// tree: at each level the exact key and value, then the first wildcard value
// ("foo*") that prefixes it, then the bare key; a limit applies only at the
// depth of the descriptor's last entry, and a node with no limit (and no
// children) leaves the descriptor unlimited. Replaced drops the limits that
// another limit of the same request names in its replaces.
//
// Each limit is enforced by GCRA: requests_per_unit N per unit becomes the
// rate N per unit with a burst of N (month: 30 days, year: 365 days, as that
// service counts them). Unlike the original's fixed windows, no window
// boundary lets through twice the limit, and a denied request costs
// nothing; a limit above one unit per microsecond is rejected (GCRA keeps
// time in microseconds).
//
// The package is pure: no I/O, no clock; a Config is immutable and safe for
// concurrent use.
package envoyconf
