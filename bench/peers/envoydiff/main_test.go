package envoydiff

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The original service, as cmd/benchpeers pins it (config.go there;
// TestPinnedVersion keeps the two equal).
const (
	envoyModule  = "github.com/envoyproxy/ratelimit"
	envoyVersion = "v1.4.1-0.20260122083618-3fb702589d36"
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
	bins.envoy, bins.envoyVersion, err = envoyBinary(ctx)
	if err != nil {
		return err
	}
	progress("envoyproxy/ratelimit %s: %s (%v)", bins.envoyVersion, bins.envoy, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	bins.allot = filepath.Join(work, "allot")
	progress("building allot (go build ./cmd/allot in %s, CGO_ENABLED=0)", repo)
	env := append(withoutGOFLAGS(), "CGO_ENABLED=0")
	if _, err := runCmd(ctx, repo, env, "go", "build", "-o", bins.allot, "./cmd/allot"); err != nil {
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

// envoyBinary returns the original's service binary of the pinned version,
// as cmd/benchpeers finds it: one installed earlier into the user cache (or
// the lead's /tmp/envoyrl), else installed now with go install.
func envoyBinary(ctx context.Context) (bin, version string, err error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "allot-bench-peers", "envoy-ratelimit-"+envoyVersion)
	for _, c := range []string{filepath.Join(dir, "service_cmd"), "/tmp/envoyrl/service_cmd"} {
		if v, err := binaryModuleVersion(ctx, c, envoyModule); err == nil && v == envoyVersion {
			return c, v, nil
		}
	}
	progress("installing %s/src/service_cmd@%s into %s (about a minute, once)", envoyModule, envoyVersion, dir)
	env := append(withoutGOFLAGS(), "GOBIN="+dir)
	if _, err := runCmd(ctx, "", env, "go", "install", envoyModule+"/src/service_cmd@"+envoyVersion); err != nil {
		return "", "", fmt.Errorf("go install Envoy's ratelimit: %w", err)
	}
	c := filepath.Join(dir, "service_cmd")
	v, err := binaryModuleVersion(ctx, c, envoyModule)
	if err != nil {
		return "", "", err
	}
	if v != envoyVersion {
		return "", "", fmt.Errorf("%s is %s %s, want %s", c, envoyModule, v, envoyVersion)
	}
	return c, v, nil
}

// binaryModuleVersion reads the version of module mod from a Go binary's
// build information (go version -m).
func binaryModuleVersion(ctx context.Context, bin, mod string) (string, error) {
	if _, err := os.Stat(bin); err != nil {
		return "", err
	}
	out, err := runCmd(ctx, "", nil, "go", "version", "-m", bin)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "mod" && f[1] == mod {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("%s: not a build of %s", bin, mod)
}

// withoutGOFLAGS is this process's environment without GOFLAGS (make
// passes -mod=mod for this module, which must not reach other modules).
func withoutGOFLAGS() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	return env
}

// runCmd runs a command to completion in dir and returns its combined
// output, with the output in the error when it fails.
func runCmd(ctx context.Context, dir string, env []string, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || len(out) > 0 {
			return string(out), fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return string(out), fmt.Errorf("%s %s: %w", bin, strings.Join(args, " "), err)
	}
	return string(out), nil
}

// TestPinnedVersion keeps this package's version of the original equal to
// cmd/benchpeers', so that both use (and cache) the same binary.
func TestPinnedVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "cmd", "benchpeers", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("const envoyModule = %q", envoyModule),
		fmt.Sprintf("const envoyVersion = %q", envoyVersion),
	} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("cmd/benchpeers/config.go does not hold %s: update envoydiff's pin with it", want)
		}
	}
}
