// Package peers benchmarks allot's Redis store side by side with peer
// limiters on the same redis-server in the same run: today
// github.com/go-redis/redis_rate/v10 (GCRA in Lua, as allot). It is a
// separate module so that peers stay out of allot's go.mod; it only has
// benchmarks (go test -bench . in this directory). See BENCHMARKS.md at the
// repository root for the method and the figures.
//
// cmd/benchpeers (make bench-peers) measures the whole path instead: allot
// regional as its own process (through gRPC, RLS, HTTP, allot's Go client
// and raw DecideBatch RPCs) against redis-benchmark's physical limit,
// Envoy's reference ratelimit service, redis_rate behind an RLS server and
// gubernator, each its own process, in one interleaved run.
package peers
