package envoycompat

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Settings are envoyproxy/ratelimit's environment settings, as allot
// envoy-ratelimit reads them. Field comments name the variable; defaults
// are the original's.
type Settings struct {
	Host string // HOST (0.0.0.0): the HTTP listener (/healthcheck, /json)
	Port int    // PORT (8080)

	DebugHost string // DEBUG_HOST (0.0.0.0): /rlconfig, /debug/pprof
	DebugPort int    // DEBUG_PORT (6070)

	GRPCHost string // GRPC_HOST (0.0.0.0)
	GRPCPort int    // GRPC_PORT (8081)
	GRPCUDS  string // GRPC_UDS: a unix socket instead of GRPC_HOST:GRPC_PORT

	GRPCMaxConnectionAge      time.Duration // GRPC_MAX_CONNECTION_AGE (24h)
	GRPCMaxConnectionAgeGrace time.Duration // GRPC_MAX_CONNECTION_AGE_GRACE (1h)

	GRPCServerUseTLS    bool   // GRPC_SERVER_USE_TLS
	GRPCServerTLSCert   string // GRPC_SERVER_TLS_CERT
	GRPCServerTLSKey    string // GRPC_SERVER_TLS_KEY
	GRPCClientTLSCACert string // GRPC_CLIENT_TLS_CACERT (or GRPC_SERVER_TLS_CA_CERT): clients must present a certificate it signed
	GRPCClientTLSSAN    string // GRPC_CLIENT_TLS_SAN: a SAN the client certificate must carry

	LogLevel  string // LOG_LEVEL (WARN): debug, info, warn, error (trace, fatal, panic are read as debug and error)
	LogFormat string // LOG_FORMAT (text): text or json

	ConfigType string // CONFIG_TYPE (FILE): FILE or GRPC_XDS_SOTW
	// FORCE_START_WITHOUT_INITIAL_CONFIG: serve before a configuration
	// has loaded (RLS answers Unavailable until one has).
	ForceStart bool
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: /healthcheck fails until a
	// configuration has loaded.
	HealthyWithConfig bool
	MergeDomainConfig bool // MERGE_DOMAIN_CONFIG

	XDS XDSSettings

	RuntimeRoot         string // RUNTIME_ROOT (/srv/runtime_data/current)
	RuntimeSubdirectory string // RUNTIME_SUBDIRECTORY
	RuntimeAppDirectory string // RUNTIME_APPDIRECTORY (config)
	RuntimeIgnoreDot    bool   // RUNTIME_IGNOREDOTFILES
	RuntimeWatchRoot    bool   // RUNTIME_WATCH_ROOT (true)

	UsePrometheus  bool   // USE_PROMETHEUS
	PrometheusAddr string // PROMETHEUS_ADDR (:9090)
	PrometheusPath string // PROMETHEUS_PATH (/metrics)

	CacheKeyPrefix string // CACHE_KEY_PREFIX: prefixes every counter's key

	LimitHeaders    bool   // LIMIT_RESPONSE_HEADERS_ENABLED
	LimitHeader     string // LIMIT_LIMIT_HEADER (RateLimit-Limit)
	RemainingHeader string // LIMIT_REMAINING_HEADER (RateLimit-Remaining)
	ResetHeader     string // LIMIT_RESET_HEADER (RateLimit-Reset)

	ShadowMode bool // SHADOW_MODE
	QuotaMode  bool // QUOTA_MODE: every limit in quota mode

	BackendType string // BACKEND_TYPE (redis): only redis

	RedisSocketType  string        // REDIS_SOCKET_TYPE (unix): tcp or unix
	RedisType        string        // REDIS_TYPE (SINGLE): SINGLE, CLUSTER or SENTINEL
	RedisURL         string        // REDIS_URL (/var/run/nutcracker/ratelimit.sock)
	RedisPoolSize    int           // REDIS_POOL_SIZE (10)
	RedisAuth        string        // REDIS_AUTH: password, or user:password
	RedisSentinel    string        // REDIS_SENTINEL_AUTH: the sentinels' password
	RedisTLS         bool          // REDIS_TLS
	RedisTLSCert     string        // REDIS_TLS_CLIENT_CERT
	RedisTLSKey      string        // REDIS_TLS_CLIENT_KEY
	RedisTLSCACert   string        // REDIS_TLS_CACERT
	RedisTLSSkipHost bool          // REDIS_TLS_SKIP_HOSTNAME_VERIFICATION
	RedisTimeout     time.Duration // REDIS_TIMEOUT (10s): dialling; decisions have allot's own timeout

	// allot's own settings, beside the original's.

	// ALLOT_STORE_TIMEOUT (50ms): bounds one Redis call of a decision (allot
	// regional's 5ms is for pods sized for it; a drop-in lands on hosts
	// sized for the original, which waits up to REDIS_TIMEOUT);
	// past it the limit falls back (ALLOT_ON_FAILURE).
	StoreTimeout time.Duration
	// ALLOT_ON_FAILURE (open): while Redis is unavailable, open admits
	// through a local limiter at each limit's rate, closed denies.
	FailClosed bool
	// ALLOT_RUNTIME_POLL (1s): how often the runtime directory is checked
	// for changes.
	RuntimePoll time.Duration
	// ALLOT_CHARGE_OVER_LIMIT (false): hits that do not fit a limit are
	// charged anyway (as debt past the burst), as the original counts hits
	// past its limit, and hits_addend 0 (a check) answers OVER_LIMIT while
	// the key is past its limit: check-then-charge usage limits are then
	// bounded (regional.EnvoyOptions.ChargeOverLimit).
	ChargeOverLimit bool
	// ALLOT_REPLICAS (1): how many replicas serve the same Redis. While
	// Redis is unavailable and ALLOT_ON_FAILURE=open, each replica admits
	// a limit's rate divided by it, so that together they admit the
	// limit's rate.
	Replicas int
	// ALLOT_ETCD: etcd endpoints (comma separated) of an allot cluster to
	// join, for global limits: the pod then reports to the coordinator and
	// decides them with its region's grants.
	Etcd string
	// ALLOT_REGION (local): this deployment's region in that cluster's
	// policy.
	Region string
	// ALLOT_REPORT_TOKEN_FILE: the region token reports carry.
	ReportTokenFile string
	// ALLOT_GLOBAL_LIMITS: a file naming the configuration's limits that
	// spend a global budget (ParseGlobal); kept outside the runtime
	// directory, so the original service never reads it.
	GlobalLimits string
}

