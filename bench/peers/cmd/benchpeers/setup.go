package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/allot-dev/allot/bench/peers/internal/peerkit"
	"github.com/allot-dev/allot/client"
)

// Modes of allot's two limits, selected by the "mode" descriptor.
const (
	modeExact  = "exact"
	modeLeased = "leased"
)

// allotLease is the lease size of allot's leased limit.
const allotLease = 10

// allotPolicy gives every tenant two regional limits that no run exhausts:
// "exact" (every decision is one Redis script call) and "leased" (a pod
// takes allotLease units per Redis call and answers from memory until they
// are spent). The mode descriptor picks one; no request matches both.
var allotPolicy = fmt.Sprintf(`version: 1
regions: [bench]
default_tier: bench
limits:
  - name: exact
    descriptors: [tenant, mode]
    match: {mode: %[1]s}
    rate: %[3]d/s
    burst: %[4]d
    scope: regional
  - name: leased
    descriptors: [tenant, mode]
    match: {mode: %[2]s}
    rate: %[3]d/s
    burst: %[4]d
    scope: regional
    lease: %[5]d
tiers:
  bench:
    budget: {rate: %[3]d/s, burst: %[4]d}
`, modeExact, modeLeased, benchRate, benchBurst, allotLease)

// envoyConfig is Envoy ratelimit's equivalent: per (tenant, mode) value
// pair, benchRate requests per second.
var envoyConfig = fmt.Sprintf(`domain: %s
descriptors:
  - key: tenant
    descriptors:
      - key: %s
        rate_limit:
          unit: second
          requests_per_unit: %d
`, rlsDomain, modeKey, benchRate)

// goRedisPool is go-redis's default pool size here (10 per CPU), which allot
// regional and the redis_rate server use; Envoy's ratelimit gets the same.
var goRedisPool = 10 * runtime.GOMAXPROCS(0)

