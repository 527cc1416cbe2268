package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
)

// harness owns the run's work directory, child processes and clients.
type harness struct {
	cfg   config
	log   io.Writer
	work  string
	logs  string
	procs []*proc // in start order; stopped in reverse
	self  string  // this executable, for the serve-* subcommands

	redisAddr string
	redisBin  string
	rdb       *redis.Client
	hc        *http.Client

	peers   []peer
	calls   map[string]driver
	pools   []grpcPool
	closers []io.Closer // allot's Go clients
	skipped []skip
	notes   []string
	// loadRounds is the 1-minute load average as each round starts.
	loadRounds []string

	// allot regional's HTTP base, for its metrics.
	allotHTTP string
	// allotBin is allot's binary, built once for every allot case
	// (allotBinary), and what it was built from.
	allotBin      string
	allotVersion  string
	allotBuildErr error
	// envoyRoot is the RUNTIME_ROOT envoyproxy/ratelimit and allot
	// envoy-ratelimit share (envoyRuntime).
	envoyRoot string
	// src is what this harness was compiled from.
	src      harnessSource
	envoyBin string
	bench    redisBench
}

// skip records a peer group that could not run, and why.
type skip struct {
	Group  string
	Reason string
}

func (h *harness) progress(format string, args ...any) {
	fmt.Fprintf(h.log, "benchpeers: "+format+"\n", args...)
}

