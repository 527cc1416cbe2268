package regional

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/credentials"

	"github.com/allot-dev/allot/gcra"
)

// Config configures a regional Service. Start from DefaultConfig.
type Config struct {
	// Region is this pod's region; it must be one of the policy's regions.
	Region string
	// Pod names this pod in reports; a random instance id is always appended,
	// so that the name is unique per process (default name: the region).
	Pod string
	// Store is the region's Redis (or, for allot dev, an in-memory store).
	// Required. If it also implements gcra.BatchStore, shadow limits ride in
	// the same round trip.
	Store gcra.Store
	// Etcd is the client to the etcd holding policy, budgets and grants.
	// Without it the Service is standalone: it has no policy and answers
	// only RLS requests, from envoyproxy/ratelimit configurations
	// (SetEnvoyConfig); its other APIs answer ErrNotReady.
	Etcd *clientv3.Client
	// Prefix is allot's key prefix in etcd (default /allot/v1/).
	Prefix string
	// StoreTimeout bounds one store call (I9). Default 5ms.
	StoreTimeout time.Duration
	// SettleTTL is how long a reserved decision can be settled (Reserve,
	// Settle): its reservation is kept in the store that long. Default 15m;
	// at most 24h.
	SettleTTL time.Duration
	// Coalesce, when Store is a gcra.BatchStore, merges decisions made at
	// the same time into one pipeline (package gcra/pipeline): no timer, a
	// decision that finds the store idle goes at once, those arriving while
	// pipelines are in flight go together in the next. Each decision keeps
	// its StoreTimeout; a merged pipeline ends at the latest deadline of
	// its decisions. Default true.
	Coalesce bool
	// Breaker: after BreakerFailures consecutive store failures the breaker
	// opens and decisions go straight to the fallback for BreakerOpen, then
	// a few probes test the store again. Defaults 5 and 2s.
	BreakerFailures uint32
	BreakerOpen     time.Duration
	// ReportInterval is how often the pod reports to the leader. Default 2s
	// (the coordinator's rebalance interval).
	ReportInterval time.Duration
	// CoordinatorCreds secures reports to the coordinator (nil: plaintext).
	// With a client certificate the coordinator verifies, it also
	// authenticates them.
	CoordinatorCreds credentials.TransportCredentials
	// ReportToken is the region token the coordinator requires of reports
	// (coordinator.ReportAuth), sent with each as gRPC metadata
	// "authorization: Bearer <token>"; empty: none. Over a plaintext
	// connection (no CoordinatorCreds) the token travels in the clear:
	// fine on loopback and trusted networks, otherwise pair it with TLS.
	ReportToken string
	// ReportTimeout bounds one report call. Default 1s.
	ReportTimeout time.Duration
	// StepCheck is how often the pod looks for tenants whose offered rate
	// stepped, to report them at once (shares.Tracker). Default 50ms; 0:
	// it looks only when a tenant is counted for the first time (which
	// asks for its grant at once) and at its periodic reports.
	StepCheck time.Duration
	// Drift is subtracted from every lease, covering clock-rate differences
	// between this pod and the leader. Default 500ms.
	Drift time.Duration
	// MaxTenants bounds the tenants counted between reports (split evenly
	// between the coordinator shards' tables). Default 100000.
	MaxTenants int
	// LivePods returns the region's live pod count (membership); nil means
	// 1. The open fallback admits grant / LivePods per pod.
	LivePods func() int
	// FailLogEvery bounds fallback logging to one line per limit per period.
	// Default 10s.
	FailLogEvery time.Duration
	// Logger (default: discard) and Registerer (default: none).
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now is the pod's clock, used for leases only (default time.Now). GCRA
	// time comes from the store (Redis TIME).
	Now func() time.Time
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		StoreTimeout:    5 * time.Millisecond,
		SettleTTL:       15 * time.Minute,
		Coalesce:        true,
		BreakerFailures: 5,
		BreakerOpen:     2 * time.Second,
		ReportInterval:  2 * time.Second,
		ReportTimeout:   time.Second,
		StepCheck:       50 * time.Millisecond,
		Drift:           500 * time.Millisecond,
		MaxTenants:      100_000,
		FailLogEvery:    10 * time.Second,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Region == "":
		return errors.New("regional config: Region: required")
	case c.Store == nil:
		return errors.New("regional config: Store: required")
	case c.StoreTimeout <= 0:
		return fmt.Errorf("regional config: StoreTimeout: %v: must be positive", c.StoreTimeout)
	case c.SettleTTL < time.Second || c.SettleTTL > 24*time.Hour:
		return fmt.Errorf("regional config: SettleTTL: %v: want 1s to 24h", c.SettleTTL)
	case c.BreakerFailures < 1:
		return errors.New("regional config: BreakerFailures: must be at least 1")
	case c.BreakerOpen <= 0:
		return fmt.Errorf("regional config: BreakerOpen: %v: must be positive", c.BreakerOpen)
	case c.ReportInterval <= 0:
		return fmt.Errorf("regional config: ReportInterval: %v: must be positive", c.ReportInterval)
	case c.ReportTimeout <= 0:
		return fmt.Errorf("regional config: ReportTimeout: %v: must be positive", c.ReportTimeout)
	case c.StepCheck < 0:
		return fmt.Errorf("regional config: StepCheck: %v: must not be negative (0: no early reports of steps)", c.StepCheck)
	case c.Drift < 0:
		return fmt.Errorf("regional config: Drift: %v: must not be negative", c.Drift)
	case c.MaxTenants < 1:
		return errors.New("regional config: MaxTenants: must be at least 1")
	}
	for _, r := range c.ReportToken {
		if r <= ' ' || r > '~' {
			return fmt.Errorf("regional config: ReportToken: %q: want printable ASCII without spaces (it travels as gRPC metadata)", r)
		}
	}
	return nil
}
