// Package dev runs the whole of allot in one process, for `allot dev` and for
// tests of the whole system: an embedded etcd, one coordinator, and one
// regional service per region (in-memory store, or a real Redis per region),
// with the coordinator's HTTP API and every region's HTTP API under
// /regions/{region}/ on one listener, and each region's gRPC on its own port.
package dev

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/allot-dev/allot/coordinator"
	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/etcdembed"
	"github.com/allot-dev/allot/internal/serve"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/policy"
	"github.com/allot-dev/allot/regional"
)

//go:embed policy.yaml
var defaultPolicy string

// DefaultPolicy returns the bundled policy for regions.
func DefaultPolicy(regions []string) string {
	re := regexp.MustCompile(`(?m)^regions: \[.*\]$`)
	return re.ReplaceAllString(defaultPolicy, "regions: ["+strings.Join(regions, ", ")+"]")
}

// Config configures a dev cluster.
type Config struct {
	// Regions to run (default us-east, eu-west, ap-south).
	Regions []string
	// HTTPListen serves the coordinator API and /regions/{region}/.
	HTTPListen string
	// GRPCHost is the host each region's gRPC listens on, on a free port.
	GRPCHost string
	// DataDir holds etcd's data; empty means a temporary directory removed
	// at the end.
	DataDir string
	// Redis maps regions to a Redis address; others use the in-memory store.
	Redis map[string]string
	// Policy is the document applied at start; empty means DefaultPolicy.
	Policy string
	// Intervals of the coordinator and the pods. The coordinator's lease
	// follows: its default (10s), or longer when the interval needs it
	// (SessionTTL + 2·RebalanceInterval), so any positive interval makes a
	// consistent coordinator.
	RebalanceInterval time.Duration
	// Logger receives every component's logs (default: discard).
	Logger *slog.Logger
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Regions:           []string{"us-east", "eu-west", "ap-south"},
		HTTPListen:        "127.0.0.1:7070",
		GRPCHost:          "127.0.0.1",
		RebalanceInterval: time.Second,
	}
}

// Validate checks the config, naming the flag-like field.
func (c Config) Validate() error {
	if len(c.Regions) == 0 {
		return errors.New("regions: at least one region")
	}
	seen := map[string]bool{}
	for _, r := range c.Regions {
		if seen[r] {
			return fmt.Errorf("regions: %q is listed twice", r)
		}
		seen[r] = true
	}
	for r := range c.Redis {
		if !seen[r] {
			return fmt.Errorf("redis: region %q is not one of --regions %s", r, strings.Join(c.Regions, ","))
		}
	}
	if c.RebalanceInterval <= 0 {
		return errors.New("rebalance-interval: must be positive")
	}
	// The coordinator this config makes, as a whole (the allocator's
	// settings included), so that nothing starts that would fail later.
	if err := c.coordinatorConfig().ValidateSettings(); err != nil {
		return fmt.Errorf("rebalance-interval %v: %w", c.RebalanceInterval, err)
	}
	return nil
}

// coordinatorConfig is the coordinator's configuration, dependencies aside.
func (c Config) coordinatorConfig() coordinator.Config {
	cc := coordinator.DefaultConfig()
	cc.ID = "dev-coordinator"
	cc.RebalanceInterval = c.RebalanceInterval
	cc.Lease = max(cc.Lease, cc.SessionTTL+2*c.RebalanceInterval)
	cc.Logger = c.Logger
	return cc
}

// Region is one running region.
type Region struct {
	Name     string
	Service  *regional.Service
	GRPCAddr string
	// Store names the store: "memory" or the Redis address.
	Store string
}

// Cluster is a running dev cluster.
type Cluster struct {
	HTTPAddr      string
	EtcdEndpoint  string
	CoordGRPCAddr string
	Coordinator   *coordinator.Coordinator
	Regions       []*Region
	Registry      *prometheus.Registry
	State         *state.Store
	Etcd          *clientv3.Client
}

