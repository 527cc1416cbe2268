package main

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// machine describes where the run happened.
type machine struct {
	CPU      string
	Cores    int
	MemGiB   float64
	Kernel   string
	Go       string
	Redis    string
	LoadPre  string
	LoadPost string
	// LoadRounds is the 1-minute load average at the start of each round.
	LoadRounds []string
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memGiB() float64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / (1 << 20)
		}
	}
	return 0
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return runtime.GOOS + " " + strings.TrimSpace(string(b))
}

// loadAvg1 returns the 1-minute load average.
func loadAvg1() string {
	a, _, _ := strings.Cut(loadAvg(), " ")
	return a
}

// loadAvg returns the 1, 5 and 15 minute load averages as "a / b / c".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return f[0] + " / " + f[1] + " / " + f[2]
}

// redisVersion returns "7.0.15" from redis-server --version.
func redisVersion(ctx context.Context, bin string) string {
	out, err := runCmd(ctx, "", nil, bin, "--version")
	if err != nil {
		return "unknown"
	}
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(out)
}

func goVersion(ctx context.Context) string {
	out, err := runCmd(ctx, "", nil, "go", "version")
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimPrefix(strings.TrimSpace(out), "go version ")
}

// depVersion returns the version of module path linked into this binary.
func depVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "unknown"
}