// XDSSettings configure the xDS configuration source (CONFIG_TYPE=GRPC_XDS_SOTW).
type XDSSettings struct {
	ServerURL           string            // CONFIG_GRPC_XDS_SERVER_URL (localhost:18000)
	NodeID              string            // CONFIG_GRPC_XDS_NODE_ID (default)
	NodeMetadata        map[string]string // CONFIG_GRPC_XDS_NODE_METADATA: k=v,k2=v2
	Headers             map[string]string // CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: k:v,k2:v2
	RetryInterval       time.Duration     // CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL (3s)
	UseTLS              bool              // CONFIG_GRPC_XDS_SERVER_USE_TLS
	ClientCert          string            // CONFIG_GRPC_XDS_CLIENT_TLS_CERT
	ClientKey           string            // CONFIG_GRPC_XDS_CLIENT_TLS_KEY
	ServerCACert        string            // CONFIG_GRPC_XDS_SERVER_TLS_CACERT
	ServerSAN           string            // CONFIG_GRPC_XDS_SERVER_TLS_SAN
	BackoffInitial      time.Duration     // XDS_CLIENT_BACKOFF_INITIAL_INTERVAL (10s)
	BackoffMax          time.Duration     // XDS_CLIENT_BACKOFF_MAX_INTERVAL (60s)
	BackoffRandomFactor float64           // XDS_CLIENT_BACKOFF_RANDOM_FACTOR (0.5)
	BackoffJitter       bool              // XDS_CLIENT_BACKOFF_JITTER (true)
	MaxMsgSize          int               // XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES (0: gRPC's default)
}

// Ignored is a setting that was set but means nothing to allot, with why.
type Ignored struct {
	Name, Value, Why string
}