// setupAllot builds allot, starts etcd, a coordinator and allot regional,
// applies the policy and registers allot's peers: gRPC Decide, RLS and HTTP
// on each limit, and the Go client and raw DecideBatch on the exact one.
func (h *harness) setupAllot(ctx context.Context) error {
	bin, err := h.allotBinary(ctx)
	if err != nil {
		return err
	}
	version := h.allotVersion
	addrs, err := freeAddrs(7)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, coordGRPC, coordHTTP, grpcAddr, httpAddr, opsAddr := addrs[0], addrs[1], addrs[2], addrs[3], addrs[4], addrs[5], addrs[6]
	etcdURL := "http://" + etcdClient
	p, err := startProc("etcd", h.logs, nil, h.self, "serve-etcd", "--dir", filepath.Join(h.work, "etcd"),
		"--client-url", etcdURL, "--peer-url", "http://"+etcdPeer)
	if err != nil {
		return err
	}
	h.addProc(p)
	if err := waitReady(ctx, p, 60*time.Second, h.httpOK(etcdURL+"/health")); err != nil {
		return err
	}
	h.progress("etcd on %s", etcdClient)

	// Reports unauthenticated: one loopback pod. Set in the environment,
	// which a revision without the flag (--allot-rev) ignores.
	p, err = startProc("allot-coordinator", h.logs, []string{"ALLOT_INSECURE_REPORTS=true"}, bin, "coordinator", "--etcd", etcdURL,
		"--grpc-listen", coordGRPC, "--http-listen", coordHTTP, "--insecure-admin", "--id", "bench", "--log-level", "warn")
	if err != nil {
		return err
	}
	h.addProc(p)
	coordURL := "http://" + coordHTTP
	if err := waitReady(ctx, p, 60*time.Second, h.httpOK(coordURL+"/readyz")); err != nil {
		return err
	}
	policyFile := filepath.Join(h.work, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(allotPolicy), 0o644); err != nil {
		return err
	}
	if err := waitReady(ctx, p, 30*time.Second, func(ctx context.Context) error {
		_, err := runCmd(ctx, "", nil, bin, "policy", "apply", "-f", policyFile, "--coordinator", coordURL, "--note", "make bench-peers")
		return err
	}); err != nil {
		return fmt.Errorf("allot policy apply: %w", err)
	}
	h.progress("allot coordinator on %s; policy applied", coordHTTP)

	// --store-timeout 1s: every decision waits for Redis, as every peer
	// does, instead of falling back past allot's default of 5ms when the
	// shared CPUs queue it. Fallback decisions are counted per case anyway.
	args := []string{"regional", "--region", "bench", "--pod", "bench-0",
		"--redis", h.redisAddr, "--etcd", etcdURL, "--grpc-listen", grpcAddr, "--http-listen", httpAddr,
		"--store-timeout", "1s", "--log-level", "warn"}
	pprofURL := ""
	if h.cfg.profile != "" {
		args = append(args, "--ops-listen", opsAddr, "--pprof")
		pprofURL = "http://" + opsAddr + "/debug/pprof/"
	}
	regional, err := startProc("allot-regional", h.logs, nil, bin, args...)
	if err != nil {
		return err
	}
	h.addProc(regional)
	h.allotHTTP = "http://" + httpAddr
	if err := waitReady(ctx, regional, 60*time.Second, h.httpOK(h.allotHTTP+"/readyz")); err != nil {
		return err
	}
	pool, err := dialPool(grpcAddr, h.cfg.conns)
	if err != nil {
		return err
	}
	h.pools = append(h.pools, pool)
	for _, mode := range []string{modeExact, modeLeased} {
		for _, tr := range []string{"grpc", "rls", "http"} {
			var call callFunc
			var what string
			switch tr {
			case "grpc":
				call, what = allotGRPCCall(pool, h.cfg.tenants, mode), "allot regional, gRPC allot.v1.Limiter/Decide"
			case "rls":
				call, what = rlsCall(pool, h.cfg.tenants, mode), "allot regional, Envoy RLS ShouldRateLimit"
			case "http":
				call, what = allotHTTPCall(h.hc, h.allotHTTP, h.cfg.tenants, mode), "allot regional, HTTP POST /v1/decide (JSON)"
			}
			if mode == modeExact {
				what += "; " + exactWhat
			} else {
				what += fmt.Sprintf("; lease: %d, one Redis call per %d units, the rest from the pod's memory", allotLease, allotLease)
			}
			p := peer{Name: "allot-" + tr + "-" + mode, Group: groupAllot, What: what, Transport: tr, Mode: mode,
				pid: regional.cmd.Process.Pid, metrics: h.allotHTTP + "/metrics", pprof: pprofURL}
			if err := h.addAllot(ctx, p, single(call)); err != nil {
				return err
			}
		}
		if mode == modeExact {
			if err := h.addAllotBatched(ctx, grpcAddr, pool, regional.cmd.Process.Pid); err != nil {
				return err
			}
		}
	}
	h.progress("allot regional on gRPC %s, HTTP %s (%s)", grpcAddr, httpAddr, version)
	return nil
}

// exactWhat describes allot's exact limit in the peers table.
const exactWhat = "GCRA in Redis Lua, one script call per decision (concurrent calls share pipelines)"

// clientTimeout replaces the Go client's default timeout (20ms) in
// allot-client-exact: like allot regional's --store-timeout 1s here, a
// decision waits for its answer on the shared CPUs instead of failing, as
// every other driver's does.
const clientTimeout = time.Second

