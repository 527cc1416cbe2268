// Package serve runs a process's listeners and components in one order:
// components start first and run until every listener has drained, so that
// no request a listener accepted finds the component behind it stopped.
// allot regional, allot coordinator and allot dev compose their servers and
// components through it.
//
// On the end of the context (or the first failure of a server or a
// component) a Group, in this order: marks every gRPC health server
// NOT_SERVING; stops its listeners accepting and waits for the requests in
// flight (HTTP Shutdown, gRPC GracefulStop) under Drain, stopping what is
// left at the deadline; then cancels the components' context and waits for
// them to return. Run returns the first error.
package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// DefaultDrain is how long a Group waits for requests in flight.
const DefaultDrain = 5 * time.Second

// Group is a set of listeners and the components behind them. The zero
// value is ready to use; add servers before Run.
type Group struct {
	// Drain bounds the wait for requests in flight (0: DefaultDrain).
	Drain time.Duration
	// Ready, when set, is polled every ReadyEvery for the health servers'
	// status (nil: SERVING while running).
	Ready      func() bool
	ReadyEvery time.Duration

	grpcs  []grpcServer
	https  []httpServer
	health []*health.Server
}

type grpcServer struct {
	srv *grpc.Server
	l   net.Listener
}

type httpServer struct {
	srv *http.Server
	l   net.Listener
	tls *tls.Config
}

// GRPC adds a gRPC server on l.
func (g *Group) GRPC(srv *grpc.Server, l net.Listener) {
	g.grpcs = append(g.grpcs, grpcServer{srv: srv, l: l})
}

// HTTP adds an HTTP server on l, with TLS when tc is not nil.
func (g *Group) HTTP(srv *http.Server, l net.Listener, tc *tls.Config) {
	g.https = append(g.https, httpServer{srv: srv, l: l, tls: tc})
}

// Health adds a gRPC health server whose status follows Ready.
func (g *Group) Health(h *health.Server) { g.health = append(g.health, h) }

// Run runs every component and serves every listener until ctx ends or one
// of them fails, then drains the listeners and only then stops the
// components (see the package doc). Components must return when their
// context ends.
func (g *Group) Run(ctx context.Context, components ...func(context.Context) error) error {
	drain := g.Drain
	if drain <= 0 {
		drain = DefaultDrain
	}
	every := g.ReadyEvery
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	// The components' context ends only after the drain.
	cctx, stopComponents := context.WithCancel(context.WithoutCancel(ctx))
	defer stopComponents()
	var first error
	var once sync.Once
	fail := make(chan struct{})
	record := func(err error) {
		if err == nil {
			return
		}
		once.Do(func() { first = err; close(fail) })
	}

	var comps sync.WaitGroup
	for _, c := range components {
		comps.Go(func() { record(c(cctx)) })
	}
	var srvs errgroup.Group
	for _, s := range g.grpcs {
		srvs.Go(func() error { record(IgnoreClosed(s.srv.Serve(s.l))); return nil })
	}
	for _, s := range g.https {
		srvs.Go(func() error {
			var err error
			if s.tls != nil {
				s.srv.TLSConfig = s.tls
				err = s.srv.ServeTLS(s.l, "", "")
			} else {
				err = s.srv.Serve(s.l)
			}
			record(IgnoreClosed(err))
			return nil
		})
	}
	stopHealth := make(chan struct{})
	var hw sync.WaitGroup
	if len(g.health) > 0 {
		hw.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				st := healthpb.HealthCheckResponse_SERVING
				if g.Ready != nil && !g.Ready() {
					st = healthpb.HealthCheckResponse_NOT_SERVING
				}
				for _, h := range g.health {
					h.SetServingStatus("", st)
				}
				select {
				case <-stopHealth:
					return
				case <-t.C:
				}
			}
		})
	}

	select {
	case <-ctx.Done():
	case <-fail:
	}
	// Drain: health first, so that balancers stop sending; then the
	// listeners, waiting for what they accepted.
	close(stopHealth)
	hw.Wait()
	for _, h := range g.health {
		h.Shutdown()
	}
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	var d sync.WaitGroup
	for _, s := range g.https {
		d.Go(func() {
			if err := s.srv.Shutdown(dctx); err != nil {
				_ = s.srv.Close()
			}
		})
	}
	for _, s := range g.grpcs {
		d.Go(func() { StopGRPC(dctx, s.srv) })
	}
	d.Wait()
	cancel()
	_ = srvs.Wait()
	// Only now the components.
	stopComponents()
	comps.Wait()
	return first
}

// StopGRPC stops s gracefully, forcibly once ctx ends.
func StopGRPC(ctx context.Context, s *grpc.Server) {
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.Stop()
		<-done
	}
}

// IgnoreClosed maps the errors of a server that was stopped to nil.
func IgnoreClosed(err error) error {
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
