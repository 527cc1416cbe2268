package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runCLIFor runs allot with args for at most d, then cancels it (as Ctrl-C
// would): a command that should have refused to start returns 0 instead of
// hanging the test.
func runCLIFor(t *testing.T, d time.Duration, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errb bytes.Buffer
	err := run(ctx, args, &out, &errb)
	code := exitCode(err, &errb)
	return out.String(), errb.String(), code
}

// Inconsistent flags stop a server command before it dials or serves
// anything: exit 2 and a message naming the flags. Before, the coordinator
// of the first case led and then failed every rebalance.
func TestInconsistentFlags(t *testing.T) {
	key := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(key, []byte("MDEyMzQ1Njc4OWFiY2RlZg==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty, spaced := filepath.Join(t.TempDir(), "empty"), filepath.Join(t.TempDir(), "spaced")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spaced, []byte("two words\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An etcd that would be dialled if validation came too late; the
	// listeners pick free ports.
	coord := []string{"coordinator", "--etcd", "http://127.0.0.1:1", "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--insecure-admin", "--insecure-reports", "--log-level", "error"}
	coordNoReports := []string{"coordinator", "--etcd", "http://127.0.0.1:1", "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--insecure-admin", "--log-level", "error"}
	pod := []string{"regional", "--region", "us-east", "--redis", "127.0.0.1:1", "--etcd", "http://127.0.0.1:1",
		"--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-level", "error"}
	cases := []struct {
		name   string
		args   []string
		env    map[string]string
		stderr string
	}{
		{"lease under two intervals (issue 12)", append(coord, "--rebalance-interval", "5s", "--session-ttl", "1s", "--lease", "7s"), nil,
			"--lease 7s: must be at least two --rebalance-interval (10s)"},
		{"lease from the environment", append(coord, "--rebalance-interval", "5s", "--session-ttl", "1s"), map[string]string{"ALLOT_LEASE": "7s"},
			"--lease 7s: must be at least two --rebalance-interval (10s)"},
		{"lease within a failover", append(coord, "--rebalance-interval", "2s", "--session-ttl", "3s", "--lease", "5s"), nil,
			"--lease 5s: must exceed --session-ttl + --rebalance-interval (5s)"},
		{"session ttl fraction", append(coord, "--session-ttl", "1500ms"), nil, "--session-ttl 1.5s: want whole seconds"},
		{"zero rebalance interval", append(coord, "--rebalance-interval", "0s"), nil, "--rebalance-interval 0s: must be positive"},
		{"tls key without cert", append(coord, "--tls-key", key), nil, "--tls-cert"},
		{"gossip key without gossip", append(pod, "--gossip-key-file", key), nil, "--gossip-key-file needs --gossip-listen"},
		{"gossip probe without gossip", append(pod, "--gossip-probe-interval", "1s"), nil, "--gossip-probe-interval needs --gossip-listen"},
		{"gossip join without gossip", append(pod, "--gossip-join", "10.0.0.2:7946"), nil, "--gossip-join needs --gossip-listen"},
		{"gossip advertise from the environment", pod, map[string]string{"ALLOT_GOSSIP_ADVERTISE": "10.0.0.1"}, "--gossip-advertise needs --gossip-listen"},
		{"pod tls key without cert", append(pod, "--tls-key", key), nil, "--tls-cert"},
		{"reports without authentication", coordNoReports, nil,
			"reports need authentication: --report-token-file FILE"},
		{"reports token and insecure", append(coord, "--report-token-file", key), nil,
			"--insecure-reports and --report-token-file: choose one"},
		{"reports token file missing", append(coordNoReports, "--report-token-file", "/nonexistent/token"), nil,
			"--report-token-file: open /nonexistent/token"},
		{"reports token file empty", append(coordNoReports, "--report-token-file", empty), nil,
			"--report-token-file " + empty + ": the file is empty"},
		{"reports token with spaces", append(coordNoReports, "--report-token-file", spaced), nil,
			"printable ASCII"},
		{"pod token file empty", append(pod, "--report-token-file", empty), nil,
			"--report-token-file " + empty + ": the file is empty"},
		{"dev zero interval", []string{"dev", "--rebalance-interval", "0s", "--http-listen", "127.0.0.1:0"}, nil, "rebalance-interval"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			_, errs, code := runCLIFor(t, 10*time.Second, c.args...)
			if code != 2 || !strings.Contains(errs, c.stderr) {
				t.Errorf("allot %v = exit %d, stderr %q; want exit 2 with %q", c.args, code, errs, c.stderr)
			}
		})
	}
}

// A short gossip probe interval is consistent: the probe timeout, which has
// no flag, follows it (before, any interval up to 250ms failed on a field
// the operator could not set).
func TestShortGossipProbeInterval(t *testing.T) {
	_, errs, code := runCLIFor(t, 2*time.Second, "regional", "--region", "us-east", "--redis", "127.0.0.1:1",
		"--etcd", "http://127.0.0.1:1", "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--gossip-listen", "127.0.0.1:0", "--gossip-probe-interval", "200ms", "--log-level", "error")
	if code != 0 {
		t.Errorf("allot regional --gossip-probe-interval 200ms = exit %d, stderr %q; want it to run until stopped", code, errs)
	}
}

// allot dev derives a consistent coordinator from any positive interval:
// a long one gets a longer lease instead of a coordinator that never
// allocates.
func TestDevLongInterval(t *testing.T) {
	_, errs, code := runCLIFor(t, 3*time.Second, "dev", "--rebalance-interval", "6s", "--http-listen", "127.0.0.1:0")
	if code != 0 {
		t.Errorf("allot dev --rebalance-interval 6s = exit %d, stderr %q; want it to run until stopped", code, errs)
	}
}

// A coordinator whose listeners verify client certificates (--tls-client-ca)
// needs no report token: the certificates authenticate reports. (The files
// here are not certificates: it gets past the report check, then fails on
// them.)
func TestMutualTLSAuthenticatesReports(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, n := range []string{"tls.crt", "tls.key", "ca.crt"} {
		f := filepath.Join(dir, n)
		if err := os.WriteFile(f, []byte("not PEM\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	_, errs, _ := runCLIFor(t, 10*time.Second, "coordinator", "--etcd", "http://127.0.0.1:1", "--grpc-listen", "127.0.0.1:0",
		"--http-listen", "127.0.0.1:0", "--insecure-admin", "--log-level", "error",
		"--tls-cert", files[0], "--tls-key", files[1], "--tls-client-ca", files[2])
	if strings.Contains(errs, "reports need authentication") || !strings.Contains(errs, "tls") {
		t.Errorf("allot coordinator --tls-client-ca without a report token: stderr %q; want it past the report check, failing on the files", errs)
	}
}
