package main

import (
	"bytes"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Microsecond
	}
	tests := []struct {
		name string
		lat  []time.Duration
		q    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", []time.Duration{7}, 0.99, 7},
		{"p50 of 1..100", hundred, 0.50, 50 * time.Microsecond},
		{"p99 of 1..100", hundred, 0.99, 99 * time.Microsecond},
		{"p100 of 1..100", hundred, 1, 100 * time.Microsecond},
		{"p50 of 1..3", hundred[:3], 0.50, 2 * time.Microsecond},
		{"p99 of 1..3", hundred[:3], 0.99, 3 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.lat, tt.q); got != tt.want {
				t.Errorf("percentile(%s, %v) = %v, want %v", tt.name, tt.q, got, tt.want)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := median(tt.xs); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.xs, got, tt.want)
		}
	}
}

// fixedRun is three rounds of allot's RLS against Envoy's ratelimit at one
// concurrency, and the physical limit: numbers chosen so every median and
// ratio is exact.
func fixedRun() report {
	ms := time.Millisecond
	res := func(p string, round int, decisions int64, p99 time.Duration) result {
		return result{Peer: p, Conc: 16, Round: round, Decisions: decisions, Elapsed: time.Second,
			P50: p99 / 4, P99: p99, RedisCalls: 1, ServerCPU: 1e6 / float64(decisions), RedisCPU: 10}
	}
	return report{
		Cfg: config{rounds: 3, warmup: time.Second, duration: time.Second, conc: []int{16}, conns: 2, tenants: 1024, pipeline: 64},
		Peers: []peer{
			{Name: "redis-benchmark-P1", Group: groupPhysical, Pipe: 1},
			{Name: "redis-benchmark-P64", Group: groupPhysical, Pipe: 64},
			{Name: "allot-rls-exact", Group: groupAllot, Transport: "rls", Mode: modeExact},
			{Name: "envoy-ratelimit", Group: groupEnvoy, Transport: "rls"},
		},
		Results: []result{
			res("allot-rls-exact", 1, 15_000, 4*ms),
			res("allot-rls-exact", 2, 12_000, 2*ms), // median decisions/s 15,000, median p99 3 ms
			res("allot-rls-exact", 3, 18_000, 3*ms),
			res("envoy-ratelimit", 1, 10_000, 6*ms), // median 10,000, p99 6 ms
			res("envoy-ratelimit", 2, 9_000, 7*ms),
			res("envoy-ratelimit", 3, 11_000, 5*ms),
			res("redis-benchmark-P1", 1, 40_000, ms),
			res("redis-benchmark-P64", 1, 60_000, ms), // the pipelined limit: allot is at 25 %
		},
	}
}

func TestAggregateAndRatios(t *testing.T) {
	rep := fixedRun()
	cells := aggregate(rep.Results)
	a, e := cells[cellKey{"allot-rls-exact", 16}], cells[cellKey{"envoy-ratelimit", 16}]
	if a.N != 3 || a.Rate != 15_000 || a.RateMin != 12_000 || a.RateMax != 18_000 || a.P99 != 3*time.Millisecond {
		t.Errorf("aggregate(allot) = %+v, want 3 rounds, 15,000/s (12,000–18,000), p99 3ms", a)
	}
	if got := ratio(a.Rate, e.Rate); got != 1.5 {
		t.Errorf("decisions/s ratio = %v, want 1.5", got)
	}
	if got := ratio(float64(a.P99), float64(e.P99)); got != 0.5 {
		t.Errorf("p99 ratio = %v, want 0.5", got)
	}
	if got := ratio(1, 0); !math.IsNaN(got) {
		t.Errorf("ratio(1, 0) = %v, want NaN", got)
	}
	limit, at := pipelinedLimit(cells, rep.Peers, rep.Cfg.conc)
	if limit != 60_000 || at != 16 {
		t.Errorf("pipelinedLimit = %v at %d, want 60000 at 16", limit, at)
	}

	var md bytes.Buffer
	writeMarkdown(&md, rep)
	for _, want := range []string{
		"| `allot-rls-exact` | 16 | 1.50× † / 0.50× † / 0.70× † |",               // allot ÷ envoy: rate, p99, CPU (76.7 ÷ 110 µs), rounds apart
		"| `allot-rls-exact` | 16 | 15,000 | 25 % | 38 % | 25 % |",               // ÷ 60,000, ÷ 40,000 and ÷ 60,000
		"| `allot-rls-exact` | 16 | 15,000 | 12,000–18,000 | 750 µs | 3.00 ms |", // every peer
		"**60,000 decisions/s**",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report.md lacks %q; got:\n%s", want, md.String())
		}
	}
	var raw bytes.Buffer
	writeRaw(&raw, rep)
	want := "BenchmarkPeers/peer=allot-rls-exact/conc=16\t15000\t66666.7 ns/op\t15000 decisions/s\t1000.0 p50-µs\t4000.0 p99-µs\t"
	if !strings.Contains(raw.String(), want) {
		t.Errorf("raw.txt lacks %q; got:\n%s", want, raw.String())
	}
}

