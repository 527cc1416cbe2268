package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// benchLimit is the limit every peer enforces on every key: generous enough
// that nothing is denied. allot's script takes it as T = 1 µs, B = 10^6.
const (
	benchRate  = 1_000_000
	benchBurst = 1_000_000
)

// redisBench runs redis-benchmark with allot's single-key GCRA script by
// EVALSHA (KEYS[1] a random one of tenants keys; ARGV T µs, B, cost) at conc
// clients and pipeline depth pipe, n requests, and parses its CSV line.
type redisBench struct {
	bin  string
	addr string
	sha  string
	keys int
}

// benchRun is one redis-benchmark result.
type benchRun struct {
	requests int
	rps      float64
	p50, p99 time.Duration
	// cpu is redis-benchmark's own user + system CPU time.
	cpu time.Duration
}

func (b redisBench) args(conc, pipe, n int) []string {
	host, port := b.addr, ""
	if i := strings.LastIndexByte(b.addr, ':'); i >= 0 {
		host, port = b.addr[:i], b.addr[i+1:]
	}
	return []string{
		"-h", host, "-p", port, "-c", strconv.Itoa(conc), "-P", strconv.Itoa(pipe),
		"-n", strconv.Itoa(n), "-r", strconv.Itoa(b.keys), "--csv", "--precision", "3",
		"EVALSHA", b.sha, "1", "key:__rand_int__", "1", strconv.Itoa(benchBurst), "1",
	}
}

// command is the command line as a person would type it (for the report).
func (b redisBench) command(conc, pipe int) string {
	a := b.args(conc, pipe, 0)
	for i := range a {
		switch a[i] {
		case "-n":
			a[i+1] = "N"
		case "-p":
			a[i+1] = "PORT"
		case "-c":
			a[i+1] = "CONC"
		case b.sha:
			a[i] = "$SHA"
		}
	}
	return "redis-benchmark " + strings.Join(a, " ")
}

func (b redisBench) run(ctx context.Context, conc, pipe, n int) (benchRun, error) {
	args := b.args(conc, pipe, n)
	cmd := exec.CommandContext(ctx, b.bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return benchRun{}, fmt.Errorf("%s %s: %w\n%s", b.bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	r, err := parseBenchCSV(string(out))
	r.requests = n
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, err
}

// parseBenchCSV reads redis-benchmark --csv output: a header line and one
// line per test with rps and latencies in milliseconds.
func parseBenchCSV(out string) (benchRun, error) {
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		return benchRun{}, fmt.Errorf("redis-benchmark csv: %w\n%s", err, out)
	}
	if len(recs) < 2 {
		return benchRun{}, fmt.Errorf("redis-benchmark csv: want a header and a result line, got:\n%s", out)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	last := recs[len(recs)-1]
	num := func(name string) (float64, error) {
		i, ok := col[name]
		if !ok || i >= len(last) {
			return 0, fmt.Errorf("redis-benchmark csv: no column %q in:\n%s", name, out)
		}
		v, err := strconv.ParseFloat(last[i], 64)
		if err != nil {
			return 0, fmt.Errorf("redis-benchmark csv: %s %q: %w", name, last[i], err)
		}
		return v, nil
	}
	var r benchRun
	if r.rps, err = num("rps"); err != nil {
		return r, err
	}
	p50, err := num("p50_latency_ms")
	if err != nil {
		return r, err
	}
	p99, err := num("p99_latency_ms")
	if err != nil {
		return r, err
	}
	r.p50 = time.Duration(math.Round(p50 * 1e6))
	r.p99 = time.Duration(math.Round(p99 * 1e6))
	if r.rps <= 0 {
		return r, fmt.Errorf("redis-benchmark csv: rps %v", r.rps)
	}
	return r, nil
}

// requestsFor returns how many requests take about d at rps, at least
// enough for every client to send a few pipelines. The count is a multiple
// of conc × pipe: otherwise the last pipelines overshoot it, and
// redis-benchmark may see every client gone with a count it does not expect
// and abort ("All clients disconnected").
func requestsFor(rps float64, d time.Duration, conc, pipe int) int {
	n := max(int(rps*d.Seconds()), conc*pipe*4, 1000)
	step := conc * pipe
	return (n + step - 1) / step * step
}
