package coordinator

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allot-dev/allot/internal/state"
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
	// Shard is the coordinator shard this instance campaigns for and
	// leads: the tenants t with shares.ShardOf(t, shards) == Shard, where
	// shards is the cluster's shard count (docs/protocol.md, "Shards").
	// Default 0.
	Shard int
	// Shards is the shard count this instance expects: the first
	// coordinator of a new cluster records it, and an instance whose count
	// differs from the cluster's does not start. 0 takes the cluster's (1
	// for a new cluster).
	Shards int
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
	// whose traffic no pod reported for this long is forgotten: its grants
	// shrink to the cold floor and are dropped at every pod, and the leader
	// frees it (docs/protocol.md, rule 7). 0 keeps every tenant. Default 5m.
	TenantIdleTimeout time.Duration
	// MaxTenants caps the tenants the leader tracks: tenants with a budget
	// record or a policy entry are always tracked (and count towards it);
	// a tenant first met in reports beyond it stays on cold floors, its
	// usage counted and logged. 0: no cap. Default 1,000,000.
	MaxTenants int
	// Reports says whose reports are taken (see ReportAuth); the zero
	// value takes none.
	Reports ReportAuth
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

// FieldError is an invalid Config field. Reason names other fields by their
// Go names; a command that sets the fields from flags can name its flags
// instead, which is why Field, Value and Reason are kept apart.
type FieldError struct {
	// Field is the field at fault, e.g. "Lease".
	Field string
	// Value is its value (nil when the field is missing).
	Value any
	// Reason says what is wrong, e.g. "must be at least two
	// RebalanceInterval (10s)".
	Reason string
}

func (e *FieldError) Error() string {
	if e.Value == nil {
		return fmt.Sprintf("coordinator config: %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("coordinator config: %s: %v: %s", e.Field, e.Value, e.Reason)
}

// Validate reports the first invalid field as a *FieldError: the settings
// (ValidateSettings), then the dependencies (Etcd).
func (c Config) Validate() error {
	if err := c.ValidateSettings(); err != nil {
		return err
	}
	if c.Etcd == nil {
		return &FieldError{Field: "Etcd", Reason: "required"}
	}
	return nil
}

// ValidateSettings reports the first invalid setting as a *FieldError,
// leaving out the dependencies (Etcd, Logger, Registerer, Now), so that a
// command can check its flags before it dials anything. It checks the
// allocator's configuration too, as the leader will build it (Shares with
// Interval = RebalanceInterval and Lease = Lease; the regions, which come
// from the policy, stand in as one placeholder): a config it accepts never
// fails at the first rebalance.
func (c Config) ValidateSettings() error {
	switch {
	case c.SessionTTL < time.Second || c.SessionTTL%time.Second != 0:
		return &FieldError{Field: "SessionTTL", Value: c.SessionTTL, Reason: "want whole seconds, at least 1s"}
	case c.RebalanceInterval <= 0:
		return &FieldError{Field: "RebalanceInterval", Value: c.RebalanceInterval, Reason: "must be positive"}
	case c.Lease <= c.SessionTTL+c.RebalanceInterval:
		return &FieldError{Field: "Lease", Value: c.Lease, Reason: fmt.Sprintf(
			"must exceed SessionTTL + RebalanceInterval (%v)", c.SessionTTL+c.RebalanceInterval)}
	case c.Lease < 2*c.RebalanceInterval:
		// shares.Config's rule, named in this Config's terms.
		return &FieldError{Field: "Lease", Value: c.Lease, Reason: fmt.Sprintf(
			"must be at least two RebalanceInterval (%v)", 2*c.RebalanceInterval)}
	}
	switch {
	case c.Shard < 0 || c.Shard >= state.MaxShards:
		return &FieldError{Field: "Shard", Value: c.Shard, Reason: fmt.Sprintf("want 0 to %d", state.MaxShards-1)}
	case c.Shards < 0 || c.Shards > state.MaxShards:
		return &FieldError{Field: "Shards", Value: c.Shards, Reason: fmt.Sprintf("want 1 to %d (0: the cluster's)", state.MaxShards)}
	case c.Shards > 0 && c.Shard >= c.Shards:
		return &FieldError{Field: "Shard", Value: c.Shard, Reason: fmt.Sprintf("must be below Shards (%d): shards are numbered from 0", c.Shards)}
	}
	switch {
	case c.TenantIdleTimeout < 0:
		return &FieldError{Field: "TenantIdleTimeout", Value: c.TenantIdleTimeout, Reason: "must not be negative (0 keeps every tenant)"}
	case c.MaxTenants < 0:
		return &FieldError{Field: "MaxTenants", Value: c.MaxTenants, Reason: "must not be negative (0: no cap)"}
	}
	if err := c.Reports.Validate(); err != nil {
		return &FieldError{Field: "Reports", Reason: err.Error()}
	}
	sc := c.allocatorConfig([]string{"placeholder"})
	if err := sc.Validate(); err != nil {
		return &FieldError{Field: "Shares", Reason: err.Error()}
	}
	return nil
}

// allocatorConfig is the allocator's configuration for regions.
func (c Config) allocatorConfig(regions []string) shares.Config {
	sc := c.Shares
	sc.Regions = slices.Clone(regions)
	sc.Interval = c.RebalanceInterval
	sc.Lease = c.Lease
	return sc
}
