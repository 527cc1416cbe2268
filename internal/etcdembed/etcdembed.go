// Package etcdembed starts a single-member etcd embedded in the process
// (go.etcd.io/etcd/server/v3/embed) on free loopback ports: allot dev's
// etcd and the tests' (internal/etcdtest).
package etcdembed

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Start starts a member named name with its data in dir, and returns it
// and its client URL once it is ready (within 30 s). The ports are found
// free, then bound by etcd, and another process may take one in between:
// Start tries again on fresh ports, up to five times. The caller closes the
// member.
func Start(name, dir string) (*embed.Etcd, string, error) {
	for attempt := 1; ; attempt++ {
		e, endpoint, err := start(name, dir)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || attempt == 5 {
			return e, endpoint, err
		}
	}
}

func start(name, dir string) (*embed.Etcd, string, error) {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client, err := freeURL()
	if err != nil {
		return nil, "", err
	}
	peer, err := freeURL()
	if err != nil {
		return nil, "", err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = name + "=" + peer.String()
	// Short election timeouts keep a single member quick to start.
	cfg.TickMs, cfg.ElectionMs = 10, 100
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, "", errors.New("embedded etcd not ready within 30s")
	}
	return e, client.String(), nil
}

func freeURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, fmt.Errorf("free port: %w", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return url.URL{Scheme: "http", Host: addr}, nil
}
