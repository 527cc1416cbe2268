package coordinator

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allot-dev/allot/shares"
)

// Config configures a Coordinator. Start from DefaultConfig.
type Config struct {
	// ID names this instance in the election and in status (default: a
	// random one).
	ID string
	// Etcd is the client; required.
	Etcd *clientv3.Client
	// Prefix is where allot's state lives in etcd (default /allot/v1/).
	Prefix string
	// GRPCAddr and HTTPAddr are the advertised addresses of this instance,
	// published in the election so that followers can name the leader.
	GRPCAddr, HTTPAddr string
	// SessionTTL is the etcd session TTL: how long a crashed leader keeps
	// leadership. Whole seconds, ≥ 1s. Default 3s.
	SessionTTL time.Duration
	// RebalanceInterval is how often the leader rebalances. Default 2s.
	RebalanceInterval time.Duration
	// Lease is how long a report's answer lets a pod enforce its grants.
	// Default 10s; must exceed SessionTTL + RebalanceInterval so that a
	// leader crash costs nothing (regions keep their grants while a new
	// leader takes over).
	Lease time.Duration
	// TenantIdleTimeout: a tenant with no budget record and no policy entry
	// that no pod reported for this long is forgotten (its grants dropped;
	// it returns on cold floors). 0 keeps every tenant. Default 5m.
	TenantIdleTimeout time.Duration
	// MaxTenants caps the tenants the leader tracks from reports (budget
	// records and policy tenants are always tracked); beyond it, further
	// tenants stay on cold floors, counted and logged. 0: no cap. Default
	// 1,000,000.
	MaxTenants int
	// Shares tunes the allocator (smoothing, headroom, deadband, slew);
	// Regions, Interval and Lease are set from the policy and this Config.
	Shares shares.Config
	// Logger (default: discard) and Registerer (default: none).
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now is the leader's clock (default time.Now).
	Now func() time.Time
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		SessionTTL:        3 * time.Second,
		RebalanceInterval: 2 * time.Second,
		Lease:             10 * time.Second,
		TenantIdleTimeout: 5 * time.Minute,
		MaxTenants:        1_000_000,
		Shares:            shares.DefaultConfig(),
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Etcd == nil:
		return errors.New("coordinator config: Etcd: required")
	case c.SessionTTL < time.Second || c.SessionTTL%time.Second != 0:
		return fmt.Errorf("coordinator config: SessionTTL: %v: want whole seconds, at least 1s", c.SessionTTL)
	case c.RebalanceInterval <= 0:
		return fmt.Errorf("coordinator config: RebalanceInterval: %v: must be positive", c.RebalanceInterval)
	case c.Lease <= c.SessionTTL+c.RebalanceInterval:
		return fmt.Errorf("coordinator config: Lease: %v must exceed SessionTTL + RebalanceInterval (%v) so that a failover costs nothing",
			c.Lease, c.SessionTTL+c.RebalanceInterval)
	}
	return nil
}