// TestBatchedPeers adds allot's two batched drivers to fixedRun: the raw
// batch's latencies are a batch's (units, tables, no p99 ratio), its
// decisions are counted one by one, and both enter the ratio and
// physical-limit tables.
func TestBatchedPeers(t *testing.T) {
	rep := fixedRun()
	rep.Cfg.batch = 64
	rep.HarnessVersion = "0123456789ab (clean)"
	rep.Machine.Cores = 2
	rep.Peers = append(rep.Peers,
		peer{Name: "allot-client-exact", Group: groupAllot, Transport: "client", Mode: modeExact},
		peer{Name: "allot-batch-exact", Group: groupAllot, Transport: "batch", Mode: modeExact, Batch: 64},
	)
	ms := time.Millisecond
	for round := 1; round <= 3; round++ {
		rep.Results = append(rep.Results,
			result{Peer: "allot-client-exact", Conc: 16, Round: round, Decisions: 30_000, Elapsed: time.Second,
				P50: ms, P99: 2 * ms, ServerCPU: 20, RedisCPU: 10, ClientCPU: 20},
			result{Peer: "allot-batch-exact", Conc: 16, Round: round, Decisions: 45_000, Elapsed: time.Second,
				P50: 8 * ms, P99: 20 * ms, ServerCPU: 10, RedisCPU: 6, ClientCPU: 4},
		)
	}
	var md bytes.Buffer
	writeMarkdown(&md, rep)
	for _, want := range []string{
		"| `allot-batch-exact` | 16 | 45,000 | 45,000–45,000 | 8.00 ms per batch | 20.0 ms per batch |", // every peer
		"| `allot-client-exact` | 16 | 30,000 | 30,000–30,000 | 1.00 ms | 2.00 ms |",
		"| `allot-batch-exact` | 16 | 4.50× † / — / 0.15× † |",        // ÷ envoy: rate, no p99, CPU 16 ÷ 110 µs
		"| `allot-client-exact` | 16 | 3.00× † / 0.33× † / 0.27× † |", // 30 ÷ 110 µs
		"| `allot-batch-exact` | 16 | 45,000 | 75 % | 112 % | 75 % |",
		"`allot-batch-exact` at concurrency 16, 45,000 decisions/s, **75 % of the pipelined physical limit**",
		"(20 µs) bounds it at 100,000 decisions/s",
		"**different APIs**",
		"0123456789ab (clean)",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report.md lacks %q; got:\n%s", want, md.String())
		}
	}
	var raw bytes.Buffer
	writeRaw(&raw, rep)
	for _, want := range []string{
		"BenchmarkPeers/peer=allot-batch-exact/conc=16\t45000\t22222.2 ns/op\t45000 decisions/s\t8000.0 p50-batch-µs\t20000.0 p99-batch-µs\t",
		"BenchmarkPeers/peer=allot-client-exact/conc=16\t30000\t33333.3 ns/op\t30000 decisions/s\t1000.0 p50-µs\t2000.0 p99-µs\t",
	} {
		if !strings.Contains(raw.String(), want) {
			t.Errorf("raw.txt lacks %q; got:\n%s", want, raw.String())
		}
	}
}

