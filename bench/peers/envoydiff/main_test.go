package envoydiff

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/allot-dev/allot/bench/peers/internal/peerkit"
)

// bins are the two binaries under test, set by TestMain.
var bins struct {
	envoy, envoyVersion string
	allot               string
	repo                string // root of allot's main module
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	work, err := os.MkdirTemp("", "envoydiff-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "envoydiff: %v\n", err)
		return 1
	}
	defer os.RemoveAll(work)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := setup(ctx, work); err != nil {
		// Never a skip: a test that cannot run the original fails.
		fmt.Fprintf(os.Stderr, "envoydiff: FAIL: %v\n", err)
		return 1
	}
	return m.Run()
}

// setup finds allot's repository, installs (or reuses) the original's
// binary and builds allot's.
func setup(ctx context.Context, work string) error {
	repo, err := repoRoot()
	if err != nil {
		return err
	}
	bins.repo = repo
	start := time.Now()
	// The original, as cmd/benchpeers pins and caches it.
	bins.envoy, bins.envoyVersion, err = peerkit.EnvoyBinary(ctx, progress)
	if err != nil {
		return err
	}
	progress("envoyproxy/ratelimit %s: %s (%v)", bins.envoyVersion, bins.envoy, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	bins.allot = filepath.Join(work, "allot")
	progress("building allot (go build ./cmd/allot in %s, CGO_ENABLED=0)", repo)
	env := append(peerkit.WithoutGOFLAGS(), "CGO_ENABLED=0")
	if _, err := peerkit.RunCmd(ctx, repo, env, "go", "build", "-o", bins.allot, "./cmd/allot"); err != nil {
		return fmt.Errorf("build allot: %w", err)
	}
	progress("allot built: %s (%v)", bins.allot, time.Since(start).Round(time.Millisecond))
	return nil
}

// progress writes one line about a slow step on stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "envoydiff: "+format+"\n", args...)
}

// repoRoot is the directory of allot's main module, above this package.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/allot-dev/allot\n")) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of github.com/allot-dev/allot above %s", dir)
		}
	}
}
