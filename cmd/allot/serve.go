package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/allot-dev/allot/internal/serve"
	"github.com/allot-dev/allot/internal/tlsconfig"
)

// servers are the gRPC and HTTP listeners of a long-running command
// (regional, coordinator): health and reflection on gRPC, optional TLS on
// both, and one shutdown order.
type servers struct {
	GRPC    *grpc.Server
	health  *health.Server
	gl, hl  net.Listener
	httpTLS *tls.Config
	ol      net.Listener // the plaintext ops listener, or nil
	pprof   bool
}

// listenServers opens the listeners (naming the flag of one that is taken)
// and builds the gRPC server with tlsSrv's credentials.
func listenServers(grpcListen, httpListen string, tlsSrv tlsconfig.Server, ops opsConfig) (*servers, error) {
	grpcOpts, httpTLS, err := serverOptions(tlsSrv)
	if err != nil {
		return nil, err
	}
	gl, err := listen("grpc-listen", grpcListen)
	if err != nil {
		return nil, err
	}
	hl, err := listen("http-listen", httpListen)
	if err != nil {
		_ = gl.Close()
		return nil, err
	}
	var ol net.Listener
	if ops.listen != "" {
		if ol, err = listen("ops-listen", ops.listen); err != nil {
			_ = gl.Close()
			_ = hl.Close()
			return nil, err
		}
	}
	gs := grpc.NewServer(append(grpcOpts, keepalivePolicy, streamWorkers())...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return &servers{GRPC: gs, health: hs, gl: gl, hl: hl, httpTLS: httpTLS, ol: ol, pprof: ops.pprof}, nil
}

// Addrs returns the listeners' addresses.
func (s *servers) Addrs() (grpcAddr, httpAddr string) {
	return s.gl.Addr().String(), s.hl.Addr().String()
}

// run serves handler over HTTP (and the ops listener) and the registered
// services over gRPC, runs every component, and keeps gRPC health in step
// with ready (nil: always serving) until ctx ends or one of them fails;
// then it drains the listeners (health first, HTTP and gRPC under a 5 s
// deadline) and only then stops the components (package serve).
func (s *servers) run(ctx context.Context, handler http.Handler, ready func() bool, components ...func(context.Context) error) error {
	g := serve.Group{Drain: 5 * time.Second, Ready: ready}
	g.HTTP(&http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}, s.hl, s.httpTLS)
	if s.ol != nil {
		g.HTTP(&http.Server{Handler: opsHandler(handler, s.pprof), ReadHeaderTimeout: 10 * time.Second}, s.ol, nil)
	}
	g.GRPC(s.GRPC, s.gl)
	g.Health(s.health)
	return g.Run(ctx, components...)
}

// streamWorkers serves RPCs on a pool of goroutines that outlive them
// instead of a new goroutine per RPC: a decision's call path is deep (gRPC,
// the limiter, go-redis), and a fresh goroutine grew its stack on every RPC,
// copying it two or three times (16% of allot regional's CPU at 16 callers,
// in `make bench-peers --profile`). A worker's stack stays grown. RPCs
// beyond the pool get a goroutine of their own, as without it.
func streamWorkers() grpc.ServerOption {
	return grpc.NumStreamWorkers(uint32(max(64, 16*runtime.GOMAXPROCS(0))))
}

// keepalivePolicy lets clients ping every 5 s, so that they notice a dead
// server quickly (gRPC's default refuses pings more often than every 5 min).
var keepalivePolicy = grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true})
