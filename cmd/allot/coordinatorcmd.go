package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/allot-dev/allot/coordinator"
	"github.com/allot-dev/allot/internal/tlsconfig"
)

func init() { register(newCoordinatorCmd) }

type coordinatorOpts struct {
	etcd           string
	grpcListen     string
	httpListen     string
	advertiseGRPC  string
	advertiseHTTP  string
	id             string
	prefix         string
	rebalance      time.Duration
	sessionTTL     time.Duration
	lease          time.Duration
	adminTokenFile string
	insecureAdmin  bool
	reportToken    string // --report-token-file
	insecureReport bool
	logLevel       string
	serverTLS      tlsconfig.Server
	idle           time.Duration
	maxTenants     int
	shard          string // a number, or "from-hostname"
	shards         int
	ops            opsConfig
	etcdTLS        tlsconfig.Client
	etcdAuth       etcdAuth
}

func newCoordinatorCmd(s *streams) *cobra.Command {
	o := coordinatorOpts{}
	def := coordinator.DefaultConfig()
	c := &cobra.Command{
		Use:   "coordinator --etcd ENDPOINTS --grpc-listen ADDR --http-listen ADDR",
		Short: "Run a coordinator: elected through etcd, it rebalances budget shares",
		Long: `Run one coordinator replica. Replicas elect one leader through etcd; the leader
takes the regional pods' reports, rebalances every tenant's shares every
--rebalance-interval, and answers each report with the pod's lease and its
region's grants that changed since the pod last applied them (nothing is
written to etcd per grant). A new leader learns for --lease + --session-ttl
before it grants: it renews no lease until every older one has expired.
The others wait, and answer pods with the leader's address.

With --shards N the tenants are split between N coordinator shards by a
stable hash of the tenant's name; each shard elects its own leader, and
pods report each tenant to its shard's leader. Run each replica with
--shard I (0 to N-1), or --shard from-hostname to take I from the trailing
number of the hostname (coord-2 runs shard 2), as a StatefulSet names its
pods. The first coordinator of a new cluster records N in etcd; it is fixed
from then on, and a replica started with another --shards exits.

Tenants with no budget record and no policy entry are forgotten (their grants
dropped at every pod) after --tenant-idle-timeout without traffic; at most
--max-tenants are tracked.

It serves allot.v1.Coordinator and allot.v1.Admin over gRPC, and the admin
API, a status page (/), /metrics, /healthz and /readyz over HTTP. Writes need
the token in --admin-token-file unless --insecure-admin. With --ops-listen,
/metrics, /healthz and /readyz are also served in plaintext there, for probes
and scrapers under mutual TLS (and /debug/pprof/ with --pprof).

Reports (allot.v1.Coordinator) are authenticated: by the region token in
--report-token-file, which pods send with their own --report-token-file, or
by a client certificate the gRPC listener verifies (--tls-client-ca). Others
are refused as unauthenticated. Without either it does not start, unless
--insecure-reports takes reports from anyone who reaches --grpc-listen.`,
		Example: `  allot coordinator --etcd http://127.0.0.1:2379 \
    --grpc-listen :7071 --http-listen :7070 \
    --admin-token-file /etc/allot/token --report-token-file /etc/allot/report-token
  ALLOT_ETCD=http://etcd-0:2379,http://etcd-1:2379 allot coordinator --insecure-admin --insecure-reports \
    --grpc-listen 0.0.0.0:7071 --http-listen 0.0.0.0:7070 --advertise-grpc coord-0.allot:7071
  allot coordinator --etcd http://127.0.0.1:2379 --admin-token-file /etc/allot/token \
    --tls-cert tls.crt --tls-key tls.key --tls-client-ca ca.crt   # pods report with client certificates
  allot coordinator --etcd http://etcd:2379 --report-token-file /etc/allot/report-token \
    --shards 4 --shard from-hostname   # in a StatefulSet of 4 or more: coord-0 … coord-3 lead one shard each`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCoordinator(cmd.Context(), s, o) },
	}
	f := c.Flags()
	f.StringVar(&o.etcd, "etcd", "", "etcd endpoints, comma-separated (required)")
	f.StringVar(&o.grpcListen, "grpc-listen", "127.0.0.1:7071", "gRPC listen address")
	f.StringVar(&o.httpListen, "http-listen", "127.0.0.1:7070", "HTTP listen address")
	f.StringVar(&o.advertiseGRPC, "advertise-grpc", "", "gRPC address pods reach this replica at (default: --grpc-listen)")
	f.StringVar(&o.advertiseHTTP, "advertise-http", "", "HTTP address operators reach this replica at (default: --http-listen)")
	f.StringVar(&o.id, "id", "", "replica name (default: the hostname)")
	f.StringVar(&o.prefix, "etcd-prefix", "/allot/v1/", "key prefix of allot's state in etcd")
	f.DurationVar(&o.rebalance, "rebalance-interval", def.RebalanceInterval, "how often the leader rebalances")
	f.DurationVar(&o.sessionTTL, "session-ttl", def.SessionTTL, "etcd session TTL: how long a crashed leader keeps leadership (whole seconds)")
	f.DurationVar(&o.lease, "lease", def.Lease, "lease granted to pods per report; must exceed --session-ttl + --rebalance-interval and be at least two --rebalance-interval")
	f.DurationVar(&o.idle, "tenant-idle-timeout", def.TenantIdleTimeout, "forget a tenant with no budget record and no policy entry, dropping its grants, after this long without traffic (0: never)")
	f.IntVar(&o.maxTenants, "max-tenants", def.MaxTenants, "most tenants tracked from reports; beyond it, tenants stay on cold floors, counted in allot_coordinator_tenants_dropped_total (0: no cap)")
	f.StringVar(&o.shard, "shard", "0", "the coordinator shard this replica runs (0 to --shards minus 1), or from-hostname: the hostname's trailing number")
	f.IntVar(&o.shards, "shards", 0, "coordinator shards of the cluster: recorded by the first coordinator of a new cluster, fixed after (0: the cluster's; 1 for a new one)")
	f.StringVar(&o.adminTokenFile, "admin-token-file", "", "file holding the bearer token admin writes must carry")
	f.BoolVar(&o.insecureAdmin, "insecure-admin", false, "accept admin writes without a token")
	f.StringVar(&o.reportToken, "report-token-file", "", "file holding the region token pods' reports must carry (the pods' --report-token-file)")
	f.BoolVar(&o.insecureReport, "insecure-reports", false, "accept pods' reports without a token or client certificate, from anyone who reaches --grpc-listen")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	serverTLSFlags(f, &o.serverTLS)
	opsFlags(f, &o.ops)
	clientTLSFlags(f, &o.etcdTLS, "etcd-tls", "etcd")
	etcdAuthFlags(f, &o.etcdAuth)
	return c
}