// ignored are the original's settings allot accepts and does not use.
var ignored = map[string]string{
	"USE_STATSD":                              "allot serves Prometheus metrics (USE_PROMETHEUS, and /metrics on PORT), not statsd",
	"STATSD_HOST":                             "no statsd (see USE_STATSD)",
	"STATSD_PORT":                             "no statsd (see USE_STATSD)",
	"USE_DOG_STATSD":                          "no statsd (see USE_STATSD)",
	"USE_DOG_STATSD_MOGRIFIERS":               "no statsd (see USE_STATSD)",
	"EXTRA_TAGS":                              "statsd tags; Prometheus labels come from the scraper",
	"STATS_FLUSH_INTERVAL":                    "Prometheus is scraped, not flushed",
	"DISABLE_STATS":                           "metrics are cheap counters; do not scrape them to ignore them",
	"PROMETHEUS_MAPPER_YAML":                  "allot names its metrics itself",
	"EXPIRATION_JITTER_MAX_SECONDS":           "GCRA keys expire when their limit is fully rested, not at window ends",
	"LOCAL_CACHE_SIZE_IN_BYTES":               "no over-limit cache is needed: a denied request costs one Redis call and nothing else",
	"NEAR_LIMIT_RATIO":                        "no near-limit statistics",
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "always so here: a denied request is never counted (unless ALLOT_CHARGE_OVER_LIMIT=true, which counts it as the original does without this setting)",
	"REDIS_PIPELINE_WINDOW":                   "allot pipelines concurrent decisions itself, without a timer",
	"REDIS_PIPELINE_LIMIT":                    "allot pipelines concurrent decisions itself",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION":    "Redis failures open a circuit breaker; /healthcheck stays up and limits fall back (ALLOT_ON_FAILURE)",
	"REDIS_POOL_ON_EMPTY_BEHAVIOR":            "the pool waits, bounded by ALLOT_STORE_TIMEOUT",
	"REDIS_PERSECOND":                         "one Redis serves every unit",
	"REDIS_PERSECOND_SOCKET_TYPE":             "one Redis serves every unit (REDIS_PERSECOND)",
	"REDIS_PERSECOND_TYPE":                    "one Redis serves every unit (REDIS_PERSECOND)",
	"REDIS_PERSECOND_URL":                     "one Redis serves every unit (REDIS_PERSECOND)",
	"REDIS_PERSECOND_POOL_SIZE":               "one Redis serves every unit (REDIS_PERSECOND)",
	"REDIS_PERSECOND_AUTH":                    "one Redis serves every unit (REDIS_PERSECOND)",
	"REDIS_PERSECOND_TLS":                     "one Redis serves every unit (REDIS_PERSECOND)",
	"REDIS_PERSECOND_SENTINEL_AUTH":           "one Redis serves every unit (REDIS_PERSECOND)",
	"REDIS_PERSECOND_PIPELINE_WINDOW":         "one Redis serves every unit (REDIS_PERSECOND)",
	"REDIS_PERSECOND_PIPELINE_LIMIT":          "one Redis serves every unit (REDIS_PERSECOND)",
	"REDIS_PERSECOND_TIMEOUT":                 "one Redis serves every unit (REDIS_PERSECOND)",
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR":  "one Redis serves every unit (REDIS_PERSECOND)",
	"RESPONSE_DYNAMIC_METADATA":               "answers carry no dynamic metadata",
	"TRACING_ENABLED":                         "no tracing",
	"TRACING_SERVICE_NAME":                    "no tracing",
	"TRACING_SERVICE_NAMESPACE":               "no tracing",
	"TRACING_SERVICE_INSTANCE_ID":             "no tracing",
	"TRACING_EXPORTER_PROTOCOL":               "no tracing",
	"TRACING_SAMPLING_RATE":                   "no tracing",
	"MEMCACHE_HOST_PORT":                      "only Redis (BACKEND_TYPE=redis)",
	"MEMCACHE_MAX_IDLE_CONNS":                 "only Redis (BACKEND_TYPE=redis)",
	"MEMCACHE_SRV":                            "only Redis (BACKEND_TYPE=redis)",
	"MEMCACHE_SRV_REFRESH":                    "only Redis (BACKEND_TYPE=redis)",
	"MEMCACHE_TLS":                            "only Redis (BACKEND_TYPE=redis)",
	"MEMCACHE_TLS_CLIENT_CERT":                "only Redis (BACKEND_TYPE=redis)",
	"MEMCACHE_TLS_CLIENT_KEY":                 "only Redis (BACKEND_TYPE=redis)",
	"MEMCACHE_TLS_CACERT":                     "only Redis (BACKEND_TYPE=redis)",
	"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION": "only Redis (BACKEND_TYPE=redis)",
}

