package membership

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Membership. Start from DefaultConfig; New copies it.
//
// The timings are memberlist's LAN preset tightened for a handful of pods on
// one network, so that a pod that dies is noticed within a few seconds. With
// n pods (n ≤ 10), a dead pod is probed by some member within about
// (n-1)·ProbeInterval, the failed probe takes one ProbeInterval, and the pod
// is then suspect for between SuspicionMult·ProbeInterval (once another
// member confirms the suspicion) and
// SuspicionMaxTimeoutMult·SuspicionMult·ProbeInterval before it is declared
// dead and dropped from LivePods: with the defaults and three pods, 3 to 6 s.
// A pod that leaves gracefully is dropped within a few GossipIntervals.
type Config struct {
	// NodeName names this pod among its region's pods; it must be unique
	// there. Default: the hostname and a random suffix, so that a restarted
	// pod never collides with its dead predecessor.
	NodeName string
	// Region is this pod's region (required). It is memberlist's cluster
	// label: pods of other regions cannot join, probe or gossip with this
	// one. At most 200 bytes.
	Region string
	// BindAddr is the IP:port memberlist listens on, UDP and TCP alike.
	// Port 0 picks a free port (see Addr). An empty host means 0.0.0.0.
	// Default 0.0.0.0:7946.
	BindAddr string
	// AdvertiseAddr is the IP or IP:port other pods reach this one at.
	// Default: BindAddr, or when that is 0.0.0.0, the first private IP of
	// this host (memberlist fails to start if there is none; then set this,
	// e.g. to the pod IP).
	AdvertiseAddr string
	// Join lists seeds: host, host:port or IP:port of pods of the region
	// (a DNS name resolving to every pod, such as a headless Kubernetes
	// service, is a good seed). Run retries them every JoinRetryInterval
	// until one answers. Empty: this pod starts alone and waits to be
	// joined.
	Join []string
	// JoinRetryInterval is the pause between join attempts while no seed
	// has answered yet. Default 1s.
	JoinRetryInterval time.Duration
	// RejoinInterval: once joined, Run joins the seeds again this often,
	// which merges this pod's view with theirs. memberlist alone never
	// reconnects two groups that declared each other dead (after a
	// partition longer than GossipToTheDeadTime); this does. 0 disables.
	// Default 30s.
	RejoinInterval time.Duration
	// LeaveTimeout bounds how long Run waits, when its context ends, for
	// the leave broadcast to reach another member. Default 2s.
	LeaveTimeout time.Duration
	// SecretKey, when set, encrypts and authenticates all gossip with
	// AES-GCM. 16, 24 or 32 bytes (AES-128, -192, -256); every pod of the
	// region must use the same key. Default: none.
	SecretKey []byte

	// ProbeInterval is the pause between two probes of random members.
	// Default 500ms (LAN preset: 1s).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct probe waits for its ack before
	// indirect probes are tried: about the 99th percentile RTT. Must be
	// below ProbeInterval. Default 250ms (LAN preset: 500ms).
	ProbeTimeout time.Duration
	// IndirectChecks is how many members are asked to probe a member that
	// missed a direct probe. Default 3.
	IndirectChecks int
	// SuspicionMult: a suspect member is declared dead after
	// SuspicionMult · max(1, log10(n)) · ProbeInterval once enough members
	// confirm the suspicion. Default 3 (LAN preset: 4).
	SuspicionMult int
	// SuspicionMaxTimeoutMult bounds the suspicion timeout without
	// confirmations: SuspicionMaxTimeoutMult times the timeout above.
	// Default 3 (LAN preset: 6).
	SuspicionMaxTimeoutMult int
	// AwarenessMaxMultiplier bounds how far a pod that sees itself
	// degraded (missed acks, slow handling) stretches its probe interval.
	// Default 4 (LAN preset: 8).
	AwarenessMaxMultiplier int
	// GossipInterval and GossipNodes: every GossipInterval, pending
	// broadcasts go to GossipNodes random members. Defaults 100ms and 3.
	GossipInterval time.Duration
	GossipNodes    int
	// RetransmitMult: each broadcast is retransmitted
	// RetransmitMult · ceil(log10(n+1)) times. Default 4.
	RetransmitMult int
	// GossipToTheDeadTime is how long dead members still receive gossip,
	// giving a wrongly declared member the chance to refute. Default 15s.
	GossipToTheDeadTime time.Duration
	// PushPullInterval is the period of full state exchanges with one
	// random member over TCP. 0 disables them. Default 15s.
	PushPullInterval time.Duration
	// TCPTimeout bounds connecting, reading and writing one stream
	// (joins, push/pull, TCP fallback probes). Default 2s.
	TCPTimeout time.Duration

	// Logger receives memberlist's log lines at their level (default:
	// discard).
	Logger *slog.Logger
	// Registerer receives this package's metrics (default: none).
	Registerer prometheus.Registerer
}

