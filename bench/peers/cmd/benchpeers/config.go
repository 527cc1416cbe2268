package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allot-dev/allot/bench/peers/internal/peerkit"
)

// Peer groups selectable with --peers.
const (
	groupPhysical   = "physical"
	groupAllot      = "allot"
	groupEnvoy      = "envoy"
	groupRedisRate  = "redis_rate"
	groupGubernator = "gubernator"
)

var allGroups = []string{groupPhysical, groupAllot, groupEnvoy, groupRedisRate, groupGubernator}

// The pinned version of Envoy's reference service (peerkit's, shared with
// envoydiff).
const (
	envoyModule  = peerkit.EnvoyModule
	envoyVersion = peerkit.EnvoyVersion
)

// config is one run's settings.
type config struct {
	// repo is the root of allot's main module.
	repo string
	// out receives raw.txt and report.md.
	out string
	// rounds: every case runs once per round, in a rotated order.
	rounds int
	// warmup and duration of each case (the load runs warmup+duration; only
	// calls that complete inside the duration are counted).
	warmup, duration time.Duration
	// conc are the concurrency levels: goroutines, one call in flight each.
	conc []int
	// groups selects peers (see allGroups).
	groups []string
	// conns is the number of gRPC connections each client spreads its
	// goroutines over.
	conns int
	// tenants is the number of keys the load rotates over.
	tenants int
	// pipeline is redis-benchmark's -P for the pipelined physical limit.
	pipeline int
	// batch is the decisions per DecideBatch RPC of allot-batch-exact.
	batch int
	// envoyBin is the ratelimit service binary; empty: cached or installed.
	envoyBin string
	// allotRev builds allot from `git archive REV` instead of the work tree.
	allotRev string
	// keep leaves the work directory (logs, binaries, configs) in place.
	keep  bool
	quick bool
	// profile, when set, receives a CPU profile of allot regional over
	// the measured window of each of its cases.
	profile string
	// args is the command line as given, for the report.
	args []string
}

func (c config) Validate() error {
	switch {
	case c.repo == "":
		return errors.New("--repo: allot's repository root not found; run from inside it or pass --repo")
	case c.out == "":
		return errors.New("--out: required")
	case c.rounds < 1:
		return fmt.Errorf("--rounds %d: want at least 1", c.rounds)
	case c.warmup < 0:
		return fmt.Errorf("--warmup %v: want ≥ 0", c.warmup)
	case c.duration < 100*time.Millisecond:
		return fmt.Errorf("--duration %v: want at least 100ms", c.duration)
	case len(c.conc) == 0:
		return errors.New("--conc: want at least one level")
	case c.conns < 1:
		return fmt.Errorf("--conns %d: want at least 1", c.conns)
	case c.tenants < 1:
		return fmt.Errorf("--tenants %d: want at least 1", c.tenants)
	case c.pipeline < 2:
		return fmt.Errorf("--pipeline %d: want at least 2", c.pipeline)
	case c.batch < 2 || c.batch > maxDecideBatch:
		return fmt.Errorf("--batch %d: want 2 to %d (allot regional's cap on one DecideBatch)", c.batch, maxDecideBatch)
	}
	for _, n := range c.conc {
		if n < 1 || n > 4096 {
			return fmt.Errorf("--conc %d: want 1 to 4096", n)
		}
	}
	for _, g := range c.groups {
		if !slices.Contains(allGroups, g) {
			return fmt.Errorf("--peers %q: want some of %s", g, strings.Join(allGroups, ","))
		}
	}
	return nil
}

// maxDecideBatch is allot regional's cap on the requests of one DecideBatch.
const maxDecideBatch = 256

func (c config) has(group string) bool { return slices.Contains(c.groups, group) }