// Run starts the cluster, calls started once every part serves, and runs
// until ctx ends; then it stops everything in reverse order.
func Run(ctx context.Context, cfg Config, started func(*Cluster)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger
	hl, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("--http-listen %s: %w (choose another address with --http-listen)", cfg.HTTPListen, err)
	}
	defer hl.Close()

	dir := cfg.DataDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "allot-dev-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	e, endpoint, err := etcdembed.Start("dev", dir)
	if err != nil {
		return err
	}
	defer e.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	st := state.New(cli, "")
	doc := cfg.Policy
	if doc == "" {
		doc = DefaultPolicy(cfg.Regions)
	}
	if err := applyPolicy(ctx, st, doc, cfg.Regions); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cl := &Cluster{HTTPAddr: hl.Addr().String(), EtcdEndpoint: endpoint, Registry: reg, State: st, Etcd: cli}

	// Coordinator.
	cgl, err := net.Listen("tcp", net.JoinHostPort(cfg.GRPCHost, "0"))
	if err != nil {
		return err
	}
	// Reports are authenticated as in production, with a token made for
	// this run and handed to every region: nothing else on the machine
	// can report to the coordinator's gRPC port.
	reportToken, err := newToken()
	if err != nil {
		return err
	}
	ccfg := cfg.coordinatorConfig()
	ccfg.Etcd, ccfg.GRPCAddr, ccfg.HTTPAddr = cli, cgl.Addr().String(), cl.HTTPAddr
	ccfg.Logger, ccfg.Registerer = log, reg
	ccfg.Reports = coordinator.ReportAuth{Token: reportToken}
	coord, err := coordinator.New(ccfg)
	if err != nil {
		return err
	}
	cl.Coordinator, cl.CoordGRPCAddr = coord, cgl.Addr().String()
	cgs := grpc.NewServer()
	coord.RegisterGRPC(cgs, coordinator.Auth{Insecure: true})
	reflection.Register(cgs)

	mux := http.NewServeMux()
	mux.Handle("/", coord.Handler(coordinator.Auth{Insecure: true}, prometheus.Gatherers{reg}))

	type regionRun struct {
		svc *regional.Service
		gs  *grpc.Server
		l   net.Listener
		hs  *health.Server
		rc  redis.UniversalClient
	}
	var runs []regionRun
	defer func() {
		for _, r := range runs {
			if r.rc != nil {
				_ = r.rc.Close()
			}
		}
	}()
	for _, name := range cfg.Regions {
		var store gcra.Store
		kind := "memory"
		var rc redis.UniversalClient
		if addr, ok := cfg.Redis[name]; ok {
			rc = redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second})
			if store, err = redisstore.New(rc); err != nil {
				return err
			}
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			err := rc.Ping(pctx).Err()
			cancel()
			if err != nil {
				_ = rc.Close()
				return fmt.Errorf("--redis %s=%s: %w (is redis-server running there?)", name, addr, err)
			}
			kind = addr
		} else {
			ms, err := memstore.New(memstore.DefaultConfig())
			if err != nil {
				return err
			}
			store = ms
		}
		rcfg := regional.DefaultConfig()
		rcfg.Region, rcfg.Pod, rcfg.Store, rcfg.Etcd = name, name+"-0", store, cli
		rcfg.ReportInterval, rcfg.ReportToken = cfg.RebalanceInterval, reportToken
		rcfg.Logger, rcfg.Registerer = log, reg
		if kind == "memory" {
			rcfg.StoreTimeout = 50 * time.Millisecond
		}
		svc, err := regional.New(rcfg)
		if err != nil {
			return err
		}
		l, err := net.Listen("tcp", net.JoinHostPort(cfg.GRPCHost, "0"))
		if err != nil {
			return err
		}
		gs := grpc.NewServer()
		svc.RegisterGRPC(gs)
		hs := health.NewServer()
		healthpb.RegisterHealthServer(gs, hs)
		reflection.Register(gs)
		mux.Handle("/regions/"+name+"/", http.StripPrefix("/regions/"+name, svc.Handler(reg, "")))
		runs = append(runs, regionRun{svc: svc, gs: gs, l: l, hs: hs, rc: rc})
		cl.Regions = append(cl.Regions, &Region{Name: name, Service: svc, GRPCAddr: l.Addr().String(), Store: kind})
	}
	// One composition, as allot regional and allot coordinator: the
	// listeners drain before the coordinator and the regions stop.
	g := serve.Group{Drain: 5 * time.Second, ReadyEvery: 20 * time.Millisecond}
	g.HTTP(&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, hl, nil)
	g.GRPC(cgs, cgl)
	components := []func(context.Context) error{coord.Run}
	for _, r := range runs {
		g.GRPC(r.gs, r.l)
		g.Health(r.hs)
		components = append(components, r.svc.Run)
	}
	ready := func() bool {
		for _, r := range runs {
			if !r.svc.Ready() {
				return false
			}
		}
		return true
	}
	g.Ready = ready
	// Announce once every region is ready.
	components = append(components, func(ctx context.Context) error {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for !ready() {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
		log.Info("allot dev ready", "http", cl.HTTPAddr)
		if started != nil {
			started(cl)
		}
		return nil
	})
	return g.Run(ctx, components...)
}

// applyPolicy applies doc when etcd holds another (or none).
func applyPolicy(ctx context.Context, st *state.Store, doc string, regions []string) error {
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	for _, r := range regions {
		found := false
		for _, pr := range d.Regions {
			found = found || pr == r
		}
		if !found {
			return fmt.Errorf("--regions: %q is not among the policy's regions %v", r, d.Regions)
		}
	}
	cur, _, err := st.Policy(ctx)
	if err == nil && cur.Document == doc {
		return nil
	}
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		return err
	}
	_, err = st.ApplyPolicy(ctx, []byte(doc), 0, "allot dev")
	return err
}

// newToken returns a random token of 32 hex digits.
func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("report token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