// DefaultConfig returns the defaults; Region must still be set.
func DefaultConfig() Config {
	return Config{
		BindAddr:                "0.0.0.0:7946",
		JoinRetryInterval:       time.Second,
		RejoinInterval:          30 * time.Second,
		LeaveTimeout:            2 * time.Second,
		ProbeInterval:           500 * time.Millisecond,
		ProbeTimeout:            250 * time.Millisecond,
		IndirectChecks:          3,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 3,
		AwarenessMaxMultiplier:  4,
		GossipInterval:          100 * time.Millisecond,
		GossipNodes:             3,
		RetransmitMult:          4,
		GossipToTheDeadTime:     15 * time.Second,
		PushPullInterval:        15 * time.Second,
		TCPTimeout:              2 * time.Second,
	}
}

const maxRegion = 200

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if err := c.validateAddrs(); err != nil {
		return err
	}
	switch {
	case c.Region == "":
		return errors.New("membership config: Region: required")
	case len(c.Region) > maxRegion:
		return fmt.Errorf("membership config: Region: %d bytes: at most %d", len(c.Region), maxRegion)
	case len(c.NodeName) > 128:
		return fmt.Errorf("membership config: NodeName: %d bytes: at most 128", len(c.NodeName))
	case len(c.SecretKey) != 0 && len(c.SecretKey) != 16 && len(c.SecretKey) != 24 && len(c.SecretKey) != 32:
		return fmt.Errorf("membership config: SecretKey: %d bytes: want 16, 24 or 32", len(c.SecretKey))
	case c.JoinRetryInterval <= 0:
		return fmt.Errorf("membership config: JoinRetryInterval: %v: must be positive", c.JoinRetryInterval)
	case c.RejoinInterval < 0:
		return fmt.Errorf("membership config: RejoinInterval: %v: must not be negative", c.RejoinInterval)
	case c.LeaveTimeout <= 0:
		return fmt.Errorf("membership config: LeaveTimeout: %v: must be positive", c.LeaveTimeout)
	case c.ProbeInterval <= 0:
		return fmt.Errorf("membership config: ProbeInterval: %v: must be positive", c.ProbeInterval)
	case c.ProbeTimeout <= 0 || c.ProbeTimeout >= c.ProbeInterval:
		return fmt.Errorf("membership config: ProbeTimeout: %v: must be positive and below ProbeInterval (%v)", c.ProbeTimeout, c.ProbeInterval)
	case c.IndirectChecks < 0:
		return fmt.Errorf("membership config: IndirectChecks: %d: must not be negative", c.IndirectChecks)
	case c.SuspicionMult < 1:
		return fmt.Errorf("membership config: SuspicionMult: %d: must be at least 1", c.SuspicionMult)
	case c.SuspicionMaxTimeoutMult < 1:
		return fmt.Errorf("membership config: SuspicionMaxTimeoutMult: %d: must be at least 1", c.SuspicionMaxTimeoutMult)
	case c.AwarenessMaxMultiplier < 1:
		return fmt.Errorf("membership config: AwarenessMaxMultiplier: %d: must be at least 1", c.AwarenessMaxMultiplier)
	case c.GossipInterval <= 0:
		return fmt.Errorf("membership config: GossipInterval: %v: must be positive", c.GossipInterval)
	case c.GossipNodes < 1:
		return fmt.Errorf("membership config: GossipNodes: %d: must be at least 1", c.GossipNodes)
	case c.RetransmitMult < 1:
		return fmt.Errorf("membership config: RetransmitMult: %d: must be at least 1", c.RetransmitMult)
	case c.GossipToTheDeadTime <= 0:
		return fmt.Errorf("membership config: GossipToTheDeadTime: %v: must be positive", c.GossipToTheDeadTime)
	case c.PushPullInterval < 0:
		return fmt.Errorf("membership config: PushPullInterval: %v: must not be negative", c.PushPullInterval)
	case c.TCPTimeout <= 0:
		return fmt.Errorf("membership config: TCPTimeout: %v: must be positive", c.TCPTimeout)
	}
	for i, j := range c.Join {
		if j == "" {
			return fmt.Errorf("membership config: Join[%d]: empty address", i)
		}
	}
	return nil
}

func (c Config) validateAddrs() error {
	if _, _, err := splitBind(c.BindAddr); err != nil {
		return fmt.Errorf("membership config: BindAddr: %w", err)
	}
	if _, _, err := splitAdvertise(c.AdvertiseAddr); err != nil {
		return fmt.Errorf("membership config: AdvertiseAddr: %w", err)
	}
	return nil
}

// splitBind parses IP:port; an empty host means 0.0.0.0.
func splitBind(addr string) (ip string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q: want IP:port, e.g. 0.0.0.0:7946", addr)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("%q: host must be an IP address", addr)
	}
	port, err = parsePort(p)
	if err != nil {
		return "", 0, fmt.Errorf("%q: %w", addr, err)
	}
	return host, port, nil
}

// splitAdvertise parses "", IP or IP:port; port 0 means "the bound port".
func splitAdvertise(addr string) (ip string, port int, err error) {
	if addr == "" {
		return "", 0, nil
	}
	if net.ParseIP(addr) != nil {
		return addr, 0, nil
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("%q: want an IP or IP:port", addr)
	}
	port, err = parsePort(p)
	if err != nil {
		return "", 0, fmt.Errorf("%q: %w", addr, err)
	}
	return host, port, nil
}

func parsePort(p string) (int, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return 0, fmt.Errorf("port %q: want 0 to 65535", p)
	}
	return n, nil
}
