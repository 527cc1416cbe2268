// Package devtest runs an allot dev cluster (package dev: etcd, a
// coordinator and regional pods in one process) for the tests of packages
// that need a whole working allot behind them.
package devtest

import (
	"context"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/dev"
)

// Start runs cfg until tb ends and returns the cluster once every part
// serves.
func Start(tb testing.TB, cfg dev.Config) *dev.Cluster {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan *dev.Cluster, 1)
	done := make(chan error, 1)
	go func() { done <- dev.Run(ctx, cfg, func(c *dev.Cluster) { started <- c }) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("allot dev: %v", err)
		}
	})
	select {
	case cl := <-started:
		return cl
	case err := <-done:
		done <- err
		tb.Fatalf("allot dev: %v", err)
	case <-time.After(30 * time.Second):
		tb.Fatal("allot dev did not start in 30 s")
	}
	return nil
}
