package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"go.uber.org/goleak"

	"github.com/allot-dev/allot/deploy/images"
)

// labelKey marks every container and network this package creates.
const labelKey = "dev.allot.e2e"

var (
	// imgs are the images of the current content (set by TestMain).
	imgs images.Set
	// docker is the raw engine client, for faults testcontainers does not
	// offer (network disconnect, kill).
	docker *client.Client
	// unavailable is why the suite cannot run (no engine, failed build)
	// under -short without CI; empty when it can.
	unavailable string
	// skipped counts skipped tests; with CI set, any fails the run.
	skipped atomic.Int32
	// outDir is where the report, plots and container logs go.
	outDir string
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	// Testcontainers' reaper image cannot be pulled here: label and sweep
	// instead. The published ports are reached on loopback.
	_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	_ = os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	_ = os.Unsetenv("TESTCONTAINERS_HUB_IMAGE_NAME_PREFIX")
	// Its per-container lines drown the test's own; failures carry their
	// errors, and every container's log is kept in out/logs.
	tclog.SetDefault(tclog.NewNoopLogger())
	ci := os.Getenv("CI") != ""
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	outDir = filepath.Join(wd, "out")

	unlock, err := lockRuns()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	flag.Parse()
	if reason := prepare(ctx); reason != "" {
		// A missing engine or a failed image build fails the run; only
		// `go test -short` (never CI) may leave the suite out, loudly.
		if ci || !testing.Short() {
			fmt.Fprintf(os.Stderr, "\ne2e: FATAL: %s\n(the e2e suite needs a Docker engine; pass -short to leave it out on a machine without one)\n\n", reason)
			return 1
		}
		unavailable = reason
		fmt.Fprintf(os.Stderr, "\n%s\ne2e: SKIPPING THE WHOLE E2E SUITE: %s\n%s\n\n",
			strings.Repeat("!", 78), reason, strings.Repeat("!", 78))
	}
	code := m.Run()
	if docker != nil {
		sweep(context.Background(), os.Stderr)
		_ = docker.Close()
	}
	if code == 0 {
		// The load generator's goroutines and the gRPC connections to
		// the pods must be gone; the engine client's idle HTTP
		// connections are the library's.
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: goroutines leaked: %v\n", err)
			code = 1
		}
	}
	if ci && skipped.Load() > 0 && code == 0 {
		fmt.Fprintf(os.Stderr, "e2e: FATAL (CI is set): %d test(s) skipped\n", skipped.Load())
		return 1
	}
	return code
}

// prepare connects to the engine, sweeps leftovers of earlier runs and makes
// sure the images exist. It returns why the suite cannot run, or "".
func prepare(ctx context.Context) string {
	dc, err := client.New(client.FromEnv)
	if err != nil {
		return fmt.Sprintf("docker client: %v", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = dc.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
	cancel()
	if err != nil {
		_ = dc.Close()
		return fmt.Sprintf("no Docker engine answers (%v); start one, or run `make test` on a machine with Docker", err)
	}
	docker = dc
	sweep(ctx, os.Stderr)
	start := time.Now()
	set, err := images.Ensure(ctx, images.Config{Log: os.Stderr, Docker: dc})
	if err != nil {
		return fmt.Sprintf("images: %v", err)
	}
	imgs = set
	fmt.Fprintf(os.Stderr, "e2e: images %s, %s, %s ready in %v\n", set.Allot, set.Etcd, set.Redis, time.Since(start).Round(time.Millisecond))
	return ""
}

// requireDocker skips t, loudly, when the suite cannot run (only possible
// under -short without CI: otherwise TestMain fails first), and counts skips.
func requireDocker(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		if t.Skipped() {
			skipped.Add(1)
		}
	})
	if unavailable != "" {
		t.Skipf("E2E NOT RUN: %s", unavailable)
	}
}

// lockRuns serialises e2e runs of every process on this machine (two
// topologies at once would not fit two cores, and each sweeps leftovers).
func lockRuns() (func(), error) {
	path := filepath.Join(os.TempDir(), "allot-e2e.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: another e2e run holds %s; waiting for it\n", path)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// sweep removes every container and network labelled by this package. Runs
// are serialised by lockRuns, so whatever it finds is left over.
func sweep(ctx context.Context, log *os.File) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	f := make(client.Filters).Add("label", labelKey)
	cs, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err == nil {
		for _, c := range cs.Items {
			if _, err := docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
				fmt.Fprintf(log, "e2e: sweep container %s: %v\n", c.ID[:12], err)
			}
		}
		if len(cs.Items) > 0 {
			fmt.Fprintf(log, "e2e: swept %d container(s)\n", len(cs.Items))
		}
	}
	ns, err := docker.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err == nil {
		for _, n := range ns.Items {
			if _, err := docker.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil {
				fmt.Fprintf(log, "e2e: sweep network %s: %v\n", n.Name, err)
			}
		}
		if len(ns.Items) > 0 {
			fmt.Fprintf(log, "e2e: swept %d network(s)\n", len(ns.Items))
		}
	}
}