// IgnoredNames returns the settings allot accepts and does not use, sorted.
func IgnoredNames() []string { return slices.Sorted(maps.Keys(ignored)) }

// ErrSetting is wrapped by every error about a setting's value.
var ErrSetting = errors.New("bad setting")

// reader reads settings from an environment, remembering the first error.
type reader struct {
	env func(string) (string, bool)
	err error
}

func (r *reader) fail(name, value, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s=%q: %s", ErrSetting, name, value, fmt.Sprintf(format, args...))
	}
}

func (r *reader) str(name, def string) string {
	if v, ok := r.env(name); ok {
		return v
	}
	return def
}

func (r *reader) boolean(name string, def bool) bool {
	v, ok := r.env(name)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, v, "want true or false")
	}
	return b
}

func (r *reader) integer(name string, def, least int) int {
	v, ok := r.env(name)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		r.fail(name, v, "want a whole number ≥ %d", least)
	}
	return n
}

func (r *reader) port(name string, def int) int {
	n := r.integer(name, def, 0)
	if n > 65535 {
		r.fail(name, strconv.Itoa(n), "want a port, 0 to 65535")
	}
	return n
}

func (r *reader) duration(name string, def time.Duration) time.Duration {
	v, ok := r.env(name)
	if !ok || v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		r.fail(name, v, "want a duration such as 500ms, 10s or 1h")
	}
	return d
}

func (r *reader) float(name string, def float64) float64 {
	v, ok := r.env(name)
	if !ok || v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 {
		r.fail(name, v, "want a number ≥ 0")
	}
	return f
}

// choice reads one of want (any case), returned in want's spelling.
func (r *reader) choice(name, def string, want ...string) string {
	v := r.str(name, def)
	for _, w := range want {
		if strings.EqualFold(v, w) {
			return w
		}
	}
	r.fail(name, v, "want one of %s", strings.Join(want, ", "))
	return def
}

// pairs reads k=v,k2=v2 (sep '='), or k:v,k2:v2 (sep ':').
func (r *reader) pairs(name string, sep string) map[string]string {
	v, ok := r.env(name)
	if !ok || strings.TrimSpace(v) == "" {
		return nil
	}
	out := map[string]string{}
	for _, p := range strings.Split(v, ",") {
		k, val, found := strings.Cut(strings.TrimSpace(p), sep)
		if !found || k == "" {
			r.fail(name, v, "want key%svalue pairs separated by commas", sep)
			return nil
		}
		out[k] = val
	}
	return out
}

