package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/go-redis/redis_rate/v10"
	"github.com/gubernator-io/gubernator/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The subcommands below are the processes the harness starts by running its
// own executable again, so that each server is a process of its own, as
// allot regional and Envoy's ratelimit are. They serve until SIGTERM.

// serveEtcd runs a single-member etcd, embedded through
// go.etcd.io/etcd/server/v3/embed as allot dev and allot's tests do, with
// etcd's default timings.
func serveEtcd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve-etcd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "data directory (required)")
	client := fs.String("client-url", "", "client URL, e.g. http://127.0.0.1:2379 (required)")
	peer := fs.String("peer-url", "", "peer URL, e.g. http://127.0.0.1:2380 (required)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *dir == "" || *client == "" || *peer == "" {
		return usageError{errors.New("serve-etcd: --dir, --client-url and --peer-url are required")}
	}
	cu, err := url.Parse(*client)
	if err != nil {
		return usageError{fmt.Errorf("--client-url: %w", err)}
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		return usageError{fmt.Errorf("--peer-url: %w", err)}
	}
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = *dir
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-ctx.Done():
		return nil
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	}
}

// serveRedisRate runs a minimal Envoy RLS server (envoy.service.ratelimit.v3)
// whose every descriptor is one go-redis/redis_rate/v10 AllowN call: GCRA in
// Redis Lua. The key is the domain and the descriptor's entries; the limit
// is --rate per second with burst --burst for every key.
func serveRedisRate(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve-redisrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("redis", "", "Redis address (required)")
	listen := fs.String("grpc-listen", "", "gRPC listen address (required)")
	rate := fs.Int("rate", 1_000_000, "requests per second of every key")
	burst := fs.Int("burst", 1_000_000, "burst of every key")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *addr == "" || *listen == "" {
		return usageError{errors.New("serve-redisrate: --redis and --grpc-listen are required")}
	}
	// go-redis defaults otherwise (pool of 10 connections per CPU), as allot
	// regional uses them.
	rc := redis.NewClient(&redis.Options{Addr: *addr})
	defer rc.Close()
	srv := &redisRateRLS{
		lim:   redis_rate.NewLimiter(rc),
		limit: redis_rate.Limit{Rate: *rate, Burst: *burst, Period: time.Second},
	}
	return serveGRPC(ctx, *listen, func(g *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(g, srv) })
}

// serveGRPC serves register's services on listen until ctx ends.
func serveGRPC(ctx context.Context, listen string, register func(*grpc.Server)) error {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	g := grpc.NewServer()
	register(g)
	done := make(chan error, 1)
	go func() { done <- g.Serve(l) }()
	select {
	case <-ctx.Done():
		g.GracefulStop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	}
}

type redisRateRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	lim   *redis_rate.Limiter
	limit redis_rate.Limit
}

func (s *redisRateRLS) ShouldRateLimit(ctx context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if len(r.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "descriptors: missing")
	}
	hits := int(r.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, 0, len(r.GetDescriptors())),
	}
	var key strings.Builder
	for _, d := range r.GetDescriptors() {
		key.Reset()
		key.WriteString("rr:")
		key.WriteString(r.GetDomain())
		for _, e := range d.GetEntries() {
			key.WriteByte(':')
			key.WriteString(e.GetKey())
			key.WriteByte('=')
			key.WriteString(e.GetValue())
		}
		res, err := s.lim.AllowN(ctx, key.String(), s.limit, hits)
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		st := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code: rlsv3.RateLimitResponse_OK,
			CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{
				RequestsPerUnit: uint32(s.limit.Rate), Unit: rlsv3.RateLimitResponse_RateLimit_SECOND,
			},
			LimitRemaining:     uint32(max(res.Remaining, 0)),
			DurationUntilReset: durationpb.New(res.ResetAfter),
		}
		if res.Allowed == 0 {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			st.DurationUntilReset = durationpb.New(res.RetryAfter)
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}

// serveGubernator runs a single-node gubernator v2 daemon (no peer
// discovery; the node owns every key): its own gRPC GetRateLimits, counters
// in its own memory.
func serveGubernator(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve-gubernator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcListen := fs.String("grpc-listen", "", "gRPC listen address (required)")
	httpListen := fs.String("http-listen", "", "HTTP listen address (required)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *grpcListen == "" || *httpListen == "" {
		return usageError{errors.New("serve-gubernator: --grpc-listen and --http-listen are required")}
	}
	logger := logrus.New()
	logger.SetOutput(stderr)
	logger.SetLevel(logrus.WarnLevel)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	d, err := gubernator.SpawnDaemon(sctx, gubernator.DaemonConfig{
		GRPCListenAddress: *grpcListen,
		HTTPListenAddress: *httpListen,
		AdvertiseAddress:  *grpcListen,
		InstanceID:        "bench",
		PeerDiscoveryType: "none",
		Logger:            logrus.NewEntry(logger),
	})
	if err != nil {
		return fmt.Errorf("spawn gubernator: %w", err)
	}
	defer d.Close()
	d.SetPeers([]gubernator.PeerInfo{{GRPCAddress: *grpcListen, HTTPAddress: *httpListen, IsOwner: true}})
	<-ctx.Done()
	return nil
}
