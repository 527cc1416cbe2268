package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// peer is one thing measured: a server and the way it is driven.
type peer struct {
	Name  string
	Group string
	// What says what runs, its version and its algorithm.
	What string
	// Transport (grpc, rls, http) and Mode (exact, leased) of allot peers.
	Transport string
	Mode      string
	// Pipe is redis-benchmark's -P (physical limit only).
	Pipe int
	// Batch is the decisions per call when above 1 (allot-batch-exact):
	// latencies are per call, that is per batch.
	Batch int
	// pid is the server process whose CPU time the case reads (0: none).
	pid int
	// metrics is the Prometheus endpoint of an allot peer's process, for
	// allot_fallback_decisions_total.
	metrics string
	// pprof is the base URL of the process's /debug/pprof/ (empty: none).
	pprof string
}

// result is one case (peer × concurrency) of one round.
type result struct {
	Peer  string
	Conc  int
	Round int
	// Decisions answered inside the measured window, over Elapsed.
	Decisions int64
	Elapsed   time.Duration
	Denied    int64
	Errors    int64
	FirstErr  string
	P50, P99  time.Duration
	// RedisCalls and RedisUsec are client commands to Redis and their
	// execution µs per decision (INFO commandstats over the measured
	// window); RedisCPU is the redis-server process's CPU µs per decision
	// (INFO cpu), network I/O included.
	RedisCalls float64
	RedisUsec  float64
	RedisCPU   float64
	// ServerCPU and ClientCPU are the CPU µs per decision of the server
	// process (allot regional, Envoy's ratelimit...) and of the load
	// generator (this harness, or redis-benchmark for the physical limit).
	ServerCPU float64
	ClientCPU float64
	// Fallbacks: allot decisions made without Redis (allot's metric).
	Fallbacks int64
}

func (r result) rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Decisions) / r.Elapsed.Seconds()
}

// report is everything the run writes.
type report struct {
	Started      time.Time
	Wall         time.Duration
	Machine      machine
	Cfg          config
	AllotVersion string
	// HarnessVersion is what the harness (the load generator, with the
	// allot packages it links) was compiled from.
	HarnessVersion string
	Peers          []peer
	Skipped        []skip
	Notes          []string
	Results        []result
	// PhysicalCmd is redis-benchmark's command line by pipeline depth.
	PhysicalCmd map[int]string
}

// percentile returns the q-quantile (0 < q ≤ 1) of sorted latencies by the
// nearest-rank method: the smallest value with at least q of all values at
// or below it. Zero for no values.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

type cellKey struct {
	Peer string
	Conc int
}

// cell aggregates one peer × concurrency over the rounds: medians, and the
// range of decisions per second.
type cell struct {
	N                int
	Rate             float64
	RateMin, RateMax float64
	P50, P99         time.Duration
	P99Min, P99Max   time.Duration
	RedisCalls       float64
	RedisUsec        float64
	RedisCPU         float64
	ServerCPU        float64
	ClientCPU        float64
	// Cost is server + Redis CPU µs per decision: what the operator pays
	// (median and range over the rounds).
	Cost, CostMin, CostMax float64
	Errors, Denied         int64
	Fallbacks              int64
	FirstErr               string
}

// total is server + Redis + client CPU µs per decision (medians).
func (c cell) total() float64 { return c.ServerCPU + c.RedisCPU + c.ClientCPU }

