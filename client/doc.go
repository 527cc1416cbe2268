// Package client is how Go services use allot: a gRPC client of a region's
// limiter (allot.v1.Limiter, served by `allot regional`) and net/http
// middleware that answers 429 Too Many Requests.
//
// # Client
//
// New dials the region's limiter pods (Config.Target, TLS or plaintext,
// extra grpc.DialOptions; calls are spread over the pods round-robin).
// Decide asks for one request of a given cost, DecideBatch for several.
// Every call is bounded by Config.Timeout (default 20ms) and by its context:
// a limiter that is down or stalled costs a request at most that long. An
// error wraps exactly one of two sentinels, for errors.Is:
//   - ErrUnavailable: no decision was made (unreachable, timed out, not
//     ready, failed); the request may be fine, so fail open or closed;
//   - ErrInvalid: the request was bad (no tenant, cost < 1, cost above a
//     burst); the message names the field.
//
// # Coalescing
//
// With Config.Coalesce (set by DefaultConfig), Decide calls made at the
// same time merge into DecideBatch RPCs: a call that finds fewer than 4
// RPCs in flight goes at once, alone; calls arriving while 4 are in flight
// wait and go together (up to Config.MaxBatch) in the next. One caller sees
// no change; many callers cost the limiter one Redis round trip per batch
// and this process one RPC, several times fewer CPU per decision
// (BENCHMARKS.md). Each call keeps its own answer, error (a bad request
// fails alone) and deadline; a merged RPC runs until the latest of its
// callers' deadlines, and a caller whose deadline passes first returns
// ErrUnavailable at once. It needs a limiter that knows independent
// batches (this release); with an older one a bad request merged with
// others makes the client decide each of them again on its own.
//
// # Middleware
//
// Middleware wraps an http.Handler. A DescriptorsFunc (FromHeader,
// FromHeaders, CostFromHeader, Merge, or your own) names the caller and the
// cost; the
// Decider (a *Client, or anything with its Decide method) decides:
//   - allowed: served, with the RateLimit and RateLimit-Policy fields of
//     draft-ietf-httpapi-ratelimit-headers-10 on the response;
//   - denied: 429 with Retry-After (whole seconds, rounded up, at least 1),
//     the RateLimit fields, and Cache-Control: no-store;
//   - descriptors missing or rejected: 400;
//   - limiter unavailable: FailOpen (default) serves the request; FailClosed
//     answers 503 with Retry-After.
//
// Hooks (WithOnError, WithOnDecision) let a service count what happened.
//
// # Invariants
//
//   - 429 means only "the limiter denied this caller": a limiter failure is
//     never a 429 (FailClosed answers 503).
//   - On a 429, Retry-After ≥ the RateLimit field's t: a client that waits
//     as told is not denied again for the same reason.
//   - A request is served only when the limiter allowed it, or the limiter
//     was unavailable and the mode is FailOpen.
//
// # Concurrency
//
// A Client is safe for concurrent use; it owns one gRPC connection (Close
// releases it) and starts no goroutines of its own beyond gRPC's (a merged
// RPC is sent by one of the waiting callers). The
// middleware is safe for concurrent use; hooks and DescriptorsFuncs are
// called concurrently, from the request's goroutine.
//
// # Clocks
//
// The limiter's clock is authoritative: GCRA time is the region's Redis TIME
// (or the in-memory store's clock). The client reads no clock except for the
// per-call deadline; the durations it reports are the limiter's.
package client
