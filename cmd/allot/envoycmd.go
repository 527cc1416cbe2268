package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/envoycompat"
	"github.com/allot-dev/allot/internal/envoyxds"
	"github.com/allot-dev/allot/internal/serve"
	"github.com/allot-dev/allot/internal/tlsconfig"
	"github.com/allot-dev/allot/policy/envoyconf"
	"github.com/allot-dev/allot/regional"
)

func init() { register(newEnvoyCmd) }

// envoyBinary is the name the original service's image runs it by; allot
// invoked by that name runs envoy-ratelimit.
const envoyBinary = "ratelimit"

func newEnvoyCmd(s *streams) *cobra.Command {
	var check bool
	c := &cobra.Command{
		Use:   "envoy-ratelimit",
		Short: "Run as envoyproxy/ratelimit: its settings, configuration files or xDS, ports and endpoints",
		Long: `Run in place of Envoy's reference rate limit service (envoyproxy/ratelimit).
It reads the same environment settings, loads the same YAML configuration
from the same directory (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY,
RUNTIME_APPDIRECTORY, RUNTIME_WATCH_ROOT, RUNTIME_IGNOREDOTFILES; reloaded on
change, the last good one kept) or from an xDS server (CONFIG_TYPE=
GRPC_XDS_SOTW), and answers on the same ports: gRPC RateLimitService and
health on GRPC_PORT (8081), /healthcheck and /json on PORT (8080), /rlconfig
and /debug/pprof on DEBUG_PORT (6070), Prometheus on PROMETHEUS_ADDR (:9090)
with USE_PROMETHEUS=true, with the original's metric names beside allot's.

Each limit is enforced by GCRA in Redis instead of a fixed window: N per
unit admits N at once and one more every unit/N, so no window boundary lets
twice the limit through, and a denied request costs nothing.

Settings that have no meaning here (statsd, local caches, per-second Redis)
are accepted and logged once each. allot's own: ALLOT_STORE_TIMEOUT (50ms,
one Redis call of a decision), ALLOT_ON_FAILURE (open: a local limiter
while Redis is down; closed: deny), ALLOT_RUNTIME_POLL (1s),
ALLOT_CHARGE_OVER_LIMIT (false; true: hits past a limit are charged anyway,
up to a window past it, as the original counts them, and hits_addend 0
checks the key, which bounds
check-then-charge limits such as Envoy Gateway's cost-based ones).

To share a limit's budget across regions, join an allot cluster (ALLOT_ETCD,
ALLOT_REGION, ALLOT_REPORT_TOKEN_FILE) and name the limit in ALLOT_GLOBAL_LIMITS,
a file of allot's own (docs/envoy-ratelimit.md, "One limit across regions"). A
limit counted per value (per client address, per user) is shared value by value
under the tenant's global limit per key (allot's policy: scope: global).

Invoked as 'ratelimit' (the original's /bin/ratelimit), allot runs this
command, so an image swap is the whole migration.`,
		Example: `  REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:6379 RUNTIME_ROOT=./rl RUNTIME_SUBDIRECTORY=ratelimit allot envoy-ratelimit
  RUNTIME_ROOT=./rl RUNTIME_SUBDIRECTORY=ratelimit allot envoy-ratelimit --check   # validate, print the limits, exit
  CONFIG_TYPE=GRPC_XDS_SOTW CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001 CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit REDIS_SOCKET_TYPE=tcp REDIS_URL=redis:6379 allot envoy-ratelimit`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEnvoy(cmd.Context(), s, os.LookupEnv, check, nil)
		},
	}
	c.Flags().BoolVar(&check, "check", false, "read the settings and the configuration files, print the limits, and exit (1 when they do not load)")
	return c
}