// addAllotBatched registers allot's two batched gRPC drivers, on the exact
// limit: Decide through allot's Go client, whose default coalescing merges
// concurrent calls into DecideBatch RPCs, and raw DecideBatch RPCs of
// --batch decisions each.
func (h *harness) addAllotBatched(ctx context.Context, grpcAddr string, pool grpcPool, pid int) error {
	cc := client.DefaultConfig()
	cc.Target, cc.Insecure, cc.Timeout = grpcAddr, true, clientTimeout
	c, err := client.New(cc)
	if err != nil {
		return fmt.Errorf("allot client: %w", err)
	}
	h.closers = append(h.closers, c)
	coalesce := "coalescing off"
	if cc.Coalesce {
		coalesce = fmt.Sprintf("coalescing on: concurrent calls merged into independent DecideBatch RPCs of up to %d decisions, at most 4 in flight; a call that finds an RPC slot free goes at once, alone, as a unary Decide", cc.MaxBatch)
	}
	cp := peer{Name: "allot-client-exact", Group: groupAllot, Transport: "client", Mode: modeExact, pid: pid, metrics: h.allotHTTP + "/metrics",
		What: fmt.Sprintf("allot regional, Decide through allot's Go client (package client, compiled into the harness: revision below) with client.DefaultConfig() (%s), except Timeout %v instead of %v; one Client, one gRPC connection, shared by the case's goroutines; %s",
			coalesce, clientTimeout, client.DefaultTimeout, exactWhat)}
	if err := h.addAllot(ctx, cp, single(allotClientCall(c, h.cfg.tenants, modeExact))); err != nil {
		return err
	}
	n := h.cfg.batch
	bp := peer{Name: "allot-batch-exact", Group: groupAllot, Transport: "batch", Mode: modeExact, Batch: n, pid: pid, metrics: h.allotHTTP + "/metrics",
		What: fmt.Sprintf("allot regional, raw gRPC allot.v1.Limiter/DecideBatch of %d decisions (independent: true; %d consecutive tenants); concurrency = goroutines each with one batch in flight (%d decisions at concurrency 1); decisions counted one by one, **p50 and p99 per batch of %d**; GCRA in Redis Lua, one script call per decision",
			n, n, n, n)}
	return h.addAllot(ctx, bp, driver{per: n, call: allotBatchCall(pool, h.cfg.tenants, n, modeExact)})
}

// addAllot checks one of allot's drivers and registers it.
func (h *harness) addAllot(ctx context.Context, p peer, d driver) error {
	if err := h.check(ctx, p.Name, d); err != nil {
		return err
	}
	h.calls[p.Name] = d
	h.peers = append(h.peers, p)
	return nil
}

// check makes one call through d and wants every decision allowed.
func (h *harness) check(ctx context.Context, name string, d driver) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	decided, denied, err := d.call(cctx, 0, 0)
	if err != nil {
		return fmt.Errorf("%s: first call: %w", name, err)
	}
	if decided != d.per || denied > 0 {
		return fmt.Errorf("%s: first call: %d of %d decided, %d denied; want all allowed", name, decided, d.per, denied)
	}
	return nil
}

