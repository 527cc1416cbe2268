// Package keys names the Redis keys of allot's limits.
//
// A key reads
//
//	allot:v1:{<tenant>}:<limit>[:<name>=<value>]...
//
// with every part escaped: bytes outside A–Z, a–z, 0–9 and "-._~" are written
// as %XX (upper-case hex), so ':', '=', '{', '}', '%', spaces, control bytes
// and non-ASCII bytes never appear raw. Hence:
//
//   - No input can forge another key: Parse inverts Key, so distinct inputs
//     give distinct keys.
//   - The Redis Cluster hash tag (the text between the first '{' and the
//     next '}') is always exactly the escaped tenant, so every key of one
//     tenant lands in one slot and a composite decision over them is one
//     script call.
//
// The version ("v1") changes whenever the layout or the stored value does,
// so an upgrade never reads a key written under another scheme.
//
// The package is pure: no I/O, no clock, no state; safe for concurrent use.
package keys