// TestAllotEnvoyPair adds allot envoy-ratelimit to fixedRun: its rows sit
// beside envoy-ratelimit's with a ratio line at each concurrency, it enters
// allot ÷ peer and the physical-limit table as an allot case, and its
// fallbacks are reported.
func TestAllotEnvoyPair(t *testing.T) {
	rep := fixedRun()
	rep.Peers = append(rep.Peers, peer{Name: allotEnvoyPeer, Group: groupAllot, Transport: "rls", Mode: modeExact})
	ms := time.Millisecond
	for round, d := range []int64{18_000, 20_000, 22_000} { // median 20,000/s: 2× envoy's 10,000
		rep.Results = append(rep.Results, result{Peer: allotEnvoyPeer, Conc: 16, Round: round + 1, Decisions: d, Elapsed: time.Second,
			P50: ms, P99: 3 * ms, RedisCalls: 1, ServerCPU: 45, RedisCPU: 10, ClientCPU: 20, Fallbacks: 2})
	}
	var md bytes.Buffer
	writeMarkdown(&md, rep)
	got := md.String()
	for _, want := range []string{
		"## allot envoy-ratelimit against envoyproxy/ratelimit",
		// envoy: median 10,000/s, p50 1.5 ms, p99 6 ms, server 100 µs + Redis 10 µs
		"| 16 | `envoy-ratelimit` | 10,000 | 9,000–11,000 | 1.50 ms | 6.00 ms | 1.00 | 100 + 10 + 0 = 110 | 0 |\n" +
			"| 16 | `allot-envoy-ratelimit` | 20,000 | 18,000–22,000 | 1.00 ms | 3.00 ms | 1.00 | 45 + 10 + 20 = 75 | 0; **6 fallback decisions** |\n" +
			"| 16 | **allot envoy-ratelimit vs envoyproxy/ratelimit** | **2.00×** † | | 0.67× | 0.50× † | | server 0.45×, server + Redis 0.50× †, total 0.68× | |\n",
		"| `allot-envoy-ratelimit` | 16 | 2.00× † / 0.50× † / 0.50× † |", // allot ÷ peer
		"| `allot-envoy-ratelimit` | 16 | 20,000 | 33 % | 50 % | 33 % |", // ÷ 60,000, ÷ 40,000, ÷ 60,000
		"6 in `allot-envoy-ratelimit` at concurrency 16",
		"`allot-envoy-ratelimit` is the same binary run as `allot envoy-ratelimit`",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report.md lacks %q; got:\n%s", want, got)
		}
	}
	if i, j := strings.Index(got, "| `allot-envoy-ratelimit` | 16 | 20,000 | 18,000–22,000"), strings.Index(got, "| `envoy-ratelimit` | 16 | 10,000 | 9,000–11,000"); i < 0 || j < 0 {
		t.Errorf("every-peer table lacks allot-envoy-ratelimit (%d) or envoy-ratelimit (%d)", i, j)
	}

	// Without the original, no pair section.
	rep.Peers = slices.DeleteFunc(rep.Peers, func(p peer) bool { return p.Name == "envoy-ratelimit" })
	md.Reset()
	writeMarkdown(&md, rep)
	if strings.Contains(md.String(), "## allot envoy-ratelimit against envoyproxy/ratelimit") {
		t.Error("report.md has the pair section without envoy-ratelimit")
	}
}

func TestApart(t *testing.T) {
	tests := []struct {
		aMin, aMax, bMin, bMax float64
		want                   int
	}{
		{12, 18, 9, 11, 1},
		{1, 2, 3, 4, -1},
		{10, 12, 11, 13, 0},
		{10, 12, 12, 13, 0}, // touching is overlapping
	}
	for _, tt := range tests {
		if got := apart(tt.aMin, tt.aMax, tt.bMin, tt.bMax); got != tt.want {
			t.Errorf("apart(%v–%v, %v–%v) = %d, want %d", tt.aMin, tt.aMax, tt.bMin, tt.bMax, got, tt.want)
		}
	}
	for rounds, want := range map[int]string{1: "", 3: "1 in 10", 6: "1 in 462"} {
		if got := chance(rounds); !strings.Contains(got, want) {
			t.Errorf("chance(%d) = %q, want it to say %q", rounds, got, want)
		}
	}
}

