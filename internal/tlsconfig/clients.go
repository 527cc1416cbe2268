package tlsconfig

import (
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ApplyRedis sets o.TLSConfig from c, or leaves o untouched when TLS is
// off. go-redis sends each node's host as the server name when ServerName
// is empty, so with a Redis Cluster (whose nodes announce IPs) either the
// node certificates carry those IPs or ServerName names a common DNS name.
func (c Client) ApplyRedis(o *redis.UniversalOptions) error {
	cfg, err := c.Config()
	if err != nil || cfg == nil {
		return err
	}
	o.TLSConfig = cfg
	return nil
}

// ApplyEtcd sets cfg.TLS from c, or leaves cfg untouched when TLS is off.
// The endpoints should then be https:// URLs.
func (c Client) ApplyEtcd(cfg *clientv3.Config) error {
	tc, err := c.Config()
	if err != nil || tc == nil {
		return err
	}
	cfg.TLS = tc
	return nil
}