func aggregate(rs []result) map[cellKey]cell {
	group := map[cellKey][]result{}
	for _, r := range rs {
		k := cellKey{r.Peer, r.Conc}
		group[k] = append(group[k], r)
	}
	out := make(map[cellKey]cell, len(group))
	for k, g := range group {
		var rates, p50, p99, calls, usec, cpu, srv, cli []float64
		c := cell{N: len(g), RateMin: math.Inf(1), RateMax: math.Inf(-1), P99Min: math.MaxInt64,
			CostMin: math.Inf(1), CostMax: math.Inf(-1)}
		var cost []float64
		for _, r := range g {
			rt := r.rate()
			rates = append(rates, rt)
			c.RateMin, c.RateMax = math.Min(c.RateMin, rt), math.Max(c.RateMax, rt)
			p50 = append(p50, float64(r.P50))
			p99 = append(p99, float64(r.P99))
			c.P99Min, c.P99Max = min(c.P99Min, r.P99), max(c.P99Max, r.P99)
			calls = append(calls, r.RedisCalls)
			usec = append(usec, r.RedisUsec)
			cpu = append(cpu, r.RedisCPU)
			srv = append(srv, r.ServerCPU)
			k := r.ServerCPU + r.RedisCPU
			cost = append(cost, k)
			c.CostMin, c.CostMax = math.Min(c.CostMin, k), math.Max(c.CostMax, k)
			cli = append(cli, r.ClientCPU)
			c.Errors += r.Errors
			c.Denied += r.Denied
			c.Fallbacks += r.Fallbacks
			if c.FirstErr == "" {
				c.FirstErr = r.FirstErr
			}
		}
		c.Rate = median(rates)
		c.P50, c.P99 = time.Duration(median(p50)), time.Duration(median(p99))
		c.RedisCalls, c.RedisUsec, c.RedisCPU = median(calls), median(usec), median(cpu)
		c.ServerCPU, c.ClientCPU, c.Cost = median(srv), median(cli), median(cost)
		out[k] = c
	}
	return out
}

// apart reports whether every round of a lies above every round of b
// (sign > 0) or below (sign < 0): with n rounds each, a chance of 1 in
// C(2n, n) when both come from one distribution (1 in 20 for 3 rounds).
func apart(aMin, aMax, bMin, bMax float64) int {
	switch {
	case aMin > bMax:
		return 1
	case aMax < bMin:
		return -1
	}
	return 0
}

// ratio is a ÷ b, NaN when b is zero.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// pipelinedLimit is the physical limit: the best median decisions per
// second of pipelined redis-benchmark over the concurrency levels.
func pipelinedLimit(cells map[cellKey]cell, peers []peer, conc []int) (float64, int) {
	best, at := 0.0, 0
	for _, p := range peers {
		if p.Group != groupPhysical || p.Pipe <= 1 {
			continue
		}
		for _, c := range conc {
			if v := cells[cellKey{p.Name, c}].Rate; v > best {
				best, at = v, c
			}
		}
	}
	return best, at
}