func TestMakeArgs(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--quick"}, " ARGS='--quick'"},
		{[]string{"--out", "/tmp/x", "--rounds", "2"}, " ARGS='--rounds 2'"},
		{[]string{"--out=/tmp/x", "--allot-rev", "HEAD"}, " ARGS='--allot-rev HEAD'"},
	}
	for _, tt := range tests {
		if got := makeArgs(config{args: tt.args}); got != tt.want {
			t.Errorf("makeArgs(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

func TestParseBenchCSV(t *testing.T) {
	out := `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"EVALSHA b78d 1 key:__rand_int__ 1 1000000 1","43956.04","0.312","0.056","0.271","0.495","0.647","2.111"
`
	r, err := parseBenchCSV(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.rps != 43956.04 || r.p50 != 271*time.Microsecond || r.p99 != 647*time.Microsecond {
		t.Errorf("parseBenchCSV = %+v, want 43956.04 rps, p50 271µs, p99 647µs", r)
	}
	if _, err := parseBenchCSV("All clients disconnected... aborting.\n"); err == nil {
		t.Error("parseBenchCSV(no result) = nil error, want an error")
	}
}

func TestParseRedisStats(t *testing.T) {
	tests := []struct {
		name        string
		info        string
		calls, usec int64
		cpu         time.Duration
	}{
		{
			name: "script: nested commands and admin commands left out",
			info: "# Commandstats\r\ncmdstat_time:calls=1000,usec=126,usec_per_call=0.13\r\ncmdstat_set:calls=1000,usec=500,usec_per_call=0.50\r\n" +
				"cmdstat_evalsha:calls=1000,usec=5581,usec_per_call=5.58\r\ncmdstat_info:calls=2,usec=42\r\ncmdstat_config|resetstat:calls=1,usec=112\r\n" +
				"# CPU\r\nused_cpu_sys:0.010000\r\nused_cpu_user:0.020500\r\nused_cpu_sys_children:1.000000\r\n",
			calls: 1000, usec: 5581, cpu: 30500 * time.Microsecond,
		},
		{
			name:  "no script: every data command",
			info:  "cmdstat_incrby:calls=10,usec=20\r\ncmdstat_expire:calls=10,usec=15\r\ncmdstat_client|setinfo:calls=4,usec=4\r\n",
			calls: 20, usec: 35,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseRedisStats(tt.info)
			if got.calls != tt.calls || got.usec != tt.usec || got.cpu != tt.cpu {
				t.Errorf("parseRedisStats = %+v, want calls %d usec %d cpu %v", got, tt.calls, tt.usec, tt.cpu)
			}
		})
	}
}

func TestRequestsFor(t *testing.T) {
	tests := []struct {
		rps        float64
		d          time.Duration
		conc, pipe int
		want       int
	}{
		{40_000, time.Second, 1, 1, 40_000},
		{40_000, time.Second, 16, 64, 40_960},  // rounded up to a multiple of 1024
		{100, time.Second, 64, 64, 16_384},     // at least 4 pipelines per client
		{10, time.Millisecond, 1, 1, 1000},     // at least 1000
		{150_001, time.Second, 3, 64, 150_144}, // multiple of 192
	}
	for _, tt := range tests {
		got := requestsFor(tt.rps, tt.d, tt.conc, tt.pipe)
		if got != tt.want || got%(tt.conc*tt.pipe) != 0 {
			t.Errorf("requestsFor(%v, %v, %d, %d) = %d, want %d (a multiple of %d)", tt.rps, tt.d, tt.conc, tt.pipe, got, tt.want, tt.conc*tt.pipe)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
	line := "4242 (allot (x) y) S 1 4242 4242 0 -1 4194560 1200 0 3 0 250 75 0 0 20 0 9 0 100 0 0\n"
	got, err := parseProcStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 325 * clockTick; got != want {
		t.Errorf("parseProcStat = %v, want %v (utime 250 + stime 75 ticks)", got, want)
	}
	if _, err := parseProcStat("4242 (short) S 1 2"); err == nil {
		t.Error("parseProcStat(short line) = nil error, want an error")
	}
	if _, err := procCPU(os.Getpid()); err != nil {
		t.Errorf("procCPU(self): %v", err)
	}
}