// httpOK returns a check that GET url answers 200.
func (h *harness) httpOK(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := h.hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// allotBinary builds allot once (buildAllot) for every allot case.
func (h *harness) allotBinary(ctx context.Context) (string, error) {
	if h.allotBin == "" && h.allotBuildErr == nil {
		h.allotBin, h.allotVersion, h.allotBuildErr = h.buildAllot(ctx)
	}
	return h.allotBin, h.allotBuildErr
}

// buildAllot builds cmd/allot from the work tree (or --allot-rev) with the
// main module's own settings, and names what it built.
func (h *harness) buildAllot(ctx context.Context) (bin, version string, err error) {
	src := h.cfg.repo
	env := withoutGOFLAGS()
	if h.cfg.allotRev != "" {
		src = filepath.Join(h.work, "allot-src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return "", "", err
		}
		if _, err := runCmd(ctx, h.cfg.repo, nil, "sh", "-c",
			"git archive --format=tar \"$0\" | tar -x -C \"$1\"", h.cfg.allotRev, src); err != nil {
			return "", "", fmt.Errorf("--allot-rev %s: %w", h.cfg.allotRev, err)
		}
		out, err := runCmd(ctx, h.cfg.repo, nil, "git", "rev-parse", "--short=12", h.cfg.allotRev)
		if err != nil {
			return "", "", err
		}
		version = strings.TrimSpace(out) + " (git archive " + h.cfg.allotRev + ")"
	} else {
		out, err := runCmd(ctx, h.cfg.repo, nil, "git", "rev-parse", "--short=12", "HEAD")
		if err != nil {
			version = "work tree (not a git checkout)"
		} else {
			version = strings.TrimSpace(out)
			dirty, _ := runCmd(ctx, h.cfg.repo, nil, "git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench", ":(exclude)*.md")
			if files := changedFiles(dirty); len(files) > 0 {
				version += " + uncommitted changes in " + strings.Join(files, ", ")
			}
		}
	}
	bin = filepath.Join(h.work, "allot")
	h.progress("building allot (%s)", version)
	if _, err := runCmd(ctx, src, env, "go", "build", "-o", bin, "./cmd/allot"); err != nil {
		return "", "", fmt.Errorf("build allot: %w", err)
	}
	return bin, version, nil
}

// changedFiles lists the paths of git status --porcelain output.
func changedFiles(porcelain string) []string {
	var out []string
	s := bufio.NewScanner(strings.NewReader(porcelain))
	for s.Scan() {
		if line := s.Text(); len(line) > 3 {
			out = append(out, strings.TrimSpace(line[3:]))
		}
	}
	return out
}

// withoutGOFLAGS is the environment with GOFLAGS removed: make bench-peers
// sets -mod=mod for this module, which must not reach the main module's
// build.
func withoutGOFLAGS() []string { return peerkit.WithoutGOFLAGS() }

// allotFallbacks sums allot_fallback_decisions_total from the metrics of
// the allot process behind p (allot regional or allot envoy-ratelimit; 0
// for other peers or when unreadable).
func (h *harness) allotFallbacks(ctx context.Context, p peer) int64 {
	if p.Group != groupAllot || p.metrics == "" {
		return 0
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.metrics, nil)
	if err != nil {
		return 0
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var sum float64
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "allot_fallback_decisions_total{") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return int64(sum)
}

// envoyRuntime writes the runtime directory that envoyproxy/ratelimit and
// allot envoy-ratelimit both read (RUNTIME_ROOT/ratelimit/config/bench.yaml,
// envoyConfig), once, and returns RUNTIME_ROOT.
func (h *harness) envoyRuntime() (string, error) {
	if h.envoyRoot != "" {
		return h.envoyRoot, nil
	}
	root := filepath.Join(h.work, "envoy-runtime")
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(envoyConfig), 0o644); err != nil {
		return "", err
	}
	h.envoyRoot = root
	return root, nil
}

// envoyStoreTimeout is ALLOT_STORE_TIMEOUT in envoyEnv: like allot
// regional's --store-timeout 1s here, allot envoy-ratelimit's decisions wait
// for Redis on the shared CPUs instead of falling back after its default
// 5ms, as envoyproxy/ratelimit's do (REDIS_TIMEOUT, 10s by default).
const envoyStoreTimeout = "1s"

// envoyEnv is the environment of envoyproxy/ratelimit and of allot
// envoy-ratelimit: the same for both but for the three listening ports.
// ALLOT_STORE_TIMEOUT is allot's own; the original does not read it.
func (h *harness) envoyEnv(root, httpAddr, grpcAddr, debugAddr string) []string {
	return []string{
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + h.redisAddr, "REDIS_POOL_SIZE=" + strconv.Itoa(goRedisPool),
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT=" + portOf(httpAddr),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + portOf(grpcAddr),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + portOf(debugAddr),
		"ALLOT_STORE_TIMEOUT=" + envoyStoreTimeout,
	}
}

// startEnvoyLike starts bin with args as an envoyproxy/ratelimit service
// (envoyEnv, the shared runtime directory), waits for its /healthcheck and
// for a ShouldRateLimit that answers the configured limit, and returns the
// process, a connection pool and its HTTP address.
func (h *harness) startEnvoyLike(ctx context.Context, name, bin string, args ...string) (*proc, grpcPool, string, error) {
	root, err := h.envoyRuntime()
	if err != nil {
		return nil, nil, "", err
	}
	addrs, err := freeAddrs(3)
	if err != nil {
		return nil, nil, "", err
	}
	httpAddr, grpcAddr, debugAddr := addrs[0], addrs[1], addrs[2]
	p, err := startProc(name, h.logs, h.envoyEnv(root, httpAddr, grpcAddr, debugAddr), bin, args...)
	if err != nil {
		return nil, nil, "", err
	}
	h.addProc(p)
	if err := waitReady(ctx, p, 60*time.Second, h.httpOK("http://"+httpAddr+"/healthcheck")); err != nil {
		return nil, nil, "", err
	}
	pool, err := dialPool(grpcAddr, h.cfg.conns)
	if err != nil {
		return nil, nil, "", err
	}
	h.pools = append(h.pools, pool)
	if err := h.checkRLSLimit(ctx, name, pool); err != nil {
		if p.exited() {
			return nil, nil, "", fmt.Errorf("%w\n%s", err, p.tail(20))
		}
		return nil, nil, "", err
	}
	h.progress("%s on gRPC %s, HTTP %s", name, grpcAddr, httpAddr)
	return p, pool, httpAddr, nil
}