// writeResults writes raw.txt and report.md into dir.
func writeResults(dir string, rep report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	for name, write := range map[string]func(io.Writer, report){"raw.txt": writeRaw, "report.md": writeMarkdown} {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		w := bufio.NewWriter(f)
		write(w, rep)
		if err := w.Flush(); err != nil {
			_ = f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// writeRaw writes every case of every round, in run order, in Go benchmark
// format: benchstat -col /peer raw.txt compares peers.
// A batch driver's latencies are per batch: their units (p50-batch-µs,
// p99-batch-µs) keep benchstat from setting them beside one decision's.
func writeRaw(w io.Writer, rep report) {
	batched := map[string]bool{}
	for _, p := range rep.Peers {
		batched[p.Name] = p.Batch > 1
	}
	fmt.Fprintf(w, "goos: linux\ngoarch: amd64\npkg: github.com/allot-dev/allot/bench/peers/cmd/benchpeers\ncpu: %s\n", rep.Machine.CPU)
	for _, r := range rep.Results {
		nsPerOp := 0.0
		if r.Decisions > 0 {
			nsPerOp = float64(r.Elapsed.Nanoseconds()) / float64(r.Decisions)
		}
		lat := "µs"
		if batched[r.Peer] {
			lat = "batch-µs"
		}
		fmt.Fprintf(w, "BenchmarkPeers/peer=%s/conc=%d\t%d\t%.1f ns/op\t%.0f decisions/s\t%.1f p50-%s\t%.1f p99-%s\t%.3f redis-calls/op\t%.2f redis-µs/op\t%.2f redis-cpu-µs/op\t%.2f server-cpu-µs/op\t%.2f client-cpu-µs/op\t%d errors\n",
			r.Peer, r.Conc, r.Decisions, nsPerOp, r.rate(), us(r.P50), lat, us(r.P99), lat, r.RedisCalls, r.RedisUsec, r.RedisCPU, r.ServerCPU, r.ClientCPU, r.Errors)
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// fmtInt writes n with thousands separators.
func fmtInt(n float64) string {
	if math.IsNaN(n) || math.IsInf(n, 0) {
		return "—"
	}
	s := strconv.FormatInt(int64(math.Round(n)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtLat writes a latency for a table: µs below 1 ms, else ms.
func fmtLat(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", us(d))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
}

func fmtRatio(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", x)
}

func fmtPct(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "—"
	}
	return fmt.Sprintf("%.0f %%", 100*x)
}

// writeMarkdown writes report.md.
func writeMarkdown(w io.Writer, rep report) {
	cells := aggregate(rep.Results)
	cfg := rep.Cfg
	m := rep.Machine
	var physical, allot, others []peer
	for _, p := range rep.Peers {
		switch p.Group {
		case groupPhysical:
			physical = append(physical, p)
		case groupAllot:
			allot = append(allot, p)
		default:
			others = append(others, p)
		}
	}

	fmt.Fprintf(w, "# allot against its physical limit and its peers (make bench-peers)\n\n")
	fmt.Fprintf(w, "One run of `make bench-peers%s` on %s, %s wall time. allot regional: %s. The harness (load generator), with the allot packages it links — the Go client, the generated gRPC code, the GCRA script the physical limit loads — built by `go run` from the work tree at %s. Every figure below was measured in this run; `raw.txt` beside this file has every case of every round.\n\n",
		makeArgs(cfg), rep.Started.UTC().Format("2006-01-02 15:04 MST"), rep.Wall.Round(time.Second), rep.AllotVersion, rep.HarnessVersion)
	fmt.Fprintf(w, "Machine: %s\n\n", machineLine(m))

	fmt.Fprintf(w, "## Machine\n\n| | |\n| --- | --- |\n")
	fmt.Fprintf(w, "| CPU | %s, %d vCPUs, shared by the load generator, every server and Redis |\n", m.CPU, m.Cores)
	fmt.Fprintf(w, "| memory | %.0f GiB |\n| OS | %s |\n| Go | %s |\n", m.MemGiB, m.Kernel, m.Go)
	fmt.Fprintf(w, "| Redis | %s, one `redis-server` on loopback TCP (`--save \"\" --appendonly no`) shared by every Redis-backed peer |\n", m.Redis)
	fmt.Fprintf(w, "| load average (1 / 5 / 15 min) | %s before, %s after; 1-min at each round's start: %s |\n\n", m.LoadPre, m.LoadPost, strings.Join(m.LoadRounds, ", "))

	fmt.Fprintf(w, "## Method\n\n")
	if cfg.rounds > 1 {
		fmt.Fprintf(w, "- %d rounds; each runs every peer × concurrency case once, the order rotated by 1/%d of the cases each round, so drift on the shared machine falls on every peer alike. Tables show the median over the rounds and the range of decisions per second.\n",
			cfg.rounds, cfg.rounds)
	} else {
		fmt.Fprintf(w, "- One round: every peer × concurrency case once (no rotation; run more rounds to cancel drift). The range column is that one value.\n")
	}
	fmt.Fprintf(w, "- Each case: `FLUSHALL` and `CONFIG RESETSTAT`, then %v of warm-up and %v measured. A closed-loop load generator (one process, Go's default GOMAXPROCS, like every server here: nothing sets it) runs as many goroutines as the concurrency level (%s), each with one call in flight; gRPC clients share %d connection(s) per server, HTTP keeps one keep-alive connection per goroutine.\n",
		cfg.warmup, cfg.duration, joinInts(cfg.conc), cfg.conns)
	fmt.Fprintf(w, "- Throughput is the decisions answered within the measured window over its length; p50 and p99 are client-side latencies of those decisions (every one recorded, nearest rank). A case with any error is marked; errors are not decisions.%s\n", batchMethod(rep.Peers))
	fmt.Fprintf(w, "- Keys: tenants `bench-0` … `bench-%d` in rotation, one key per tenant and peer. Limit: %s per second, burst %s, per key, so nothing is denied and every decision writes its key (the dearer path).\n",
		cfg.tenants-1, fmtInt(benchRate), fmtInt(benchBurst))
	fmt.Fprintf(w, "- RLS peers (allot regional's RLS, allot envoy-ratelimit, Envoy's ratelimit, redis_rate) are driven by the same client code with byte-identical requests: domain `%s`, one descriptor `{tenant, %s}`, hits 1.\n", rlsDomain, modeKey)
	fmt.Fprintf(w, "- Redis calls per decision: client commands in `INFO commandstats` read as the measured window opens and closes ÷ the decisions counted in it; a script call counts once (Redis also counts the commands a script runs; those are left out). Redis CPU per decision: the redis-server process's user + system CPU time over the same window (`INFO cpu`, network I/O included) ÷ the same decisions. Script µs per call: `EVALSHA` execution time ÷ calls. Server and client CPU per decision: the server process's user + system CPU time (`/proc/PID/stat`, all threads, 10 ms ticks) and the load generator's (`getrusage`; redis-benchmark's own for the physical limit) over the same window ÷ the same decisions. With %d vCPUs, %s ÷ the total CPU per decision bounds decisions per second.\n", m.Cores, fmtInt(float64(m.Cores)*1e6))
	fmt.Fprintf(w, "- allot runs as `allot regional` (built from the main module) with `--store-timeout 1s`, beside `allot coordinator` and an etcd, each its own process; the policy has two regional limits on `{tenant, %s}`: `exact` and `leased` (`lease: %d`).%s allot's fallback decisions (its `allot_fallback_decisions_total`, read from each allot process) are counted per case: %s.\n\n",
		modeKey, allotLease, allotEnvoyMethod(rep.Peers), fallbackSummary(cells, allot, cfg.conc))

	fmt.Fprintf(w, "## Peers\n\n| peer | what runs |\n| --- | --- |\n")
	for _, p := range rep.Peers {
		fmt.Fprintf(w, "| `%s` | %s |\n", p.Name, p.What)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "| `%s` | **did not run**: %s |\n", s.Group, s.Reason)
	}
	fmt.Fprintln(w)
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "%s\n\n", n)
	}

	limit, limitConc := pipelinedLimit(cells, rep.Peers, cfg.conc)
	if len(physical) > 0 {
		fmt.Fprintf(w, "## Physical limit: redis-benchmark, allot's script by EVALSHA\n\n")
		fmt.Fprintf(w, "| peer | concurrency | decisions/s | range | p50 | p99 | script µs / call | CPU µs / decision: Redis + redis-benchmark |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
		for _, p := range physical {
			for _, c := range cfg.conc {
				x, ok := cells[cellKey{p.Name, c}]
				if !ok {
					continue
				}
				fmt.Fprintf(w, "| `%s` | %d | %s | %s–%s | %s | %s | %.1f | %.1f + %.1f |\n", p.Name, c, fmtInt(x.Rate),
					fmtInt(x.RateMin), fmtInt(x.RateMax), fmtLat(x.P50), fmtLat(x.P99), ratio(x.RedisUsec, x.RedisCalls), x.RedisCPU, x.ClientCPU)
			}
		}
		fmt.Fprintf(w, "\nThe pipelined physical limit used below: **%s decisions/s** (`%s` at concurrency %d). Commands (N requests sized to take about %v):\n\n```sh\nSHA=$(redis-cli -p PORT SCRIPT LOAD \"$(cat gcra/gcra_lib.lua gcra/gcra_one.lua)\")\n",
			fmtInt(limit), pipedName(physical), limitConc, cfg.duration)
		for _, pp := range []int{1, cfg.pipeline} {
			if c := rep.PhysicalCmd[pp]; c != "" {
				fmt.Fprintf(w, "%s\n", c)
			}
		}
		fmt.Fprintf(w, "```\n\nredis-benchmark's latencies are its own (per request; with -P, a request waits for its whole pipeline).\n\n")
	}

	fmt.Fprintf(w, "## Every peer × concurrency\n\n")
	fmt.Fprintf(w, "| peer | concurrency | decisions/s | range | p50 | p99 | Redis calls / decision | CPU µs / decision: server + Redis + client = total | errors |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, p := range append(slices.Clone(allot), others...) {
		for _, c := range cfg.conc {
			x, ok := cells[cellKey{p.Name, c}]
			if !ok {
				continue
			}
			errs := strconv.FormatInt(x.Errors, 10)
			if x.Errors > 0 {
				errs = fmt.Sprintf("**%d** (%s)", x.Errors, firstLine(x.FirstErr))
			}
			if x.Denied > 0 {
				errs += fmt.Sprintf("; %d denied", x.Denied)
			}
			fmt.Fprintf(w, "| `%s` | %d | %s | %s–%s | %s | %s | %.2f | %.0f + %.0f + %.0f = %.0f | %s |\n", p.Name, c, fmtInt(x.Rate),
				fmtInt(x.RateMin), fmtInt(x.RateMax), p.lat(x.P50), p.lat(x.P99), x.RedisCalls,
				x.ServerCPU, x.RedisCPU, x.ClientCPU, x.total(), errs)
		}
	}
	fmt.Fprintln(w)

	writeEnvoyPair(w, rep, cells)

	if len(allot) > 0 && len(others) > 0 {
		fmt.Fprintf(w, "## allot ÷ peer\n\n")
		fmt.Fprintf(w, "Per cell: decisions/s ratio (above 1: allot answers more) / p99 ratio (below 1: allot's tail is shorter) / CPU ratio, server + Redis µs per decision (below 1: allot costs less), medians of the rounds at the same concurrency; † marks a ratio whose two sides do not overlap (every round of one above every round of the other%s). Throughput and latency here move with whatever else the shared machine runs; CPU per decision moves less. The like-for-like rows are `%s` against `envoy-ratelimit` (the same process shape, environment, configuration file and requests), `allot-rls-exact` against the RLS peers (same client, same requests, GCRA or counters in the same Redis) and `allot-grpc-*` against gubernator (each its own gRPC API, one decision per call).%s\n\n", chance(cfg.rounds), allotEnvoyPeer, batchRatioNote(allot))
		fmt.Fprintf(w, "| allot | concurrency |")
		for _, o := range others {
			fmt.Fprintf(w, " ÷ `%s` |", o.Name)
		}
		fmt.Fprintf(w, "\n| --- | --- |%s\n", strings.Repeat(" --- |", len(others)))
		for _, a := range allot {
			for _, c := range cfg.conc {
				ax, ok := cells[cellKey{a.Name, c}]
				if !ok {
					continue
				}
				fmt.Fprintf(w, "| `%s` | %d |", a.Name, c)
				for _, o := range others {
					ox, ok := cells[cellKey{o.Name, c}]
					if !ok {
						fmt.Fprintf(w, " — |")
						continue
					}
					mark := func(aMin, aMax, bMin, bMax float64) string {
						if ax.N > 1 && ox.N > 1 && apart(aMin, aMax, bMin, bMax) != 0 {
							return " †"
						}
						return ""
					}
					p99 := "—" // a batch's latency is not one decision's
					if a.Batch <= 1 {
						p99 = fmtRatio(ratio(float64(ax.P99), float64(ox.P99))) + mark(float64(ax.P99Min), float64(ax.P99Max), float64(ox.P99Min), float64(ox.P99Max))
					}
					fmt.Fprintf(w, " %s%s / %s / %s%s |",
						fmtRatio(ratio(ax.Rate, ox.Rate)), mark(ax.RateMin, ax.RateMax, ox.RateMin, ox.RateMax),
						p99,
						fmtRatio(ratio(ax.Cost, ox.Cost)), mark(ax.CostMin, ax.CostMax, ox.CostMin, ox.CostMax))
				}
				fmt.Fprintln(w)
			}
		}
		fmt.Fprintln(w)
	}

	if len(allot) > 0 && limit > 0 {
		fmt.Fprintf(w, "## allot's fraction of the physical limit\n\n")
		var unpiped, piped string
		for _, p := range physical {
			if p.Pipe == 1 {
				unpiped = p.Name
			} else {
				piped = p.Name
			}
		}
		fmt.Fprintf(w, "allot's decisions/s ÷ the pipelined physical limit (%s decisions/s), ÷ unpipelined redis-benchmark at the same concurrency, and ÷ pipelined redis-benchmark (`-P %d`) at the same concurrency: the like-for-like figure for `allot-batch-exact`, whose every goroutine keeps a batch of %d decisions in flight as every redis-benchmark client keeps a pipeline of %d. Leased decisions call Redis once per %d units, so they can exceed the limit of the script.\n\n",
			fmtInt(limit), cfg.pipeline, cfg.batch, cfg.pipeline, allotLease)
		fmt.Fprintf(w, "| allot | concurrency | decisions/s | ÷ pipelined limit | ÷ redis-benchmark unpipelined, same concurrency | ÷ redis-benchmark pipelined, same concurrency |\n| --- | --- | --- | --- | --- | --- |\n")
		for _, a := range allot {
			for _, c := range cfg.conc {
				ax, ok := cells[cellKey{a.Name, c}]
				if !ok {
					continue
				}
				fmt.Fprintf(w, "| `%s` | %d | %s | %s | %s | %s |\n", a.Name, c, fmtInt(ax.Rate), fmtPct(ratio(ax.Rate, limit)),
					fmtPct(ratio(ax.Rate, cells[cellKey{unpiped, c}].Rate)), fmtPct(ratio(ax.Rate, cells[cellKey{piped, c}].Rate)))
			}
		}
		fmt.Fprintln(w)
		if name, c, rate := bestExactGRPC(cells, allot, cfg.conc); name != "" {
			fmt.Fprintf(w, "Best exact decision rate through allot's gRPC API (`allot.v1.Limiter`: `allot-grpc-exact`, `allot-client-exact`, `allot-batch-exact`): `%s` at concurrency %d, %s decisions/s, **%s of the pipelined physical limit** (issue 8 aims at ≥ 70 %%). With %d vCPUs for client, server and Redis together, %s ÷ that case's total CPU per decision (%.0f µs) bounds it at %s decisions/s.\n\n",
				name, c, fmtInt(rate), fmtPct(ratio(rate, limit)), m.Cores, fmtInt(float64(m.Cores)*1e6), cells[cellKey{name, c}].total(), fmtInt(ratio(float64(m.Cores)*1e6, cells[cellKey{name, c}].total())))
		}
	}

	fmt.Fprintf(w, "## Reproduce\n\n```sh\nmake bench-peers%s   # this run\nmake bench-peers ARGS=--quick   # about 2 minutes\n# every peer side by side, or two of them (p-values need --rounds 4 or more):\nbenchstat -col /peer bench/results/peers/raw.txt\nbenchstat -filter '/peer:(envoy-ratelimit OR allot-envoy-ratelimit OR allot-rls-exact)' -col /peer bench/results/peers/raw.txt\n```\n",
		makeArgs(cfg))
}

// writeEnvoyPair writes allot envoy-ratelimit beside envoyproxy/ratelimit,
// with their ratios at each concurrency, when both ran.
func writeEnvoyPair(w io.Writer, rep report, cells map[cellKey]cell) {
	var a, o *peer
	for i := range rep.Peers {
		switch rep.Peers[i].Name {
		case allotEnvoyPeer:
			a = &rep.Peers[i]
		case "envoy-ratelimit":
			o = &rep.Peers[i]
		}
	}
	if a == nil || o == nil {
		return
	}
	fmt.Fprintf(w, "## allot envoy-ratelimit against envoyproxy/ratelimit\n\n")
	fmt.Fprintf(w, "Like for like: each is one process started with the same environment (but its three ports) and the same configuration directory (`RUNTIME_ROOT/ratelimit/config/bench.yaml`: domain `%s`, `tenant` → `%s`, %s per second), on the same Redis, driven by the same RLS client with the same requests. allot enforces the limit by GCRA (one script call per descriptor), the original by a fixed window (`INCRBY` + `EXPIRE`). Ratio rows: allot ÷ the original (decisions/s above 1: allot answers more; latency and CPU below 1: allot's is lower; † as in the next table).\n\n",
		rlsDomain, modeKey, fmtInt(benchRate))
	fmt.Fprintf(w, "| concurrency | peer | decisions/s | range | p50 | p99 | Redis calls / decision | CPU µs / decision: server + Redis + client = total | errors |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, c := range rep.Cfg.conc {
		ax, aok := cells[cellKey{a.Name, c}]
		ox, ook := cells[cellKey{o.Name, c}]
		for _, row := range []struct {
			p  *peer
			x  cell
			ok bool
		}{{o, ox, ook}, {a, ax, aok}} {
			if !row.ok {
				continue
			}
			x := row.x
			errs := strconv.FormatInt(x.Errors, 10)
			if x.Errors > 0 {
				errs = fmt.Sprintf("**%d** (%s)", x.Errors, firstLine(x.FirstErr))
			}
			if x.Denied > 0 {
				errs += fmt.Sprintf("; %d denied", x.Denied)
			}
			if x.Fallbacks > 0 {
				errs += fmt.Sprintf("; **%d fallback decisions**", x.Fallbacks)
			}
			fmt.Fprintf(w, "| %d | `%s` | %s | %s–%s | %s | %s | %.2f | %.0f + %.0f + %.0f = %.0f | %s |\n", c, row.p.Name, fmtInt(x.Rate),
				fmtInt(x.RateMin), fmtInt(x.RateMax), fmtLat(x.P50), fmtLat(x.P99), x.RedisCalls,
				x.ServerCPU, x.RedisCPU, x.ClientCPU, x.total(), errs)
		}
		if !aok || !ook {
			continue
		}
		mark := func(aMin, aMax, bMin, bMax float64) string {
			if ax.N > 1 && ox.N > 1 && apart(aMin, aMax, bMin, bMax) != 0 {
				return " †"
			}
			return ""
		}
		fmt.Fprintf(w, "| %d | **allot envoy-ratelimit vs envoyproxy/ratelimit** | **%s**%s | | %s | %s%s | | server %s, server + Redis %s%s, total %s | |\n", c,
			fmtRatio(ratio(ax.Rate, ox.Rate)), mark(ax.RateMin, ax.RateMax, ox.RateMin, ox.RateMax),
			fmtRatio(ratio(float64(ax.P50), float64(ox.P50))),
			fmtRatio(ratio(float64(ax.P99), float64(ox.P99))), mark(float64(ax.P99Min), float64(ax.P99Max), float64(ox.P99Min), float64(ox.P99Max)),
			fmtRatio(ratio(ax.ServerCPU, ox.ServerCPU)),
			fmtRatio(ratio(ax.Cost, ox.Cost)), mark(ax.CostMin, ax.CostMax, ox.CostMin, ox.CostMax),
			fmtRatio(ratio(ax.total(), ox.total())))
	}
	fmt.Fprintln(w)
}

// machineLine is the machine in one line.
func machineLine(m machine) string {
	return fmt.Sprintf("%s, %d vCPUs, %.0f GiB, %s, %s, Redis %s; load average %s before, %s after.",
		m.CPU, m.Cores, m.MemGiB, m.Kernel, m.Go, m.Redis, m.LoadPre, m.LoadPost)
}

// makeArgs is the run's command line as make bench-peers ARGS='...'.
func makeArgs(c config) string {
	var a []string
	for i := 0; i < len(c.args); i++ {
		x := c.args[i]
		if x == "--out" || x == "-out" {
			i++ // and its value
			continue
		}
		if strings.HasPrefix(x, "--out=") || strings.HasPrefix(x, "-out=") {
			continue
		}
		a = append(a, x)
	}
	if len(a) == 0 {
		return ""
	}
	return " ARGS='" + strings.Join(a, " ") + "'"
}

// chance says how likely non-overlapping rounds are by chance alone.
func chance(rounds int) string {
	if rounds < 2 {
		return ""
	}
	// C(2n, n) equally likely orders, 2 of them fully apart.
	c := 1.0
	for i := 1; i <= rounds; i++ {
		c = c * float64(rounds+i) / float64(i)
	}
	return fmt.Sprintf(": with %d rounds a chance of 1 in %.0f when both sides measure the same", rounds, c/2)
}

func pipedName(physical []peer) string {
	for _, p := range physical {
		if p.Pipe > 1 {
			return p.Name
		}
	}
	return ""
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return strings.ReplaceAll(s, "|", "\\|")
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// fallbackSummary says how many allot decisions fell back (none, or where).
func fallbackSummary(cells map[cellKey]cell, allot []peer, conc []int) string {
	var where []string
	for _, a := range allot {
		for _, c := range conc {
			if x := cells[cellKey{a.Name, c}]; x.Fallbacks > 0 {
				where = append(where, fmt.Sprintf("%d in `%s` at concurrency %d", x.Fallbacks, a.Name, c))
			}
		}
	}
	if len(where) == 0 {
		return "none in this run"
	}
	return strings.Join(where, ", ")
}

// lat writes a latency of p for a table, saying when it is a batch's.
func (p peer) lat(d time.Duration) string {
	if p.Batch > 1 && d > 0 {
		return fmtLat(d) + " per batch"
	}
	return fmtLat(d)
}

// allotEnvoyMethod explains the allot envoy-ratelimit case in the method,
// if it ran.
func allotEnvoyMethod(peers []peer) string {
	for _, p := range peers {
		if p.Name == allotEnvoyPeer {
			return fmt.Sprintf(" `%s` is the same binary run as `allot envoy-ratelimit`, standalone (no etcd, no coordinator), with envoyproxy/ratelimit's environment and configuration directory as the envoy case gets them, plus `ALLOT_STORE_TIMEOUT=%s` (allot's own variable, given to both; the original ignores it).", allotEnvoyPeer, envoyStoreTimeout)
		}
	}
	return ""
}

// batchMethod explains the batched allot drivers in the method, if any ran.
func batchMethod(peers []peer) string {
	var s string
	for _, p := range peers {
		switch {
		case p.Transport == "client":
			s += fmt.Sprintf(" `%s` makes one decision per call too, through allot's Go client, which merges the calls its goroutines make at the same time into DecideBatch RPCs: latency is each caller's, merging included.", p.Name)
		case p.Batch > 1:
			s += fmt.Sprintf(" `%s` makes %d decisions per call (one DecideBatch RPC): its decisions are counted one by one, but its p50 and p99 are those of the whole batch, and its concurrency is batches in flight (%d decisions each).", p.Name, p.Batch, p.Batch)
		}
	}
	return s
}

// batchRatioNote says what the batched allot drivers' rows compare, if any
// ran.
func batchRatioNote(allot []peer) string {
	var names []string
	batch := ""
	for _, a := range allot {
		if a.Transport == "client" || a.Batch > 1 {
			names = append(names, "`"+a.Name+"`")
		}
		if a.Batch > 1 {
			batch = a.Name
		}
	}
	if len(names) == 0 {
		return ""
	}
	s := fmt.Sprintf(" %s use allot's batched gRPC API (`DecideBatch`, one Redis round trip per batch): against Envoy's ratelimit and redis_rate they compare **different APIs** — Envoy sends one RLS `ShouldRateLimit` per HTTP request and cannot merge them, so these rows say what a Go service calling allot gets, not what Envoy in front of allot would — and against gubernator, whose `GetRateLimits` also takes many requests per call, they compare batched allot with gubernator driven one request per call here.",
		strings.Join(names, " and "))
	if batch != "" {
		s += fmt.Sprintf(" `%s`'s p99 is a whole batch's, so its p99 ratios are left out (—).", batch)
	}
	return s
}

// bestExactGRPC is the allot driver through allot.v1.Limiter (unary,
// client, raw batch) on the exact limit with the highest median decisions
// per second, and where.
func bestExactGRPC(cells map[cellKey]cell, allot []peer, conc []int) (name string, at int, rate float64) {
	for _, a := range allot {
		if a.Mode != modeExact || (a.Transport != "grpc" && a.Transport != "client" && a.Transport != "batch") {
			continue
		}
		for _, c := range conc {
			if x, ok := cells[cellKey{a.Name, c}]; ok && x.Rate > rate {
				name, at, rate = a.Name, c, x.Rate
			}
		}
	}
	return name, at, rate
}