func newLogger(w *streams, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w.err, &slog.HandlerOptions{Level: l})), nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func newEtcdClient(endpoints string, tc tlsconfig.Client, auth etcdAuth) (*clientv3.Client, error) {
	eps := splitList(endpoints)
	if len(eps) == 0 {
		return nil, usagef("--etcd is required, e.g. --etcd http://127.0.0.1:2379")
	}
	// Keepalive pings (etcd accepts one every 5 s by default) find a dead
	// connection after a network partition, so the client dials again
	// (and resolves the endpoints again) once the network heals.
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, DialKeepAliveTime: 5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second, Logger: zap.NewNop()}
	if err := etcdTLS(&cfg, tc); err != nil {
		return nil, err
	}
	if err := auth.apply(&cfg); err != nil {
		return nil, err
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", eps, err)
	}
	return c, nil
}

// listen opens addr, naming the flag when it is taken.
func listen(flag, addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w (choose another address with --%s)", flag, addr, err, flag)
	}
	return l, nil
}

func runCoordinator(ctx context.Context, s *streams, o coordinatorOpts) error {
	log, err := newLogger(s, o.logLevel)
	if err != nil {
		return err
	}
	if err := o.ops.validate(); err != nil {
		return err
	}
	if err := o.serverTLS.Validate(); err != nil {
		return usageError{err}
	}
	auth := coordinator.Auth{Insecure: o.insecureAdmin}
	if o.adminTokenFile != "" {
		b, err := os.ReadFile(o.adminTokenFile)
		if err != nil {
			return usagef("--admin-token-file: %v", err)
		}
		auth.Token = strings.TrimSpace(string(b))
	}
	if err := auth.Validate(); err != nil {
		return usageError{err}
	}
	reports, err := o.reportAuth()
	if err != nil {
		return err
	}
	if o.id == "" {
		o.id, _ = os.Hostname()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := coordinator.DefaultConfig()
	cfg.ID, cfg.Prefix = o.id, o.prefix
	cfg.GRPCAddr, cfg.HTTPAddr = or(o.advertiseGRPC, o.grpcListen), or(o.advertiseHTTP, o.httpListen)
	cfg.RebalanceInterval, cfg.SessionTTL, cfg.Lease = o.rebalance, o.sessionTTL, o.lease
	cfg.TenantIdleTimeout, cfg.MaxTenants = o.idle, o.maxTenants
	if cfg.Shard, err = parseShard(o.shard, os.Hostname); err != nil {
		return err
	}
	cfg.Shards = o.shards
	cfg.Logger, cfg.Registerer = log, reg
	cfg.Reports = reports
	// The whole configuration, the allocator's included, before anything
	// is dialled or started: inconsistent flags exit 2, naming the flags.
	if err := cfg.ValidateSettings(); err != nil {
		return flagError(err, coordinatorFlags)
	}
	etcd, err := newEtcdClient(o.etcd, o.etcdTLS, o.etcdAuth)
	if err != nil {
		return err
	}
	defer etcd.Close()
	cfg.Etcd = etcd
	coord, err := coordinator.New(cfg)
	if err != nil {
		return flagError(err, coordinatorFlags)
	}

	srv, err := listenServers(o.grpcListen, o.httpListen, o.serverTLS, o.ops)
	if err != nil {
		return err
	}
	coord.RegisterGRPC(srv.GRPC, auth)
	ga, ha := srv.Addrs()
	log.Info("coordinator starting", "id", o.id, "grpc", ga, "http", ha, "etcd", o.etcd, "reports", o.reportsBy())
	if o.insecureReport {
		log.Warn("--insecure-reports: anyone who reaches --grpc-listen can report as any pod and move shares")
	}
	// Run returns (resigning) once ctx ends, after the servers stop.
	err = srv.run(ctx, coord.Handler(auth, reg), nil, coord.Run)
	log.Info("coordinator stopped")
	return err
}

// parseShard reads --shard: a number, or from-hostname, the trailing
// number of the hostname (a StatefulSet's pod coord-2 runs shard 2).
func parseShard(v string, hostname func() (string, error)) (int, error) {
	if v == "from-hostname" {
		h, err := hostname()
		if err != nil {
			return 0, usagef("--shard from-hostname: %v", err)
		}
		i := len(h)
		for i > 0 && h[i-1] >= '0' && h[i-1] <= '9' {
			i--
		}
		if i == len(h) || len(h)-i > 3 {
			return 0, usagef("--shard from-hostname: hostname %q does not end in a shard number (as a StatefulSet's coord-2 does); set --shard I", h)
		}
		n, _ := strconv.Atoi(h[i:])
		return n, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, usagef("--shard %q: want a shard number from 0, or from-hostname", v)
	}
	return n, nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// reportAuth reads the report flags: a region token, mutual TLS, or
// --insecure-reports, as admin writes need a token or --insecure-admin.
func (o coordinatorOpts) reportAuth() (coordinator.ReportAuth, error) {
	a := coordinator.ReportAuth{Insecure: o.insecureReport}
	switch {
	case o.insecureReport && o.reportToken != "":
		return a, usagef("--insecure-reports and --report-token-file: choose one (--insecure-reports takes reports without the token)")
	case o.reportToken != "":
		tok, err := readToken("report-token-file", o.reportToken)
		if err != nil {
			return a, err
		}
		a.Token = tok
	case !o.insecureReport && !o.serverTLS.MutualTLS():
		return a, usagef("reports need authentication: --report-token-file FILE (the region token; pods take the same file), " +
			"or mutual TLS (--tls-client-ca: pods report with client certificates), " +
			"or --insecure-reports to take reports from anyone who reaches --grpc-listen")
	}
	if err := a.Validate(); err != nil {
		return a, usagef("--report-token-file %s: %v", o.reportToken, err)
	}
	return a, nil
}

// reportsBy says how reports are authenticated, for the start line.
func (o coordinatorOpts) reportsBy() string {
	var by []string
	if o.insecureReport {
		return "unauthenticated (--insecure-reports)"
	}
	if o.reportToken != "" {
		by = append(by, "region token")
	}
	if o.serverTLS.MutualTLS() {
		by = append(by, "client certificates")
	}
	return strings.Join(by, " or ")
}

// readToken reads a token file: its content, trimmed, must not be empty.
func readToken(flag, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", usagef("--%s: %v", flag, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", usagef("--%s %s: the file is empty", flag, path)
	}
	return tok, nil
}
