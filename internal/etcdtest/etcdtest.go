// Package etcdtest starts a real etcd server, embedded in the test process
// through go.etcd.io/etcd/server/v3/embed, for tests that need etcd.
package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/allot-dev/allot/internal/etcdembed"
)

// Server is one embedded etcd member on loopback.
type Server struct {
	// Endpoint is the client URL, e.g. http://127.0.0.1:43117.
	Endpoint string
	etcd     *embed.Etcd
}

// Start starts a single-member etcd with its data in t.TempDir() and stops it
// when the test ends. It fails the test if etcd does not become ready in 30 s.
func Start(t testing.TB) *Server {
	t.Helper()
	e, endpoint, err := etcdembed.Start("test", t.TempDir())
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(e.Close)
	return &Server{Endpoint: endpoint, etcd: e}
}

// Client returns a new client of s, closed when the test ends.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.Endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "health"); err != nil {
		t.Fatalf("etcdtest: first request: %v", err)
	}
	return c
}