// setupEnvoy starts Envoy's reference ratelimit service on the shared Redis.
func (h *harness) setupEnvoy(ctx context.Context) error {
	bin, version, err := h.envoyBinary(ctx)
	if err != nil {
		return err
	}
	h.envoyBin = bin
	p, pool, _, err := h.startEnvoyLike(ctx, "envoy-ratelimit", bin)
	if err != nil {
		return err
	}
	h.calls["envoy-ratelimit"] = single(rlsCall(pool, h.cfg.tenants, modeExact))
	h.peers = append(h.peers, peer{Name: "envoy-ratelimit", Group: groupEnvoy, Transport: "rls", pid: p.cmd.Process.Pid,
		What: fmt.Sprintf("envoyproxy/ratelimit %s, Envoy RLS ShouldRateLimit; fixed-window counter in Redis (INCRBY + EXPIRE, pipelined per request); REDIS_POOL_SIZE=%d, other settings default", version, goRedisPool)})
	h.progress("envoy ratelimit: %s", version)
	return nil
}

// setupAllotEnvoy starts allot envoy-ratelimit (the binary allot's other
// cases run) as a drop-in for envoyproxy/ratelimit: the environment and the
// configuration directory the envoy case gets (envoyEnv, envoyRuntime), no
// etcd, no coordinator; driven by the envoy case's RLS call.
func (h *harness) setupAllotEnvoy(ctx context.Context) error {
	bin, err := h.allotBinary(ctx)
	if err != nil {
		return err
	}
	p, pool, httpAddr, err := h.startEnvoyLike(ctx, allotEnvoyPeer, bin, "envoy-ratelimit")
	if err != nil {
		return err
	}
	h.calls[allotEnvoyPeer] = single(rlsCall(pool, h.cfg.tenants, modeExact))
	h.peers = append(h.peers, peer{Name: allotEnvoyPeer, Group: groupAllot, Transport: "rls", Mode: modeExact,
		pid: p.cmd.Process.Pid, metrics: "http://" + httpAddr + "/metrics",
		What: fmt.Sprintf("`allot envoy-ratelimit` (%s), standalone (no etcd, no coordinator), with envoyproxy/ratelimit's environment and configuration directory as the envoy case gets them (REDIS_POOL_SIZE=%d, LOG_LEVEL=warn, USE_STATSD=false; plus ALLOT_STORE_TIMEOUT=%s, which the original ignores), Envoy RLS ShouldRateLimit; GCRA in Redis Lua, one script call per descriptor (concurrent calls share pipelines)",
			h.allotVersion, goRedisPool, envoyStoreTimeout)})
	return nil
}

// allotEnvoyPeer is the name of allot envoy-ratelimit's case.
const allotEnvoyPeer = "allot-envoy-ratelimit"

// checkRLSLimit makes one RLS call and wants it allowed under the
// configured limit: a server whose configuration matched nothing would
// answer OK without a limit, and without touching Redis.
func (h *harness) checkRLSLimit(ctx context.Context, name string, pool grpcPool) error {
	return waitReady(ctx, nil, 30*time.Second, func(ctx context.Context) error {
		c := rlsv3.NewRateLimitServiceClient(pool.conn(0))
		r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: rlsDomain, HitsAddend: 1,
			Descriptors: rlsCallDescriptor(tenantName(0), modeExact)})
		if err != nil {
			return fmt.Errorf("%s: ShouldRateLimit: %w", name, err)
		}
		if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(r.GetStatuses()) != 1 {
			return fmt.Errorf("%s: ShouldRateLimit = %v, want OK with one status", name, r)
		}
		if l := r.GetStatuses()[0].GetCurrentLimit(); l.GetRequestsPerUnit() != benchRate || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
			return fmt.Errorf("%s: ShouldRateLimit's limit = %v, want %d per second (did the configuration load?)", name, l, benchRate)
		}
		return nil
	})
}