// FromEnv reads the settings from env (os.LookupEnv in the command). It
// returns the settings that were set but mean nothing to allot, for the
// caller to log once each, and the first setting whose value is invalid,
// named in the error.
func FromEnv(env func(string) (string, bool)) (Settings, []Ignored, error) {
	r := &reader{env: env}
	s := Settings{
		Host:      r.str("HOST", "0.0.0.0"),
		Port:      r.port("PORT", 8080),
		DebugHost: r.str("DEBUG_HOST", "0.0.0.0"),
		DebugPort: r.port("DEBUG_PORT", 6070),
		GRPCHost:  r.str("GRPC_HOST", "0.0.0.0"),
		GRPCPort:  r.port("GRPC_PORT", 8081),
		GRPCUDS:   r.str("GRPC_UDS", ""),

		GRPCMaxConnectionAge:      r.duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour),
		GRPCMaxConnectionAgeGrace: r.duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour),
		GRPCServerUseTLS:          r.boolean("GRPC_SERVER_USE_TLS", false),
		GRPCServerTLSCert:         r.str("GRPC_SERVER_TLS_CERT", ""),
		GRPCServerTLSKey:          r.str("GRPC_SERVER_TLS_KEY", ""),
		GRPCClientTLSCACert:       r.str("GRPC_CLIENT_TLS_CACERT", r.str("GRPC_SERVER_TLS_CA_CERT", "")),
		GRPCClientTLSSAN:          r.str("GRPC_CLIENT_TLS_SAN", ""),

		LogLevel:  r.choice("LOG_LEVEL", "WARN", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "PANIC"),
		LogFormat: r.choice("LOG_FORMAT", "text", "text", "json"),

		ConfigType:        r.choice("CONFIG_TYPE", "FILE", "FILE", "GRPC_XDS_SOTW"),
		ForceStart:        r.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false),
		HealthyWithConfig: r.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false),
		MergeDomainConfig: r.boolean("MERGE_DOMAIN_CONFIG", false),

		XDS: XDSSettings{
			ServerURL:           r.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
			NodeID:              r.str("CONFIG_GRPC_XDS_NODE_ID", "default"),
			NodeMetadata:        r.pairs("CONFIG_GRPC_XDS_NODE_METADATA", "="),
			Headers:             r.pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ":"),
			RetryInterval:       r.duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", 3*time.Second),
			UseTLS:              r.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false),
			ClientCert:          r.str("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", ""),
			ClientKey:           r.str("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", ""),
			ServerCACert:        r.str("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ""),
			ServerSAN:           r.str("CONFIG_GRPC_XDS_SERVER_TLS_SAN", ""),
			BackoffInitial:      r.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 10*time.Second),
			BackoffMax:          r.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", 60*time.Second),
			BackoffRandomFactor: r.float("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", 0.5),
			BackoffJitter:       r.boolean("XDS_CLIENT_BACKOFF_JITTER", true),
			MaxMsgSize:          r.integer("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0, 0),
		},

		RuntimeRoot:         r.str("RUNTIME_ROOT", "/srv/runtime_data/current"),
		RuntimeSubdirectory: r.str("RUNTIME_SUBDIRECTORY", ""),
		RuntimeAppDirectory: r.str("RUNTIME_APPDIRECTORY", "config"),
		RuntimeIgnoreDot:    r.boolean("RUNTIME_IGNOREDOTFILES", false),
		RuntimeWatchRoot:    r.boolean("RUNTIME_WATCH_ROOT", true),

		UsePrometheus:  r.boolean("USE_PROMETHEUS", false),
		PrometheusAddr: r.str("PROMETHEUS_ADDR", ":9090"),
		PrometheusPath: r.str("PROMETHEUS_PATH", "/metrics"),

		CacheKeyPrefix: r.str("CACHE_KEY_PREFIX", ""),

		LimitHeaders:    r.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false),
		LimitHeader:     r.str("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
		RemainingHeader: r.str("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
		ResetHeader:     r.str("LIMIT_RESET_HEADER", "RateLimit-Reset"),

		ShadowMode: r.boolean("SHADOW_MODE", false),
		QuotaMode:  r.boolean("QUOTA_MODE", false),

		BackendType: r.choice("BACKEND_TYPE", "redis", "redis", "memcache"),

		RedisSocketType:  r.choice("REDIS_SOCKET_TYPE", "unix", "tcp", "unix"),
		RedisType:        r.choice("REDIS_TYPE", "SINGLE", "SINGLE", "CLUSTER", "SENTINEL"),
		RedisURL:         r.str("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"),
		RedisPoolSize:    r.integer("REDIS_POOL_SIZE", 10, 1),
		RedisAuth:        r.str("REDIS_AUTH", ""),
		RedisSentinel:    r.str("REDIS_SENTINEL_AUTH", ""),
		RedisTLS:         r.boolean("REDIS_TLS", false),
		RedisTLSCert:     r.str("REDIS_TLS_CLIENT_CERT", ""),
		RedisTLSKey:      r.str("REDIS_TLS_CLIENT_KEY", ""),
		RedisTLSCACert:   r.str("REDIS_TLS_CACERT", ""),
		RedisTLSSkipHost: r.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false),
		RedisTimeout:     r.duration("REDIS_TIMEOUT", 10*time.Second),

		StoreTimeout: r.duration("ALLOT_STORE_TIMEOUT", 50*time.Millisecond),
		FailClosed:   r.choice("ALLOT_ON_FAILURE", "open", "open", "closed") == "closed",
		RuntimePoll:  r.duration("ALLOT_RUNTIME_POLL", time.Second),
		Replicas:     r.integer("ALLOT_REPLICAS", 1, 1),

		ChargeOverLimit: r.boolean("ALLOT_CHARGE_OVER_LIMIT", false),

		Etcd:            r.str("ALLOT_ETCD", ""),
		Region:          r.str("ALLOT_REGION", "local"),
		ReportTokenFile: r.str("ALLOT_REPORT_TOKEN_FILE", ""),
		GlobalLimits:    r.str("ALLOT_GLOBAL_LIMITS", ""),
	}
	if r.err != nil {
		return Settings{}, nil, r.err
	}
	if err := s.Validate(); err != nil {
		return Settings{}, nil, err
	}
	var ign []Ignored
	for _, name := range IgnoredNames() {
		if v, ok := env(name); ok {
			ign = append(ign, Ignored{Name: name, Value: v, Why: ignored[name]})
		}
	}
	return s, ign, nil
}

