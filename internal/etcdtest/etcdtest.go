// Package etcdtest starts a real etcd server, embedded in the test process
// through go.etcd.io/etcd/server/v3/embed, for tests that need etcd.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
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
	// The ports are found free, then bound by etcd: another test process
	// may take one in between. Try again on fresh ports when that happens.
	for attempt := 1; ; attempt++ {
		s, err := start(t)
		if err == nil {
			return s
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 5 {
			t.Fatalf("etcdtest: %v", err)
		}
	}
}

func start(t testing.TB) (*Server, error) {
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client, peer := freeURL(t), freeURL(t)
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, peer.String())
	// Short election timeouts keep a single member quick to start.
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(30 * time.Second):
		e.Server.Stop()
		return nil, errors.New("embedded etcd not ready within 30s")
	}
	return &Server{Endpoint: client.String(), etcd: e}, nil
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

func freeURL(t testing.TB) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: free port: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return url.URL{Scheme: "http", Host: addr}
}