// envoyBinary returns a ratelimit service binary of the pinned version: the
// one given, a cached one, or one installed now into the user cache.
func (h *harness) envoyBinary(ctx context.Context) (bin, version string, err error) {
	if h.cfg.envoyBin != "" {
		v, err := binaryModuleVersion(ctx, h.cfg.envoyBin, envoyModule)
		if err != nil {
			return "", "", fmt.Errorf("--envoy-bin: %w", err)
		}
		return h.cfg.envoyBin, v, nil
	}
	return peerkit.EnvoyBinary(ctx, h.progress)
}

// binaryModuleVersion reads the version of module mod from a Go binary's
// build information (go version -m).
func binaryModuleVersion(ctx context.Context, bin, mod string) (string, error) {
	return peerkit.BinaryModuleVersion(ctx, bin, mod)
}

// setupRedisRate starts the redis_rate RLS server (this program, serve-redisrate).
func (h *harness) setupRedisRate(ctx context.Context) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	p, err := startProc("redis_rate", h.logs, nil, h.self, "serve-redisrate", "--redis", h.redisAddr, "--grpc-listen", addr,
		"--rate", strconv.Itoa(benchRate), "--burst", strconv.Itoa(benchBurst))
	if err != nil {
		return err
	}
	h.addProc(p)
	pool, err := dialPool(addr, h.cfg.conns)
	if err != nil {
		return err
	}
	h.pools = append(h.pools, pool)
	if err := h.checkRLSLimit(ctx, "redis_rate", pool); err != nil {
		if p.exited() {
			return fmt.Errorf("%w\n%s", err, p.tail(20))
		}
		return err
	}
	h.calls["redis_rate"] = single(rlsCall(pool, h.cfg.tenants, modeExact))
	h.peers = append(h.peers, peer{Name: "redis_rate", Group: groupRedisRate, Transport: "rls", pid: p.cmd.Process.Pid,
		What: fmt.Sprintf("go-redis/redis_rate/v10 %s (AllowN) behind a minimal RLS server (bench/peers); GCRA in Redis Lua, one script call per decision; go-redis default pool (%d)", depVersion("github.com/go-redis/redis_rate/v10"), goRedisPool)})
	h.progress("redis_rate RLS server on %s", addr)
	return nil
}

// setupGubernator starts a single-node gubernator (this program,
// serve-gubernator).
func (h *harness) setupGubernator(ctx context.Context) error {
	addrs, err := freeAddrs(2)
	if err != nil {
		return err
	}
	p, err := startProc("gubernator", h.logs, nil, h.self, "serve-gubernator", "--grpc-listen", addrs[0], "--http-listen", addrs[1])
	if err != nil {
		return err
	}
	h.addProc(p)
	pool, err := dialPool(addrs[0], h.cfg.conns)
	if err != nil {
		return err
	}
	h.pools = append(h.pools, pool)
	call := gubernatorCall(pool, h.cfg.tenants, benchRate)
	if err := waitReady(ctx, p, 60*time.Second, func(ctx context.Context) error {
		ok, err := call(ctx, 0, 0)
		if err == nil && !ok {
			err = errors.New("first decision denied")
		}
		return err
	}); err != nil {
		return err
	}
	h.calls["gubernator"] = single(call)
	h.peers = append(h.peers, peer{Name: "gubernator", Group: groupGubernator, Transport: "grpc", pid: p.cmd.Process.Pid,
		What: fmt.Sprintf("gubernator %s single node, its own gRPC V1/GetRateLimits; token bucket in the server's memory (no Redis)", depVersion("github.com/gubernator-io/gubernator/v2"))})
	h.progress("gubernator on gRPC %s", addrs[0])
	return nil
}
