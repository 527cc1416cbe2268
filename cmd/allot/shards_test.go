package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/shares"
)

func TestParseShard(t *testing.T) {
	host := func(h string, err error) func() (string, error) { return func() (string, error) { return h, err } }
	for _, c := range []struct {
		v, host string
		hostErr error
		want    int
		err     string
	}{
		{"0", "", nil, 0, ""},
		{"3", "", nil, 3, ""},
		{"-1", "", nil, 0, "--shard \"-1\""},
		{"two", "", nil, 0, "--shard \"two\""},
		{"from-hostname", "coord-2", nil, 2, ""},
		{"from-hostname", "allot-coordinator-11", nil, 11, ""},
		{"from-hostname", "coordinator", nil, 0, "does not end in a shard number"},
		{"from-hostname", "node-12345", nil, 0, "does not end in a shard number"},
		{"from-hostname", "", errors.New("no name"), 0, "no name"},
	} {
		got, err := parseShard(c.v, host(c.host, c.hostErr))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseShard(%q, host %q) = %d, %v; want an error with %q", c.v, c.host, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseShard(%q, host %q) = %d, %v; want %d", c.v, c.host, got, err, c.want)
		}
	}
}

// Two coordinator shards on one etcd: status on either lists both shards'
// leaders, shares of a tenant asked of the wrong shard is answered by the
// right one, and a coordinator started with another shard count exits
// naming the cluster's.
func TestShardsCLI(t *testing.T) {
	srv := etcdtest.Start(t)
	base := []string{"--insecure-reports", "--insecure-admin", "--shards", "2"}
	url0 := startCoordinatorOn(t, srv, append(base, "--shard", "0")...)
	url1 := startCoordinatorOn(t, srv, append(base, "--shard", "1")...)
	if _, errs, code := runCLI(t, "policy", "apply", "-f", "../../deploy/policy.example.yaml", "--coordinator", url0); code != 0 {
		t.Fatalf("policy apply: %s", errs)
	}
	for _, url := range []string{url0, url1} {
		wait.Until(t, 10*time.Second, func() error {
			out, _, code := runCLI(t, "status", "--coordinator", url)
			if code != 0 || !strings.Contains(out, "of 2\n") || !strings.Contains(out, strings.TrimPrefix(url0, "http://")) || !strings.Contains(out, strings.TrimPrefix(url1, "http://")) {
				return fmt.Errorf("status does not list both shards' leaders: %s", out)
			}
			return nil
		})
	}
	// A tenant of shard 1, with a budget so that its shard's leader
	// splits it without traffic.
	tenant := ""
	for i := 0; tenant == ""; i++ {
		if name := fmt.Sprintf("t%d", i); shares.ShardOf(name, 2) == 1 {
			tenant = name
		}
	}
	if _, errs, code := runCLI(t, "budget", "set", tenant, "--rate", "9/s", "--burst", "3", "--coordinator", url0); code != 0 {
		t.Fatalf("budget set: %s", errs)
	}
	wait.Until(t, 10*time.Second, func() error {
		out, errs, code := runCLI(t, "shares", tenant, "--coordinator", url0)
		if code != 0 || !strings.Contains(out, "(from leader of shard 1)") || !strings.Contains(out, "9/s") {
			return fmt.Errorf("shares %s via shard 0: exit %d: %s%s", tenant, code, out, errs)
		}
		return nil
	})
	// Another shard count: refused, naming the cluster's.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errb strings.Builder
	err := run(ctx, []string{"coordinator", "--etcd", srv.Endpoint, "--grpc-listen", freeAddr(t), "--http-listen", freeAddr(t),
		"--insecure-reports", "--insecure-admin", "--shards", "3", "--log-level", "error"}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "--shards 2") {
		t.Fatalf("a coordinator with --shards 3 on a 2-shard cluster: %v, want an error naming --shards 2", err)
	}
}
