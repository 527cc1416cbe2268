package main

import (
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/credentials"

	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/envoycompat"
	"github.com/allot-dev/allot/internal/membership"
	"github.com/allot-dev/allot/internal/tlsconfig"
	"github.com/allot-dev/allot/policy/envoyconf"
	"github.com/allot-dev/allot/regional"
)

func init() { register(newRegionalCmd) }

type regionalOpts struct {
	region            string
	pod               string
	redis             string
	redisCluster      bool
	redisUser         string
	redisPasswordFile string
	redisPool         int
	etcd              string
	prefix            string
	grpcListen        string
	httpListen        string
	storeTimeout      time.Duration
	settleTTL         time.Duration
	reportInterval    time.Duration
	breakerFailures   uint32
	breakerOpen       time.Duration
	drift             time.Duration
	headerPrefix      string
	logLevel          string
	gossipListen      string
	gossipAdvertise   string
	gossipJoin        string
	gossipKeyFile     string
	gossipProbe       time.Duration
	gossipRejoin      time.Duration
	serverTLS         tlsconfig.Server
	ops               opsConfig
	redisTLS          tlsconfig.Client
	etcdTLS           tlsconfig.Client
	etcdAuth          etcdAuth
	coordTLS          tlsconfig.Client
	reportToken       string // --report-token-file
	envoyConfig       string // --envoy-config
	envoyGlobal       string // --envoy-global
	// changed reports whether a flag was given (on the command line or in
	// the environment).
	changed func(flag string) bool
}