const usageText = `Usage: benchpeers [flags]

Measures, in one run on this machine, allot end to end (allot regional as its
own process: gRPC Decide, Envoy RLS ShouldRateLimit, HTTP POST /v1/decide;
exact and leased limits; and, on the exact limit, Decide through allot's Go
client with its default coalescing and raw DecideBatch RPCs of --batch
decisions; and allot envoy-ratelimit, standalone, with Envoy's ratelimit's
environment and configuration) against the physical limit of its Redis
(redis-benchmark running allot's GCRA script by EVALSHA, unpipelined and
pipelined) and against peers on the same Redis: Envoy's reference ratelimit
service, go-redis/redis_rate/v10 behind a minimal RLS server, and gubernator v2
(in its own memory). Writes raw.txt (Go benchmark format; compare with
benchstat -col /peer) and report.md to --out. Progress goes to stderr.

Needs redis-server and redis-benchmark on PATH and the go command (it builds
allot, and installs Envoy's ratelimit into the user cache directory unless a
binary of the pinned version is cached or given with --envoy-bin).

Examples:
  make bench-peers
  make bench-peers ARGS='--allot-rev HEAD'     # allot as committed, not the work tree
                                               # (the allot packages the harness links must match it)
  cd bench/peers && GOFLAGS=-mod=mod go run ./cmd/benchpeers --quick
  cd bench/peers && GOFLAGS=-mod=mod go run ./cmd/benchpeers --peers physical,allot,envoy --conc 16 --rounds 2
  cd bench/peers && GOFLAGS=-mod=mod go run ./cmd/benchpeers --out /tmp/peers --duration 10s
  benchstat -col /peer bench/results/peers/raw.txt   # go install golang.org/x/perf/cmd/benchstat@latest

Flags:
`

// parseFlags reads the command line; --quick shortens every phase unless a
// flag sets it explicitly.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	c := config{args: args}
	fs := flag.NewFlagSet("benchpeers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	var conc, groups string
	fs.StringVar(&c.repo, "repo", findRepo(), "root of allot's repository (found from the working directory)")
	fs.StringVar(&c.out, "out", "", "directory for raw.txt and report.md (default: REPO/bench/results/peers)")
	// Six short rounds rather than three long ones: the same wall time,
	// medians of six resist the shared machine's bursts better, and
	// benchstat needs at least 4 samples for a p-value, 6 for a confidence
	// interval.
	fs.IntVar(&c.rounds, "rounds", 6, "rounds; each runs every peer × concurrency once, in a rotated order")
	fs.DurationVar(&c.warmup, "warmup", 500*time.Millisecond, "warm-up of each case, not counted")
	fs.DurationVar(&c.duration, "duration", 2*time.Second, "measured time of each case")
	fs.StringVar(&conc, "conc", "1,16,64", "concurrency levels: goroutines with one call in flight each (redis-benchmark: -c)")
	fs.StringVar(&groups, "peers", strings.Join(allGroups, ","), "what to run, comma-separated: "+strings.Join(allGroups, ", "))
	fs.IntVar(&c.conns, "conns", 2, "gRPC connections per server, shared round-robin by the goroutines")
	fs.IntVar(&c.tenants, "tenants", 1024, "tenants (keys) the load rotates over")
	fs.IntVar(&c.pipeline, "pipeline", 64, "redis-benchmark -P of the pipelined physical limit")
	fs.IntVar(&c.batch, "batch", 64, "decisions per DecideBatch RPC of allot-batch-exact (the Go client's default MaxBatch)")
	fs.StringVar(&c.envoyBin, "envoy-bin", "", "Envoy ratelimit service binary (default: cached, else go install "+envoyModule+"/src/service_cmd@"+envoyVersion+" into the user cache directory)")
	fs.StringVar(&c.allotRev, "allot-rev", "", "build allot from this git revision (git archive) instead of the work tree; the allot packages linked into the harness (client, proto, gcra) must be the same there as in the work tree")
	fs.BoolVar(&c.keep, "keep", false, "keep the work directory (logs, binaries, configs)")
	fs.StringVar(&c.profile, "profile", "", "directory for a CPU profile of allot regional over each of its cases' measured window (PEER-cCONC-rROUND.pprof; go tool pprof reads them); empty: none")
	fs.BoolVar(&c.quick, "quick", false, "a short run (about 2 min): 1 round, 0.5s warm-up, 1.5s per case")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, usageError{err}
	}
	if fs.NArg() > 0 {
		return c, usageError{fmt.Errorf("unexpected arguments %q (flags only; see --help)", fs.Args())}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.quick {
		if !set["rounds"] {
			c.rounds = 1
		}
		if !set["warmup"] {
			c.warmup = 500 * time.Millisecond
		}
		if !set["duration"] {
			c.duration = 1500 * time.Millisecond
		}
	}
	var err error
	if c.conc, err = parseInts(conc); err != nil {
		return c, usageError{fmt.Errorf("--conc: %w", err)}
	}
	c.groups = splitList(groups)
	if c.out == "" && c.repo != "" {
		c.out = filepath.Join(c.repo, "bench", "results", "peers")
	}
	if err := c.Validate(); err != nil {
		return c, usageError{err}
	}
	return c, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q: not a whole number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// findRepo walks up from the working directory to allot's main module.
func findRepo() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/allot-dev/allot\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
