package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

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
	gs := grpc.NewServer(append(grpcOpts, keepalivePolicy)...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return &servers{GRPC: gs, health: hs, gl: gl, hl: hl, httpTLS: httpTLS, ol: ol, pprof: ops.pprof}, nil
}

// Addrs returns the listeners' addresses.
func (s *servers) Addrs() (grpcAddr, httpAddr string) {
	return s.gl.Addr().String(), s.hl.Addr().String()
}

// run serves handler over HTTP and the registered services over gRPC, runs
// every component, and keeps gRPC health in step with ready (nil: always
// serving) until ctx ends or a component fails; then it stops taking
// requests (health first, HTTP and gRPC under a 5 s deadline) and waits for
// the components to return.
func (s *servers) run(ctx context.Context, handler http.Handler, ready func() bool, components ...func(context.Context) error) error {
	httpSrv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range components {
		g.Go(func() error { return c(gctx) })
	}
	g.Go(func() error { return ignoreClosed(s.GRPC.Serve(s.gl)) })
	g.Go(func() error { return ignoreClosed(serveHTTP(httpSrv, s.hl, s.httpTLS)) })
	opsSrv := &http.Server{Handler: opsHandler(handler, s.pprof), ReadHeaderTimeout: 10 * time.Second}
	if s.ol != nil {
		g.Go(func() error { return ignoreClosed(opsSrv.Serve(s.ol)) })
	}
	g.Go(func() error {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			st := healthpb.HealthCheckResponse_SERVING
			if ready != nil && !ready() {
				st = healthpb.HealthCheckResponse_NOT_SERVING
			}
			s.health.SetServingStatus("", st)
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
	g.Go(func() error {
		<-gctx.Done()
		s.health.Shutdown()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = httpSrv.Shutdown(sctx)
		if s.ol != nil {
			_ = opsSrv.Shutdown(sctx)
		}
		stopGRPC(s.GRPC, 5*time.Second)
		return nil
	})
	return g.Wait()
}

func ignoreClosed(err error) error {
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// keepalivePolicy lets clients ping every 5 s, so that they notice a dead
// server quickly (gRPC's default refuses pings more often than every 5 min).
var keepalivePolicy = grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true})

// stopGRPC stops gs gracefully, forcibly after d.
func stopGRPC(gs *grpc.Server, d time.Duration) {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		gs.Stop()
		<-done
	}
}
