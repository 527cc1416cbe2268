// Package coordtest starts a real coordinator (package coordinator, over a
// given etcd) for the tests of packages whose pods need a leader to answer
// their reports: since protocol v2 a pod enforces budget limits only with
// what a leader told it.
package coordtest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/coordinator"
	"github.com/allot-dev/allot/internal/wait"
)

// Coordinator is a running coordinator.
type Coordinator struct {
	*coordinator.Coordinator
	// Addr is its gRPC address (published in the election, so pods find it).
	Addr  string
	stop  func()
	crash func()
}

// Stop stops it (leaving the election); Start's cleanup does it otherwise.
func (c *Coordinator) Stop() { c.stop() }

// Crash stops it as a crash would: its gRPC server stops and its etcd
// client closes first, so it cannot resign: its session lives on in etcd
// until its TTL runs out. cfg.Etcd must be this coordinator's own client.
func (c *Coordinator) Crash() { c.crash() }

// Fast is a configuration for tests: rebalances every 100 ms, a 1 s session
// and a 1.5 s lease.
func Fast(etcd *clientv3.Client) coordinator.Config {
	cfg := coordinator.DefaultConfig()
	cfg.Etcd = etcd
	cfg.SessionTTL, cfg.RebalanceInterval, cfg.Lease = time.Second, 100*time.Millisecond, 1500*time.Millisecond
	cfg.Shares.Interval = cfg.RebalanceInterval
	cfg.Reports = coordinator.ReportAuth{Insecure: true}
	return cfg
}

// Start runs a coordinator with cfg (see Fast) serving gRPC on a loopback
// port until tb ends. cfg.GRPCAddr is set to that port.
func Start(tb testing.TB, cfg coordinator.Config) *Coordinator {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	cfg.GRPCAddr = lis.Addr().String()
	c, err := coordinator.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer()
	c.RegisterGRPC(gs, coordinator.Auth{Insecure: true})
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("coordinator Run: %v", err)
		}
		gs.Stop()
		<-served
	}
	crash := func() {
		gs.Stop()
		_ = cfg.Etcd.Close()
		stop()
	}
	tb.Cleanup(stop)
	// Until it has read (or, on a new cluster, recorded) the shard count,
	// another writer of it could take the cluster's count first.
	wait.Until(tb, 10*time.Second, func() error {
		if n, _ := c.Shards(); n == 0 {
			return errors.New("coordtest: the coordinator has not read the shard count")
		}
		return nil
	})
	return &Coordinator{Coordinator: c, Addr: cfg.GRPCAddr, stop: stop, crash: crash}
}