// bench runs everything and writes the results.
func bench(ctx context.Context, cfg config, stderr io.Writer) (err error) {
	started := time.Now()
	h := &harness{cfg: cfg, log: stderr, calls: map[string]driver{}}
	m := machine{CPU: cpuModel(), Cores: runtime.NumCPU(), MemGiB: memGiB(), Kernel: kernel(), LoadPre: loadAvg()}
	if err := h.checkSource(ctx); err != nil {
		return err
	}
	if h.work, err = os.MkdirTemp("", "allot-bench-peers-"); err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	h.logs = filepath.Join(h.work, "logs")
	if err := os.MkdirAll(h.logs, 0o755); err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	defer func() {
		h.stopAll()
		switch {
		case cfg.keep:
			h.progress("work directory kept: %s", h.work)
		case err != nil:
			h.progress("failed; logs kept in %s", h.logs)
		default:
			_ = os.RemoveAll(h.work)
		}
	}()
	if h.self, err = os.Executable(); err != nil {
		return fmt.Errorf("own executable: %w", err)
	}
	h.progress("machine: %s, %d cores, load average %s", m.CPU, m.Cores, m.LoadPre)
	m.Go = goVersion(ctx)
	if err := h.startRedis(ctx); err != nil {
		return err
	}
	m.Redis = redisVersion(ctx, h.redisBin)
	h.hc = newHTTPClient(max(slicesMax(cfg.conc), 2))

	if cfg.has(groupPhysical) {
		if err := h.setupPhysical(ctx); err != nil {
			h.skip(groupPhysical, err)
		}
	}
	if cfg.has(groupAllot) {
		if err := h.setupAllot(ctx); err != nil {
			h.skip(groupAllot, err)
		}
		if err := h.setupAllotEnvoy(ctx); err != nil {
			h.skip(groupAllot+" ("+allotEnvoyPeer+")", err)
		}
	}
	if cfg.has(groupEnvoy) {
		if err := h.setupEnvoy(ctx); err != nil {
			h.skip(groupEnvoy, err)
		}
	}
	if cfg.has(groupRedisRate) {
		if err := h.setupRedisRate(ctx); err != nil {
			h.skip(groupRedisRate, err)
		}
	}
	if cfg.has(groupGubernator) {
		if err := h.setupGubernator(ctx); err != nil {
			h.skip(groupGubernator, err)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if len(h.peers) == 0 {
		return errors.New("nothing to run: every selected peer failed to start (see above)")
	}
	results, err := h.runRounds(ctx)
	if err != nil {
		return err
	}
	h.stopAll()
	m.LoadPost, m.LoadRounds = loadAvg(), h.loadRounds
	rep := report{
		Started: started, Wall: time.Since(started), Machine: m, Cfg: cfg,
		AllotVersion: h.allotVersion, HarnessVersion: h.src.String(), Peers: h.peers, Skipped: h.skipped, Notes: h.notes, Results: results,
		PhysicalCmd: map[int]string{},
	}
	if h.bench.sha != "" {
		rep.PhysicalCmd[1] = h.bench.command(0, 1)
		rep.PhysicalCmd[cfg.pipeline] = h.bench.command(0, cfg.pipeline)
	}
	if err := writeResults(cfg.out, rep); err != nil {
		return err
	}
	h.progress("done in %s: %s and %s", rep.Wall.Round(time.Second),
		filepath.Join(cfg.out, "raw.txt"), filepath.Join(cfg.out, "report.md"))
	return nil
}

func slicesMax(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func (h *harness) skip(group string, err error) {
	h.progress("SKIPPED %s: %v", group, err)
	reason := err.Error()
	if i := strings.IndexByte(reason, '\n'); i >= 0 {
		reason = reason[:i]
	}
	h.skipped = append(h.skipped, skip{Group: group, Reason: reason})
}

func (h *harness) addProc(p *proc) { h.procs = append(h.procs, p) }

// stopAll stops every child, newest first.
func (h *harness) stopAll() {
	for _, c := range h.closers {
		_ = c.Close()
	}
	h.closers = nil
	for _, p := range h.pools {
		p.close()
	}
	h.pools = nil
	if h.rdb != nil {
		_ = h.rdb.Close()
		h.rdb = nil
	}
	for i := len(h.procs) - 1; i >= 0; i-- {
		h.procs[i].stop(10 * time.Second)
	}
	h.procs = nil
}

// startRedis starts the one redis-server every Redis-backed peer shares.
func (h *harness) startRedis(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server not on PATH (apt-get install -y redis-server): %w", err)
	}
	h.redisBin = bin
	if h.redisAddr, err = freeAddr(); err != nil {
		return err
	}
	dir := filepath.Join(h.work, "redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p, err := startProc("redis", h.logs, nil, bin, "--port", portOf(h.redisAddr), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	if err != nil {
		return err
	}
	h.addProc(p)
	h.rdb = redis.NewClient(&redis.Options{Addr: h.redisAddr})
	if err := waitReady(ctx, p, 20*time.Second, func(ctx context.Context) error { return h.rdb.Ping(ctx).Err() }); err != nil {
		return err
	}
	h.progress("redis-server on %s", h.redisAddr)
	return nil
}

// setupPhysical loads allot's single-key script for redis-benchmark.
func (h *harness) setupPhysical(ctx context.Context) error {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return fmt.Errorf("redis-benchmark not on PATH (apt-get install -y redis-tools): %w", err)
	}
	sha, err := h.rdb.ScriptLoad(ctx, gcra.SingleScript()).Result()
	if err != nil {
		return fmt.Errorf("SCRIPT LOAD allot's single-key script: %w", err)
	}
	h.bench = redisBench{bin: bin, addr: h.redisAddr, sha: sha, keys: h.cfg.tenants}
	if _, err := h.bench.run(ctx, 1, 1, 100); err != nil {
		return err
	}
	h.peers = append(h.peers,
		peer{Name: "redis-benchmark-P1", Group: groupPhysical, Pipe: 1,
			What: "redis-benchmark, allot's single-key GCRA script by EVALSHA, one request in flight per client"},
		peer{Name: "redis-benchmark-P" + strconv.Itoa(h.cfg.pipeline), Group: groupPhysical, Pipe: h.cfg.pipeline,
			What: fmt.Sprintf("redis-benchmark, the same script, pipelined %d per client (-P %d)", h.cfg.pipeline, h.cfg.pipeline)},
	)
	h.progress("physical limit: redis-benchmark with allot's script (SHA %s)", sha[:12])
	return nil
}

// runRounds runs every case once per round, in an order rotated each round.
func (h *harness) runRounds(ctx context.Context) ([]result, error) {
	type kase struct {
		p    peer
		conc int
	}
	var cases []kase
	for _, p := range h.peers {
		for _, c := range h.cfg.conc {
			cases = append(cases, kase{p, c})
		}
	}
	per := h.cfg.warmup + h.cfg.duration
	h.progress("%d cases × %d rounds, %v each: about %v of load",
		len(cases), h.cfg.rounds, per, (time.Duration(len(cases)*h.cfg.rounds) * per).Round(time.Second))
	// redis-benchmark takes a request count; estimates start here and follow
	// the last measurement of each (pipeline, concurrency).
	est := map[[2]int]float64{}
	var out []result
	for r := range h.cfg.rounds {
		h.loadRounds = append(h.loadRounds, loadAvg1())
		off := r * len(cases) / h.cfg.rounds
		for i := range cases {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			k := cases[(off+i)%len(cases)]
			res, err := h.runCase(ctx, k.p, k.conc, r+1, est)
			if err != nil {
				return nil, fmt.Errorf("%s conc=%d: %w", k.p.Name, k.conc, err)
			}
			res.Round = r + 1
			out = append(out, res)
			mark := ""
			if res.Errors > 0 {
				mark = fmt.Sprintf(" — %d ERRORS, first: %s", res.Errors, res.FirstErr)
			}
			if res.Fallbacks > 0 {
				mark += fmt.Sprintf(" — %d FALLBACK decisions", res.Fallbacks)
			}
			h.progress("[round %d/%d, %2d/%d] %-20s conc=%-3d %9.0f decisions/s  p50 %-8s p99 %-8s Redis: %.2f calls, %.1f CPU-µs per decision%s",
				r+1, h.cfg.rounds, i+1, len(cases), k.p.Name, k.conc, res.rate(), fmtDur(res.P50), fmtDur(res.P99),
				res.RedisCalls, res.RedisCPU, mark)
		}
	}
	return out, nil
}

// runCase flushes Redis and resets its command statistics, runs one case,
// and reads Redis's statistics as the measured window opens and closes, so
// they cover the same decisions as the throughput.
func (h *harness) runCase(ctx context.Context, p peer, conc, round int, est map[[2]int]float64) (result, error) {
	if err := h.rdb.FlushAll(ctx).Err(); err != nil {
		return result{}, fmt.Errorf("FLUSHALL: %w", err)
	}
	if err := h.rdb.ConfigResetStat(ctx).Err(); err != nil {
		return result{}, fmt.Errorf("CONFIG RESETSTAT: %w", err)
	}
	res := result{Peer: p.Name, Conc: conc}
	var (
		st       [2]redisStats
		stErr    [2]error
		srv, cli [2]time.Duration
	)
	var prof sync.WaitGroup
	var profErr error
	mark := func(i int) {
		if i == 0 && p.pprof != "" && h.cfg.profile != "" {
			prof.Add(1)
			go func() {
				defer prof.Done()
				profErr = h.fetchProfile(ctx, p, conc, round)
			}()
		}
		st[i], stErr[i] = readRedisStats(ctx, h.rdb)
		cli[i] = selfCPU()
		if p.pid != 0 {
			var err error
			if srv[i], err = procCPU(p.pid); err != nil {
				stErr[i] = err
			}
		}
	}
	fallbacks0 := h.allotFallbacks(ctx, p)
	if p.Group == groupPhysical {
		key := [2]int{p.Pipe, conc}
		rps := est[key]
		if rps == 0 {
			rps = 20_000 * float64(min(p.Pipe, 8))
		}
		if h.cfg.warmup > 0 {
			w, err := h.bench.run(ctx, conc, p.Pipe, requestsFor(rps, h.cfg.warmup, conc, p.Pipe))
			if err != nil {
				return res, err
			}
			rps = w.rps
		}
		mark(0)
		m, err := h.bench.run(ctx, conc, p.Pipe, requestsFor(rps, h.cfg.duration, conc, p.Pipe))
		if err != nil {
			return res, err
		}
		mark(1)
		cli = [2]time.Duration{0, m.cpu} // redis-benchmark is the client
		est[key] = m.rps
		res.Decisions = int64(m.requests)
		res.Elapsed = time.Duration(float64(m.requests) / m.rps * float64(time.Second))
		res.P50, res.P99 = m.p50, m.p99
	} else {
		s := drive(ctx, h.calls[p.Name], conc, h.cfg.tenants, h.cfg.warmup, h.cfg.duration, mark)
		res.Decisions, res.Elapsed = s.decisions, s.elapsed
		res.Denied, res.Errors = s.denied, s.errors
		if s.firstErr != nil {
			res.FirstErr = s.firstErr.Error()
		}
		res.P50, res.P99 = percentile(s.lat, 0.50), percentile(s.lat, 0.99)
	}
	prof.Wait()
	if profErr != nil {
		return res, profErr
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	for _, err := range stErr {
		if err != nil {
			return res, err
		}
	}
	if res.Decisions > 0 {
		d := st[1].sub(st[0])
		res.RedisCalls = float64(d.calls) / float64(res.Decisions)
		res.RedisUsec = float64(d.usec) / float64(res.Decisions)
		res.RedisCPU = us(d.cpu) / float64(res.Decisions)
		res.ServerCPU = us(srv[1]-srv[0]) / float64(res.Decisions)
		res.ClientCPU = us(cli[1]-cli[0]) / float64(res.Decisions)
	}
	if p.Group == groupAllot {
		res.Fallbacks = h.allotFallbacks(ctx, p) - fallbacks0
	}
	return res, nil
}

// redisStats is what Redis did during a case.
type redisStats struct {
	// calls counts client commands: script calls (EVAL, EVALSHA, FCALL and
	// their _RO forms) when the case ran any, else every data command. Redis
	// counts the commands a script runs as calls of their own; leaving them
	// out counts what clients sent. usec is their execution time (a
	// script's includes what it ran).
	calls, usec int64
	// cpu is the redis-server process's CPU time (user + system), network
	// I/O included.
	cpu time.Duration
}

func (a redisStats) sub(b redisStats) redisStats {
	return redisStats{calls: a.calls - b.calls, usec: a.usec - b.usec, cpu: a.cpu - b.cpu}
}

// adminCommands are left out of the Redis statistics of a case.
var adminCommands = map[string]bool{
	"info": true, "config": true, "flushall": true, "flushdb": true, "ping": true, "hello": true,
	"client": true, "script": true, "command": true, "select": true, "auth": true, "dbsize": true,
}

var scriptCommands = map[string]bool{
	"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true,
}

// readRedisStats reads INFO commandstats (since the last CONFIG RESETSTAT)
// and the process's CPU time.
func readRedisStats(ctx context.Context, rdb *redis.Client) (redisStats, error) {
	info, err := rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return redisStats{}, fmt.Errorf("INFO commandstats cpu: %w", err)
	}
	return parseRedisStats(info), nil
}

// parseRedisStats reads lines such as
// cmdstat_evalsha:calls=10,usec=95,usec_per_call=9.50,... (subcommands such
// as cmdstat_client|setinfo count under their parent) and used_cpu_sys /
// used_cpu_user in seconds.
func parseRedisStats(info string) redisStats {
	type cu struct{ calls, usec int64 }
	var all, scripts cu
	var cpu float64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			if v, err := strconv.ParseFloat(rest, 64); err == nil {
				cpu += v
			}
			continue
		}
		cmd, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		if parent, _, ok := strings.Cut(cmd, "|"); ok {
			cmd = parent
		}
		if adminCommands[cmd] {
			continue
		}
		var c cu
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				c.calls = n
			case "usec":
				c.usec = n
			}
		}
		all.calls, all.usec = all.calls+c.calls, all.usec+c.usec
		if scriptCommands[cmd] {
			scripts.calls, scripts.usec = scripts.calls+c.calls, scripts.usec+c.usec
		}
	}
	st := redisStats{calls: all.calls, usec: all.usec, cpu: time.Duration(math.Round(cpu * 1e9))}
	if scripts.calls > 0 {
		st.calls, st.usec = scripts.calls, scripts.usec
	}
	return st
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
}

// fetchProfile writes a CPU profile of p's process over the measured window
// (--duration, in whole seconds as pprof takes them, at least one) to
// --profile/PEER-cCONC-rROUND.pprof.
func (h *harness) fetchProfile(ctx context.Context, p peer, conc, round int) error {
	secs := max(1, int(h.cfg.duration.Round(time.Second)/time.Second))
	url := fmt.Sprintf("%sprofile?seconds=%d", p.pprof, secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("CPU profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CPU profile: GET %s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(h.cfg.profile, 0o755); err != nil {
		return err
	}
	name := filepath.Join(h.cfg.profile, fmt.Sprintf("%s-c%d-r%d.pprof", p.Name, conc, round))
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("CPU profile %s: %w", name, err)
	}
	return f.Close()
}