// envoyLogger maps LOG_LEVEL and LOG_FORMAT.
func envoyLogger(w *streams, st envoycompat.Settings) *slog.Logger {
	level := map[string]slog.Level{
		"TRACE": slog.LevelDebug, "DEBUG": slog.LevelDebug, "INFO": slog.LevelInfo, "WARN": slog.LevelWarn,
		"ERROR": slog.LevelError, "FATAL": slog.LevelError, "PANIC": slog.LevelError,
	}[st.LogLevel]
	opts := &slog.HandlerOptions{Level: level}
	if st.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w.err, opts))
	}
	return slog.New(slog.NewTextHandler(w.err, opts))
}

// runEnvoy runs the command with the settings env holds; listening, when
// set, learns the listeners' addresses (tests use port 0).
func runEnvoy(ctx context.Context, s *streams, env func(string) (string, bool), check bool, listening func(*envoyListeners)) error {
	st, ignored, err := envoycompat.FromEnv(env)
	if err != nil {
		return usageError{err}
	}
	log := envoyLogger(s, st)
	for _, ig := range ignored {
		log.Info("setting accepted, no effect here", "setting", ig.Name, "value", ig.Value, "why", ig.Why)
	}
	rt := envoycompat.RuntimeOf(st)
	if check {
		return envoyCheck(s, st, rt)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var sub *envoyxds.Subscriber
	if st.ConfigType == "GRPC_XDS_SOTW" {
		// Before anything starts: bad TLS files stop the command here.
		if sub, err = envoySubscriber(st, log, reg); err != nil {
			return err
		}
	}
	rc, err := envoyRedis(st)
	if err != nil {
		return err
	}
	defer rc.Close()
	store, err := redisstore.New(rc)
	if err != nil {
		return err
	}
	loadOK := prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_success", Help: "Configurations loaded and applied."})
	loadErr := prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_error", Help: "Configurations rejected (the last good one stays)."})
	reg.MustRegister(loadOK, loadErr)

	cfg := regional.DefaultConfig()
	cfg.Region, cfg.Pod, cfg.Store, cfg.StoreTimeout = st.Region, hostname(), store, st.StoreTimeout
	replicas := st.Replicas
	cfg.LivePods = func() int { return replicas } // the fail-open share
	cfg.Logger, cfg.Registerer = log, reg
	opts := regional.EnvoyOptions{
		ShadowMode: st.ShadowMode, QuotaMode: st.QuotaMode, FailClosed: st.FailClosed, KeyPrefix: st.CacheKeyPrefix,
		ChargeOverLimit: st.ChargeOverLimit,
		Headers:         st.LimitHeaders, LimitHeader: st.LimitHeader, RemainingHeader: st.RemainingHeader, ResetHeader: st.ResetHeader,
		Only: true,
	}
	if st.Etcd != "" {
		// Joined to an allot cluster: global limits spend budgets the
		// coordinator shares across regions.
		etcd, err := newEtcdClient(st.Etcd, tlsconfig.DefaultClient("etcd-tls"), etcdAuth{})
		if err != nil {
			return err
		}
		defer etcd.Close()
		cfg.Etcd = etcd
		if st.ReportTokenFile != "" {
			b, err := os.ReadFile(st.ReportTokenFile)
			if err != nil {
				return usagef("ALLOT_REPORT_TOKEN_FILE: %v", err)
			}
			if cfg.ReportToken = strings.TrimSpace(string(b)); cfg.ReportToken == "" {
				return usagef("ALLOT_REPORT_TOKEN_FILE=%s: the file is empty", st.ReportTokenFile)
			}
		}
		if st.GlobalLimits != "" {
			b, err := os.ReadFile(st.GlobalLimits)
			if err != nil {
				return usagef("ALLOT_GLOBAL_LIMITS: %v", err)
			}
			if opts.Global, err = envoycompat.ParseGlobal(st.GlobalLimits, b); err != nil {
				return usageError{err}
			}
		}
	}
	svc, err := regional.New(cfg)
	if err != nil {
		return usageError{err}
	}
	var loaded atomic.Bool
	apply := func(c *envoyconf.Config) error {
		if err := svc.SetEnvoyConfig(c, opts); err != nil {
			return err
		}
		// As the original: healthy with at least one domain.
		loaded.Store(len(c.Domains()) > 0)
		return nil
	}
	onLoad := func(ok bool) {
		if ok {
			loadOK.Inc()
		} else {
			loadErr.Inc()
		}
	}

	// Before any listener opens: bad TLS files stop the command here.
	gopts, err := envoyGRPCOptions(st)
	if err != nil {
		return err
	}
	ls, err := envoyListen(st)
	if err != nil {
		return err
	}
	defer ls.close()
	if listening != nil {
		listening(ls)
	}
	gopts = append(gopts, grpc.ChainUnaryInterceptor(recoverUnary(log)), streamWorkers())
	gs := grpc.NewServer(gopts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	rlsv3.RegisterRateLimitServiceServer(gs, svc.RLS())
	reflection.Register(gs)
	var stopping atomic.Bool
	healthy := func() bool {
		return !stopping.Load() && (!st.HealthyWithConfig || loaded.Load())
	}
	mux := http.NewServeMux()
	mux.Handle("/healthcheck", envoycompat.HealthHandler(healthy))
	mux.Handle("/json", envoycompat.JSONHandler(svc.RLS()))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	debugSrv := &http.Server{Handler: envoycompat.DebugHandler(svc.EnvoyConfig), ReadHeaderTimeout: 10 * time.Second}
	var promSrv *http.Server
	if ls.prom != nil {
		pm := http.NewServeMux()
		pm.Handle(st.PrometheusPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		promSrv = &http.Server{Handler: pm, ReadHeaderTimeout: 10 * time.Second}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	// Components first: the pod (warm-up, local stores) and the
	// configuration source.
	first := make(chan error, 1)
	g.Go(func() error { return svc.Run(gctx) })
	if sub != nil {
		var once sync.Once
		g.Go(func() error {
			return sub.Run(gctx, func(c *envoyconf.Config) error {
				err := apply(c)
				onLoad(err == nil)
				if err == nil {
					once.Do(func() { first <- nil })
				}
				return err
			})
		})
	} else {
		g.Go(func() error { return rt.Watch(gctx, st.RuntimePoll, log, apply, onLoad, first) })
	}
	if !st.ForceStart {
		// As the original: no answers before the first configuration. A
		// first configuration that does not load is fatal here (fix the
		// file, or set FORCE_START_WITHOUT_INITIAL_CONFIG=true to serve
		// and wait for a good one).
		select {
		case err := <-first:
			if err != nil {
				stopping.Store(true)
				cancel()
				_ = g.Wait()
				return fmt.Errorf("configuration in %s: %w (set FORCE_START_WITHOUT_INITIAL_CONFIG=true to start anyway and wait for a good one)", rt.Dir(), err)
			}
		case <-gctx.Done():
			return g.Wait()
		}
	}
	// Both health services exist from the first call on (NotFound is not
	// an answer a prober expects), and the original's name turns with ""
	// (it is set first: a caller that saw "" serving sees it serving).
	for _, name := range []string{"ratelimit", ""} {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	g.Go(func() error { return serve.IgnoreClosed(gs.Serve(ls.grpc)) })
	g.Go(func() error { return serve.IgnoreClosed(httpSrv.Serve(ls.http)) })
	g.Go(func() error { return serve.IgnoreClosed(debugSrv.Serve(ls.debug)) })
	if promSrv != nil {
		g.Go(func() error { return serve.IgnoreClosed(promSrv.Serve(ls.prom)) })
	}
	g.Go(func() error {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			state := healthpb.HealthCheckResponse_SERVING
			if !healthy() || !svc.Ready() && !st.ForceStart {
				state = healthpb.HealthCheckResponse_NOT_SERVING
			}
			hs.SetServingStatus("ratelimit", state) // the original's service name
			hs.SetServingStatus("", state)
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
	g.Go(func() error {
		<-gctx.Done()
		stopping.Store(true)
		hs.Shutdown()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = httpSrv.Shutdown(sctx)
		_ = debugSrv.Shutdown(sctx)
		if promSrv != nil {
			_ = promSrv.Shutdown(sctx)
		}
		gctx, gcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer gcancel()
		serve.StopGRPC(gctx, gs)
		return nil
	})
	source := rt.Dir()
	if st.ConfigType == "GRPC_XDS_SOTW" {
		source = "xds://" + st.XDS.ServerURL
	}
	log.Warn("envoy-ratelimit serving", "grpc", ls.grpc.Addr().String(), "http", ls.http.Addr().String(),
		"debug", ls.debug.Addr().String(), "config", source, "redis", st.RedisURL, "redis_type", st.RedisType,
		"etcd", st.Etcd, "region", st.Region, "global_limits", len(opts.Global))
	err = g.Wait()
	log.Warn("envoy-ratelimit stopped")
	return err
}

// envoySubscriber is the xDS configuration source the settings describe.
func envoySubscriber(st envoycompat.Settings, log *slog.Logger, reg prometheus.Registerer) (*envoyxds.Subscriber, error) {
	x := st.XDS
	c := envoyxds.DefaultConfig()
	c.ServerURL, c.NodeID, c.NodeMetadata, c.Headers = x.ServerURL, x.NodeID, x.NodeMetadata, x.Headers
	c.RetryInterval, c.BackoffInitial, c.BackoffMax = x.RetryInterval, x.BackoffInitial, x.BackoffMax
	c.BackoffRandomFactor, c.Jitter, c.MaxMsgSize, c.Merge = x.BackoffRandomFactor, x.BackoffJitter, x.MaxMsgSize, st.MergeDomainConfig
	c.Logger, c.Registerer = log, reg
	if x.UseTLS {
		// As the original: the CA verifies the server (the system roots
		// without one), the SAN replaces the host dialled as the name its
		// certificate must carry, and the pair is shown to a server that
		// asks for a client certificate.
		tc := tlsconfig.DefaultClient("CONFIG_GRPC_XDS_TLS")
		tc.Enable, tc.CAFile, tc.CertFile, tc.KeyFile, tc.ServerName = true, x.ServerCACert, x.ClientCert, x.ClientKey, x.ServerSAN
		tc.Logger = log
		tc.Names = map[string]string{
			"CAFile": "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CertFile": "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
			"KeyFile": "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "ServerName": "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
		}
		creds, err := tc.TransportCredentials()
		if err != nil {
			return nil, usageError{err}
		}
		c.Creds = creds
	}
	sub, err := envoyxds.New(c)
	if err != nil {
		return nil, usageError{err}
	}
	return sub, nil
}

// envoyCheck loads the configuration once and prints what it holds.
func envoyCheck(s *streams, st envoycompat.Settings, rt envoycompat.Runtime) error {
	// The gRPC server's TLS files are read as a run would read them.
	if _, err := envoyGRPCOptions(st); err != nil {
		return err
	}
	if st.ConfigType != "FILE" {
		// The subscriber checks its settings and reads its TLS files; it
		// connects only when run.
		if _, err := envoySubscriber(st, slog.New(slog.DiscardHandler), nil); err != nil {
			return err
		}
		fmt.Fprintf(s.out, "settings ok; the configuration comes from the xDS server %s (node %s)\n", st.XDS.ServerURL, st.XDS.NodeID)
		return nil
	}
	cfg, skipped, err := rt.Load()
	for _, sk := range skipped {
		fmt.Fprintf(s.out, "left out (unreadable): %s\n", sk)
	}
	if err != nil {
		return fmt.Errorf("configuration in %s: %w", rt.Dir(), err)
	}
	fmt.Fprintf(s.out, "settings ok; %s: %d files, %d domains (%s), %d limits\n", rt.Dir(), len(cfg.Files()), len(cfg.Domains()),
		strings.Join(cfg.Domains(), ", "), cfg.Limits())
	fmt.Fprint(s.out, cfg.Dump())
	if st.GlobalLimits != "" {
		b, err := os.ReadFile(st.GlobalLimits)
		if err != nil {
			return usagef("ALLOT_GLOBAL_LIMITS: %v", err)
		}
		global, err := envoycompat.ParseGlobal(st.GlobalLimits, b)
		if err != nil {
			return err
		}
		for _, path := range slices.Sorted(maps.Keys(global)) {
			g := global[path]
			names, err := cfg.CheckGlobal(path, g)
			if err != nil {
				return err
			}
			if names == nil {
				fmt.Fprintf(s.out, "global: %s spends tenant %s's budget\n", path, g.Tenant)
				continue
			}
			fmt.Fprintf(s.out, "global: %s spends, per value, tenant %s's global limit keyed on [tenant %s]\n", path, g.Tenant, strings.Join(names, " "))
		}
	}
	return nil
}

func hostname() string {
	h, _ := os.Hostname()
	if h == "" {
		return "envoy-ratelimit"
	}
	return h
}

// envoyRedis builds the Redis client the settings describe.
func envoyRedis(st envoycompat.Settings) (redis.UniversalClient, error) {
	user, pass := "", st.RedisAuth
	if u, p, ok := strings.Cut(st.RedisAuth, ":"); ok {
		user, pass = u, p
	}
	var tc *tls.Config
	if st.RedisTLS {
		tc = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: st.RedisTLSSkipHost} //nolint:gosec // REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, as the original
		if st.RedisTLSCert != "" {
			kp, err := tls.LoadX509KeyPair(st.RedisTLSCert, st.RedisTLSKey)
			if err != nil {
				return nil, usagef("REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY: %v", err)
			}
			tc.Certificates = []tls.Certificate{kp}
		}
		if st.RedisTLSCACert != "" {
			pem, err := os.ReadFile(st.RedisTLSCACert)
			if err != nil {
				return nil, usagef("REDIS_TLS_CACERT: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, usagef("REDIS_TLS_CACERT=%s: no PEM certificate in it", st.RedisTLSCACert)
			}
			tc.RootCAs = pool
		}
	}
	// Fail fast: decisions have their own few-ms timeout.
	if st.RedisSocketType == "unix" && st.RedisType == "SINGLE" {
		return redis.NewClient(&redis.Options{
			Network: "unix", Addr: st.RedisURL, Username: user, Password: pass, PoolSize: st.RedisPoolSize,
			DialTimeout: st.RedisTimeout, MaxRetries: -1, ContextTimeoutEnabled: true, TLSConfig: tc,
		}), nil
	}
	addrs := splitList(st.RedisURL)
	o := &redis.UniversalOptions{
		Addrs: addrs, Username: user, Password: pass, PoolSize: st.RedisPoolSize, TLSConfig: tc,
		DialTimeout: st.RedisTimeout, MaxRetries: -1, ContextTimeoutEnabled: true,
	}
	switch st.RedisType {
	case "SINGLE":
		if len(addrs) != 1 {
			return nil, usagef("REDIS_URL=%q: with REDIS_TYPE=SINGLE want one host:port", st.RedisURL)
		}
	case "CLUSTER":
		o.IsClusterMode = true
	case "SENTINEL":
		o.MasterName, o.Addrs, o.SentinelPassword = addrs[0], addrs[1:], st.RedisSentinel
	}
	return redis.NewUniversalClient(o), nil
}

// envoyListeners are the command's listeners.
type envoyListeners struct {
	grpc, http, debug, prom net.Listener
}

func (l *envoyListeners) close() {
	for _, x := range []net.Listener{l.grpc, l.http, l.debug, l.prom} {
		if x != nil {
			_ = x.Close()
		}
	}
}

func envoyListen(st envoycompat.Settings) (*envoyListeners, error) {
	l := &envoyListeners{}
	var err error
	if st.GRPCUDS != "" {
		_ = os.Remove(st.GRPCUDS) // a socket a previous run left
		if l.grpc, err = net.Listen("unix", st.GRPCUDS); err != nil {
			return nil, usagef("GRPC_UDS=%s: %v", st.GRPCUDS, err)
		}
	} else if l.grpc, err = net.Listen("tcp", net.JoinHostPort(st.GRPCHost, strconv.Itoa(st.GRPCPort))); err != nil {
		return nil, usagef("GRPC_HOST, GRPC_PORT: %v", err)
	}
	if l.http, err = net.Listen("tcp", net.JoinHostPort(st.Host, strconv.Itoa(st.Port))); err != nil {
		l.close()
		return nil, usagef("HOST, PORT: %v", err)
	}
	if l.debug, err = net.Listen("tcp", net.JoinHostPort(st.DebugHost, strconv.Itoa(st.DebugPort))); err != nil {
		l.close()
		return nil, usagef("DEBUG_HOST, DEBUG_PORT: %v", err)
	}
	if st.UsePrometheus {
		if l.prom, err = net.Listen("tcp", st.PrometheusAddr); err != nil {
			l.close()
			return nil, usagef("PROMETHEUS_ADDR=%s: %v", st.PrometheusAddr, err)
		}
	}
	return l, nil
}

// envoyGRPCOptions are the gRPC server's options: TLS (mutual when
// GRPC_CLIENT_TLS_CACERT is set, with the client's SAN checked when
// GRPC_CLIENT_TLS_SAN is), connection ages, allot's keepalive policy.
func envoyGRPCOptions(st envoycompat.Settings) ([]grpc.ServerOption, error) {
	opts := []grpc.ServerOption{keepalivePolicy}
	if st.GRPCMaxConnectionAge > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge: st.GRPCMaxConnectionAge, MaxConnectionAgeGrace: st.GRPCMaxConnectionAgeGrace,
		}))
	}
	if !st.GRPCServerUseTLS {
		return opts, nil
	}
	ts := tlsconfig.DefaultServer()
	ts.Names = map[string]string{"CertFile": "GRPC_SERVER_TLS_CERT", "KeyFile": "GRPC_SERVER_TLS_KEY", "ClientCAFile": "GRPC_CLIENT_TLS_CACERT"}
	ts.CertFile, ts.KeyFile, ts.ClientCAFile = st.GRPCServerTLSCert, st.GRPCServerTLSKey, st.GRPCClientTLSCACert
	if err := ts.Validate(); err != nil {
		return nil, usageError{err}
	}
	tc, err := ts.Config()
	if err != nil {
		return nil, usageError{fmt.Errorf("gRPC server TLS: %w", err)}
	}
	if san := st.GRPCClientTLSSAN; san != "" && ts.MutualTLS() {
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !hasSAN(cs.PeerCertificates[0], san) {
				return errors.New("client certificate does not carry the SAN GRPC_CLIENT_TLS_SAN requires")
			}
			return nil
		}
	}
	return append(opts, grpc.Creds(credentials.NewTLS(tc))), nil
}

// recoverUnary answers a call whose handler panics with Internal, logged
// with the panic, instead of letting one request end the process.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic answering a call", "method", info.FullMethod, "panic", fmt.Sprint(p))
				resp, err = nil, status.Error(codes.Internal, "internal error")
			}
		}()
		return h(ctx, req)
	}
}

func hasSAN(c *x509.Certificate, san string) bool {
	if slices.Contains(c.DNSNames, san) || slices.Contains(c.EmailAddresses, san) {
		return true
	}
	for _, ip := range c.IPAddresses {
		if ip.String() == san {
			return true
		}
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return true
		}
	}
	return false
}

// envoyArgs rewrites the arguments when allot runs as the original's
// binary name (/bin/ratelimit), so that it runs envoy-ratelimit.
func envoyArgs(argv0 string, args []string) []string {
	if filepath.Base(argv0) == envoyBinary {
		return append([]string{"envoy-ratelimit"}, args...)
	}
	return args
}
