// Command benchpeers measures allot end to end against the physical limit of
// its Redis and against peer rate limiters, in one run on one machine, and
// writes a report (make bench-peers).
//
// One redis-server on loopback serves every Redis-backed peer. The physical
// limit is redis-benchmark running allot's single-key GCRA script by
// EVALSHA, unpipelined and pipelined. allot runs as `allot regional` (built
// from the main module) beside `allot coordinator` and an etcd, and is
// driven through gRPC Decide, Envoy RLS ShouldRateLimit and HTTP POST
// /v1/decide, with an exact limit (every decision calls Redis) and a leased
// one (lease: 10), and on the exact limit also through allot's Go client
// (package client, compiled into this harness; its default coalescing merges
// concurrent calls into DecideBatch RPCs) and by raw DecideBatch RPCs of 64
// decisions. The same binary also runs as `allot envoy-ratelimit`, standalone,
// with the environment and configuration directory Envoy's ratelimit gets,
// driven by the same RLS requests. The peers are Envoy's reference ratelimit service,
// go-redis/redis_rate/v10 behind a minimal RLS server, and gubernator v2;
// every server is a process of its own. One closed-loop load generator
// (fixed concurrency, each goroutine with one call in flight) drives every
// case, RLS peers through the same client code; rounds interleave the cases
// in a rotated order so drift on the shared machine hits all of them alike.
//
// The harness runs its own executable again for the servers it hosts
// (serve-etcd, serve-redisrate, serve-gubernator).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, new(usageError)):
		fmt.Fprintf(os.Stderr, "benchpeers: %v\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "benchpeers: %v\n", err)
		os.Exit(1)
	}
}

// usageError is a bad command line (exit status 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// run dispatches to a server subcommand or runs the benchmark. Progress and
// errors go to stderr; results go to files under --out.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "serve-etcd":
			return serveEtcd(ctx, args[1:], stderr)
		case "serve-redisrate":
			return serveRedisRate(ctx, args[1:], stderr)
		case "serve-gubernator":
			return serveGubernator(ctx, args[1:], stderr)
		}
	}
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	return bench(ctx, cfg, stderr)
}
