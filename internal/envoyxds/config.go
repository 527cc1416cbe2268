package envoyxds

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"
)

// Config configures a Subscriber. Each field names the setting of the
// original service it stands for.
type Config struct {
	// ServerURL is the xDS management server, a gRPC target such as
	// host:port (CONFIG_GRPC_XDS_SERVER_URL, default localhost:18000).
	ServerURL string
	// NodeID is the node's id in every request; the server chooses the
	// snapshot by it (CONFIG_GRPC_XDS_NODE_ID, default "default").
	NodeID string
	// NodeMetadata is sent as the node's metadata, each value a string
	// (CONFIG_GRPC_XDS_NODE_METADATA).
	NodeMetadata map[string]string
	// Headers are gRPC metadata sent with the stream, e.g. for
	// authorization (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS). Keys are
	// sent in lower case.
	Headers map[string]string
	// Creds secure the connection; nil connects in plain text
	// (CONFIG_GRPC_XDS_SERVER_USE_TLS and the TLS files).
	Creds credentials.TransportCredentials
	// RetryInterval paces answers to a server that keeps sending
	// configurations this subscriber rejects: the second and later NACKs
	// in a row on one stream wait this long, so that a server that resends
	// at once (as go-control-plane's snapshot cache does) does not spin
	// (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL, default 3s).
	RetryInterval time.Duration
	// BackoffInitial is the wait before the first reconnection after the
	// server went away; each further failed try doubles it, up to
	// BackoffMax (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, default 10s, and
	// XDS_CLIENT_BACKOFF_MAX_INTERVAL, default 60s). A stream that
	// delivered a response starts the sequence again.
	BackoffInitial, BackoffMax time.Duration
	// BackoffRandomFactor spreads each wait, when Jitter is set, uniformly
	// within ±factor of it (never above BackoffMax), so that many
	// subscribers do not reconnect in step (XDS_CLIENT_BACKOFF_RANDOM_FACTOR,
	// default 0.5, and XDS_CLIENT_BACKOFF_JITTER, default true).
	BackoffRandomFactor float64
	Jitter              bool
	// MaxMsgSize is the largest response accepted, in bytes; 0 is gRPC's
	// default of 4 MiB (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES).
	MaxMsgSize int
	// Merge joins the resources that hold the same domain instead of
	// rejecting the response (MERGE_DOMAIN_CONFIG).
	Merge bool
	// Logger receives connection and update events (default: discard).
	Logger *slog.Logger
	// Registerer receives the metrics (default: none).
	Registerer prometheus.Registerer
}

// DefaultConfig returns the original service's defaults.
func DefaultConfig() Config {
	return Config{
		ServerURL:           "localhost:18000",
		NodeID:              "default",
		RetryInterval:       3 * time.Second,
		BackoffInitial:      10 * time.Second,
		BackoffMax:          60 * time.Second,
		BackoffRandomFactor: 0.5,
		Jitter:              true,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case strings.TrimSpace(c.ServerURL) == "":
		return errors.New("envoy xds config: ServerURL: required")
	case c.RetryInterval <= 0:
		return fmt.Errorf("envoy xds config: RetryInterval: %v: must be positive", c.RetryInterval)
	case c.BackoffInitial <= 0:
		return fmt.Errorf("envoy xds config: BackoffInitial: %v: must be positive", c.BackoffInitial)
	case c.BackoffMax < c.BackoffInitial:
		return fmt.Errorf("envoy xds config: BackoffMax: %v: must be at least BackoffInitial (%v)", c.BackoffMax, c.BackoffInitial)
	case math.IsNaN(c.BackoffRandomFactor) || c.BackoffRandomFactor < 0 || c.BackoffRandomFactor > 1:
		return fmt.Errorf("envoy xds config: BackoffRandomFactor: %v: must be from 0 to 1", c.BackoffRandomFactor)
	case c.MaxMsgSize < 0:
		return fmt.Errorf("envoy xds config: MaxMsgSize: %d: must not be negative", c.MaxMsgSize)
	}
	for k, v := range c.Headers {
		if err := checkHeader(k, v); err != nil {
			return fmt.Errorf("envoy xds config: Headers: %w", err)
		}
	}
	return nil
}

// checkHeader applies gRPC's rules for metadata, which would otherwise
// fail every stream: a key of 0-9 a-z - _ . (any case; it is sent in lower
// case), not reserved (grpc-), and a value of printable ASCII unless the
// key ends in -bin.
func checkHeader(k, v string) error {
	lk := strings.ToLower(k)
	if lk == "" {
		return errors.New("empty key")
	}
	if strings.HasPrefix(lk, "grpc-") {
		return fmt.Errorf("%q: keys starting with grpc- are reserved", k)
	}
	for _, r := range lk {
		if !keyChar(r) {
			return fmt.Errorf("%q: a key holds only letters, digits, '-', '_' and '.'", k)
		}
	}
	if strings.HasSuffix(lk, "-bin") {
		return nil
	}
	for i := range len(v) {
		if v[i] < 0x20 || v[i] > 0x7e {
			return fmt.Errorf("%q: the value holds a byte that is not printable ASCII (0x%02x); binary values need a key ending in -bin", k, v[i])
		}
	}
	return nil
}

func keyChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
}