func newRegionalCmd(s *streams) *cobra.Command {
	o := regionalOpts{}
	def := regional.DefaultConfig()
	c := &cobra.Command{
		Use:   "regional --region NAME --redis ADDR --etcd ENDPOINTS --grpc-listen ADDR --http-listen ADDR",
		Short: "Run a regional limiter pod: decisions from the region's Redis with the region's grants",
		Long: `Run one limiter pod of a region. It answers decide(descriptors, cost) from the
region's Redis (one Lua call per decision) with the region's share of each
tenant's budget, mirrored from etcd; it reports traffic to the coordinator
leader, whose answers keep its lease valid. When Redis is slow or down each
limit fails open (local fallback) or closed, as the policy says.

Reports carry the region token of --report-token-file (the coordinators'
own --report-token-file), or a client certificate (--coordinator-tls-cert)
when the coordinators verify them. Without --coordinator-tls-* the token
travels in plaintext: fine on loopback or a trusted network.

gRPC: allot.v1.Limiter, envoy.service.ratelimit.v3.RateLimitService, health,
reflection. HTTP: POST /v1/decide, GET /v1/forward-auth, /metrics, /healthz,
/readyz (ready once the policy is loaded and the grants synced). With
--ops-listen, /metrics, /healthz and /readyz are also served in plaintext
there, for probes and scrapers under mutual TLS (and /debug/pprof/ with
--pprof).`,
		Example: `  allot regional --region us-east --redis 127.0.0.1:6379 --etcd http://127.0.0.1:2379 \
    --grpc-listen :8081 --http-listen :8080 --report-token-file /etc/allot/report-token
  allot regional --region eu-west --redis redis-0:6379,redis-1:6379,redis-2:6379 --redis-cluster \
    --etcd http://etcd:2379 --grpc-listen 0.0.0.0:8081 --http-listen 0.0.0.0:8080 --store-timeout 3ms`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.changed = cmd.Flags().Changed
			return runRegional(cmd.Context(), s, o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.region, "region", "", "this pod's region, one of the policy's regions (required)")
	f.StringVar(&o.pod, "pod", "", "pod name in reports (default: the hostname)")
	f.StringVar(&o.redis, "redis", "", "Redis address(es), comma-separated (required)")
	f.BoolVar(&o.redisCluster, "redis-cluster", false, "the Redis addresses are Redis Cluster seeds")
	f.StringVar(&o.redisUser, "redis-username", "", "Redis ACL user")
	f.StringVar(&o.redisPasswordFile, "redis-password-file", "", "file holding the Redis password")
	f.IntVar(&o.redisPool, "redis-pool-size", 0, "Redis connections per node (default: go-redis's, 10 per CPU)")
	f.StringVar(&o.etcd, "etcd", "", "etcd endpoints, comma-separated (required)")
	f.StringVar(&o.prefix, "etcd-prefix", "/allot/v1/", "key prefix of allot's state in etcd")
	f.StringVar(&o.grpcListen, "grpc-listen", "127.0.0.1:8081", "gRPC listen address")
	f.StringVar(&o.httpListen, "http-listen", "127.0.0.1:8080", "HTTP listen address")
	f.DurationVar(&o.storeTimeout, "store-timeout", def.StoreTimeout, "timeout of one Redis call; past it the limit's on_failure decides")
	f.DurationVar(&o.settleTTL, "settle-ttl", def.SettleTTL, "how long a reserved decision can be settled with its actual cost (POST /v1/settle, Limiter.Settle), 1s to 24h")
	f.DurationVar(&o.reportInterval, "report-interval", def.ReportInterval, "how often to report traffic to the coordinator")
	f.Uint32Var(&o.breakerFailures, "breaker-failures", def.BreakerFailures, "consecutive Redis failures that open the circuit breaker")
	f.DurationVar(&o.breakerOpen, "breaker-open", def.BreakerOpen, "how long the breaker stays open before probing Redis again")
	f.DurationVar(&o.drift, "lease-drift", def.Drift, "margin subtracted from every lease for clock-rate differences with the leader")
	f.StringVar(&o.headerPrefix, "header-prefix", regional.DefaultHeaderPrefix, "forward-auth reads descriptors from headers with this prefix")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	mdef := membership.DefaultConfig()
	f.StringVar(&o.gossipListen, "gossip-listen", "", "memberlist address among this region's pods, e.g. 0.0.0.0:7946 (default: off, the pod counts itself alone)")
	f.StringVar(&o.gossipAdvertise, "gossip-advertise", "", "IP or IP:port other pods reach this one at (default: --gossip-listen, or this host's first private IP)")
	f.StringVar(&o.gossipJoin, "gossip-join", "", "seeds: other pods of the region, comma-separated (a headless service name is fine)")
	f.StringVar(&o.gossipKeyFile, "gossip-key-file", "", "file holding a base64 key of 16, 24 or 32 bytes that encrypts gossip (same on every pod of the region)")
	f.DurationVar(&o.gossipProbe, "gossip-probe-interval", mdef.ProbeInterval, "pause between probes of random pods (a dead pod is noticed after a few)")
	f.DurationVar(&o.gossipRejoin, "gossip-rejoin-interval", mdef.RejoinInterval, "how often to join the seeds again, healing splits (0: never)")
	serverTLSFlags(f, &o.serverTLS)
	opsFlags(f, &o.ops)
	clientTLSFlags(f, &o.redisTLS, "redis-tls", "Redis")
	clientTLSFlags(f, &o.etcdTLS, "etcd-tls", "etcd")
	etcdAuthFlags(f, &o.etcdAuth)
	clientTLSFlags(f, &o.coordTLS, "coordinator-tls", "the coordinator")
	f.StringVar(&o.reportToken, "report-token-file", "", "file holding the region token sent with every report (the coordinators' --report-token-file)")
	f.StringVar(&o.envoyConfig, "envoy-config", "", "directory of envoyproxy/ratelimit configuration files (every file under it; checked for changes every second): RLS requests for their domains are answered from them, others from the policy")
	f.StringVar(&o.envoyGlobal, "envoy-global", "", "file naming limits of --envoy-config that spend an allot tenant's global budget (see allot envoy-ratelimit's ALLOT_GLOBAL_LIMITS)")
	return c
}

func runRegional(ctx context.Context, s *streams, o regionalOpts) error {
	log, err := newLogger(s, o.logLevel)
	if err != nil {
		return err
	}
	if o.region == "" {
		return usagef("--region is required, e.g. --region us-east")
	}
	if err := o.ops.validate(); err != nil {
		return err
	}
	if err := o.validateGossip(); err != nil {
		return err
	}
	if err := o.serverTLS.Validate(); err != nil {
		return usageError{err}
	}
	addrs := splitList(o.redis)
	if len(addrs) == 0 {
		return usagef("--redis is required, e.g. --redis 127.0.0.1:6379")
	}
	if o.pod == "" {
		o.pod, _ = os.Hostname()
	}
	ropts := &redis.UniversalOptions{
		Addrs: addrs, IsClusterMode: o.redisCluster, ContextTimeoutEnabled: true,
		Username: o.redisUser, PoolSize: o.redisPool,
		// Fail fast: the decide path has its own few-ms timeout.
		DialTimeout: time.Second, MaxRetries: -1,
	}
	if o.redisPasswordFile != "" {
		b, err := os.ReadFile(o.redisPasswordFile)
		if err != nil {
			return usagef("--redis-password-file: %v", err)
		}
		ropts.Password = strings.TrimSpace(string(b))
	}
	if o.redisTLS.Enabled() {
		if err := o.redisTLS.Validate(); err != nil {
			return usageError{err}
		}
		if err := o.redisTLS.ApplyRedis(ropts); err != nil {
			return err
		}
	}
	var reportToken string
	if o.reportToken != "" {
		if reportToken, err = readToken("report-token-file", o.reportToken); err != nil {
			return err
		}
	}
	var coordCreds credentials.TransportCredentials
	if o.coordTLS.Enabled() {
		if err := o.coordTLS.Validate(); err != nil {
			return usageError{err}
		}
		if coordCreds, err = o.coordTLS.TransportCredentials(); err != nil {
			return err
		}
	}
	rc := redis.NewUniversalClient(ropts)
	defer rc.Close()
	store, err := redisstore.New(rc)
	if err != nil {
		return err
	}
	etcd, err := newEtcdClient(o.etcd, o.etcdTLS, o.etcdAuth)
	if err != nil {
		return err
	}
	defer etcd.Close()

	reg := prometheus.NewRegistry()
	var members *membership.Membership
	if o.gossipListen != "" {
		mc := membership.DefaultConfig()
		mc.Region, mc.BindAddr, mc.AdvertiseAddr, mc.Join = o.region, o.gossipListen, o.gossipAdvertise, splitList(o.gossipJoin)
		mc.ProbeInterval, mc.RejoinInterval = o.gossipProbe, o.gossipRejoin
		// The probe timeout has no flag: keep it below a short probe
		// interval, as memberlist's presets do (half of it).
		mc.ProbeTimeout = min(mc.ProbeTimeout, o.gossipProbe/2)
		if o.pod != "" {
			mc.NodeName = o.pod
		}
		if o.gossipKeyFile != "" {
			b, err := os.ReadFile(o.gossipKeyFile)
			if err != nil {
				return usagef("--gossip-key-file: %v", err)
			}
			if mc.SecretKey, err = base64.StdEncoding.DecodeString(strings.TrimSpace(string(b))); err != nil {
				return usagef("--gossip-key-file: not base64: %v", err)
			}
		}
		mc.Logger, mc.Registerer = log, reg
		if members, err = membership.New(mc); err != nil {
			return usageError{err}
		}
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := regional.DefaultConfig()
	cfg.Region, cfg.Pod, cfg.Store, cfg.Etcd, cfg.Prefix = o.region, o.pod, store, etcd, o.prefix
	cfg.StoreTimeout, cfg.ReportInterval = o.storeTimeout, o.reportInterval
	cfg.SettleTTL = o.settleTTL
	cfg.BreakerFailures, cfg.BreakerOpen, cfg.Drift = o.breakerFailures, o.breakerOpen, o.drift
	cfg.Logger, cfg.Registerer = log, reg
	cfg.CoordinatorCreds, cfg.ReportToken = coordCreds, reportToken
	if members != nil {
		cfg.LivePods = members.LivePods
	}
	svc, err := regional.New(cfg)
	if err != nil {
		return usageError{err}
	}
	srv, err := listenServers(o.grpcListen, o.httpListen, o.serverTLS, o.ops)
	if err != nil {
		return err
	}
	svc.RegisterGRPC(srv.GRPC)
	ga, ha := srv.Addrs()
	log.Info("regional starting", "region", o.region, "pod", o.pod, "grpc", ga, "http", ha,
		"redis", addrs, "redis_cluster", o.redisCluster, "etcd", o.etcd)
	if reportToken == "" && o.coordTLS.CertFile == "" {
		log.Warn("reports carry no credentials (no --report-token-file, no --coordinator-tls-cert): " +
			"only a coordinator started with --insecure-reports takes them; others refuse them and this pod stays on its floors")
	}
	components := []func(context.Context) error{svc.Run}
	if o.envoyConfig != "" {
		watch, err := envoyConfigWatch(svc, o.envoyConfig, o.envoyGlobal, log)
		if err != nil {
			return err
		}
		components = append(components, watch)
	} else if o.envoyGlobal != "" {
		return usagef("--envoy-global needs --envoy-config: it names limits of that configuration")
	}
	if members != nil {
		components = append(components, members.Run)
	}
	err = srv.run(ctx, svc.Handler(reg, o.headerPrefix), svc.Ready, components...)
	log.Info("regional stopped")
	return err
}

// envoyConfigWatch loads dir's envoyproxy/ratelimit configuration (with the
// global limits file, if any) into svc now, failing on a broken one, and
// returns the component that reloads it on change.
func envoyConfigWatch(svc *regional.Service, dir, globalFile string, log *slog.Logger) (func(context.Context) error, error) {
	var opts regional.EnvoyOptions
	if globalFile != "" {
		b, err := os.ReadFile(globalFile)
		if err != nil {
			return nil, usagef("--envoy-global: %v", err)
		}
		if opts.Global, err = envoycompat.ParseGlobal(globalFile, b); err != nil {
			return nil, usagef("--envoy-global: %v", err)
		}
	}
	rt := envoycompat.Runtime{Root: dir}
	cfg, _, err := rt.Load()
	if err == nil {
		err = svc.SetEnvoyConfig(cfg, opts)
	}
	if err != nil {
		return nil, usagef("--envoy-config %s: %v", dir, err)
	}
	apply := func(c *envoyconf.Config) error { return svc.SetEnvoyConfig(c, opts) }
	return func(ctx context.Context) error { return rt.Watch(ctx, time.Second, log, apply, nil, nil) }, nil
}

// validateGossip refuses gossip settings without --gossip-listen, which
// would otherwise be ignored in silence (a --gossip-key-file that encrypts
// nothing, seeds nobody joins).
func (o regionalOpts) validateGossip() error {
	if o.gossipListen != "" {
		return nil
	}
	for _, f := range []string{"gossip-join", "gossip-advertise", "gossip-key-file", "gossip-probe-interval", "gossip-rejoin-interval"} {
		if o.changed != nil && o.changed(f) {
			return usagef("--%s needs --gossip-listen (without it gossip is off and the pod counts itself alone)", f)
		}
	}
	return nil
}
