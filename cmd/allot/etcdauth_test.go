package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/wait"
)

// enableEtcdAuth turns on etcd's authentication with a root user.
func enableEtcdAuth(t *testing.T, srv *etcdtest.Server, password string) {
	t.Helper()
	cli := srv.Client(t)
	ctx := context.Background()
	if _, err := cli.RoleAdd(ctx, "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserAdd(ctx, "root", password); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
}

// With etcd's authentication on, the coordinator connects with
// --etcd-username and --etcd-password-file and leads; a wrong password
// fails at start with etcd's reason; half the pair is a usage error.
func TestEtcdAuth(t *testing.T) {
	srv := etcdtest.Start(t)
	enableEtcdAuth(t, srv, "s3cret")
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	if err := os.WriteFile(good, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"coordinator", "--etcd", srv.Endpoint, "--insecure-admin", "--insecure-reports", "--session-ttl", "1s", "--log-level", "error"}

	_, errs, code := runCLI(t, append(base, "--grpc-listen", freeAddr(t), "--http-listen", freeAddr(t), "--etcd-username", "root", "--etcd-password-file", bad)...)
	if code != 1 || !strings.Contains(errs, "authentication failed") {
		t.Errorf("wrong etcd password: exit %d, stderr %q; want exit 1 with etcd's authentication error", code, errs)
	}
	for _, half := range [][]string{{"--etcd-username", "root"}, {"--etcd-password-file", good}} {
		_, errs, code := runCLI(t, append(base, half...)...)
		if code != 2 || !strings.Contains(errs, "needs --etcd-") {
			t.Errorf("allot %v: exit %d, stderr %q; want exit 2 naming the missing flag", half, code, errs)
		}
	}

	httpAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		var out, errb strings.Builder
		done <- run(ctx, append(base, "--grpc-listen", freeAddr(t), "--http-listen", httpAddr, "--etcd-username", "root", "--etcd-password-file", good), &out, &errb)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("allot coordinator: %v", err)
		}
	}()
	wait.Until(t, 15*time.Second, func() error {
		out, _, code := runCLI(t, "status", "--coordinator", "http://"+httpAddr)
		if code != 0 || !strings.Contains(out, ": leader;") {
			return fmt.Errorf("coordinator on an authenticated etcd not leading: %s", out)
		}
		return nil
	})
}
