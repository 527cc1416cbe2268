// Package peerkit is what bench/peers' programs share: the pinned version
// of envoyproxy/ratelimit and how its binary is installed, running commands,
// and free loopback ports.
package peerkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The pinned version of Envoy's reference rate limit service.
const (
	EnvoyModule  = "github.com/envoyproxy/ratelimit"
	EnvoyVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

// EnvoyBinary returns the original's service binary of the pinned version:
// one installed earlier into the user cache directory (or /tmp/envoyrl),
// else one installed now with go install (about a minute, once), saying so
// through progress.
func EnvoyBinary(ctx context.Context, progress func(format string, args ...any)) (bin, version string, err error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "allot-bench-peers", "envoy-ratelimit-"+EnvoyVersion)
	for _, c := range []string{filepath.Join(dir, "service_cmd"), "/tmp/envoyrl/service_cmd"} {
		if v, err := BinaryModuleVersion(ctx, c, EnvoyModule); err == nil && v == EnvoyVersion {
			return c, v, nil
		}
	}
	progress("installing %s/src/service_cmd@%s into %s (about a minute, once)", EnvoyModule, EnvoyVersion, dir)
	env := append(WithoutGOFLAGS(), "GOBIN="+dir)
	if _, err := RunCmd(ctx, "", env, "go", "install", EnvoyModule+"/src/service_cmd@"+EnvoyVersion); err != nil {
		return "", "", fmt.Errorf("go install Envoy's ratelimit: %w", err)
	}
	c := filepath.Join(dir, "service_cmd")
	v, err := BinaryModuleVersion(ctx, c, EnvoyModule)
	if err != nil {
		return "", "", err
	}
	if v != EnvoyVersion {
		return "", "", fmt.Errorf("%s is %s %s, want %s", c, EnvoyModule, v, EnvoyVersion)
	}
	return c, v, nil
}

// BinaryModuleVersion reads the version of module mod from a Go binary's
// build information (go version -m).
func BinaryModuleVersion(ctx context.Context, bin, mod string) (string, error) {
	if _, err := os.Stat(bin); err != nil {
		return "", err
	}
	out, err := RunCmd(ctx, "", nil, "go", "version", "-m", bin)
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

// WithoutGOFLAGS is this process's environment without GOFLAGS: make sets
// -mod=mod for the bench/peers module, which must not reach the builds of
// other modules.
func WithoutGOFLAGS() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	return env
}

// RunCmd runs a command to completion in dir (env nil: this process's) and
// returns its combined output, with the output in the error when it fails.
func RunCmd(ctx context.Context, dir string, env []string, bin string, args ...string) (string, error) {
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

// FreeAddrs returns n distinct loopback addresses whose ports were free a
// moment ago.
func FreeAddrs(n int) ([]string, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	out := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}