// Validate reports the first setting that cannot work, by name.
func (s Settings) Validate() error {
	bad := func(name, value, format string, args ...any) error {
		return fmt.Errorf("%w: %s=%q: %s", ErrSetting, name, value, fmt.Sprintf(format, args...))
	}
	switch {
	case s.BackendType != "redis":
		return bad("BACKEND_TYPE", s.BackendType, "allot keeps its counters in Redis only; set BACKEND_TYPE=redis (or leave it unset)")
	case strings.TrimSpace(s.RedisURL) == "":
		return bad("REDIS_URL", s.RedisURL, "want host:port (REDIS_SOCKET_TYPE=tcp) or a socket path (unix)")
	case s.RedisType == "SENTINEL" && len(strings.Split(s.RedisURL, ",")) < 2:
		return bad("REDIS_URL", s.RedisURL, "with REDIS_TYPE=SENTINEL want master-name,host:port[,host:port...]")
	case s.RedisType == "SENTINEL" && s.RedisSocketType != "tcp":
		return bad("REDIS_SOCKET_TYPE", s.RedisSocketType, "sentinels are reached over tcp")
	case s.RedisType == "CLUSTER" && s.RedisSocketType != "tcp":
		return bad("REDIS_SOCKET_TYPE", s.RedisSocketType, "a Redis Cluster is reached over tcp")
	case s.GRPCServerUseTLS && (s.GRPCServerTLSCert == "" || s.GRPCServerTLSKey == ""):
		return bad("GRPC_SERVER_USE_TLS", "true", "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	case (s.RedisTLSCert == "") != (s.RedisTLSKey == ""):
		return bad("REDIS_TLS_CLIENT_CERT", s.RedisTLSCert, "set both REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY, or neither")
	case s.XDS.UseTLS && s.XDS.ClientCert != "" && s.XDS.ClientKey == "":
		return bad("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", s.XDS.ClientCert, "needs CONFIG_GRPC_XDS_CLIENT_TLS_KEY, its private key (set both, or neither)")
	case s.XDS.UseTLS && s.XDS.ClientKey != "" && s.XDS.ClientCert == "":
		return bad("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", s.XDS.ClientKey, "needs CONFIG_GRPC_XDS_CLIENT_TLS_CERT, the certificate of that key (set both, or neither)")
	case s.StoreTimeout <= 0:
		return bad("ALLOT_STORE_TIMEOUT", s.StoreTimeout.String(), "want a positive duration, e.g. 50ms")
	case s.RuntimePoll <= 0:
		return bad("ALLOT_RUNTIME_POLL", s.RuntimePoll.String(), "want a positive duration, e.g. 1s")
	case s.GlobalLimits != "" && s.Etcd == "":
		return bad("ALLOT_GLOBAL_LIMITS", s.GlobalLimits, "global limits need ALLOT_ETCD: the coordinator of that cluster shares their budgets")
	case s.Region == "":
		return bad("ALLOT_REGION", s.Region, "want the region's name in the allot policy")
	case s.ConfigType == "FILE" && s.RuntimeRoot == "":
		return bad("RUNTIME_ROOT", s.RuntimeRoot, "want the directory the configuration files are under")
	}
	for _, h := range []struct{ name, v string }{{"LIMIT_LIMIT_HEADER", s.LimitHeader}, {"LIMIT_REMAINING_HEADER", s.RemainingHeader}, {"LIMIT_RESET_HEADER", s.ResetHeader}} {
		if s.LimitHeaders && !validHeaderName(h.v) {
			return bad(h.name, h.v, "want an HTTP header name (letters, digits and -)")
		}
	}
	return nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		ok := c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !ok {
			return false
		}
	}
	return true
}
