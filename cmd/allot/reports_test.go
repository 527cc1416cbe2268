package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
)

// startRegional runs `allot regional` for us-east in-process until the test
// ends and returns its HTTP address.
func startRegional(t *testing.T, srv *etcdtest.Server, redisAddr string, extra ...string) string {
	t.Helper()
	httpAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	args := append([]string{"regional", "--region", "us-east", "--redis", redisAddr, "--etcd", srv.Endpoint,
		"--grpc-listen", freeAddr(t), "--http-listen", httpAddr, "--report-interval", "200ms", "--log-level", "error"}, extra...)
	go func() {
		var out, errb strings.Builder
		done <- run(ctx, args, &out, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("allot regional: %v", err)
		}
	})
	return httpAddr
}

// reportsTotal reads allot_reports_total{result} from a pod's /metrics.
func reportsTotal(httpAddr, result string) (float64, error) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "allot_reports_total{") && strings.Contains(line, `result="`+result+`"`) {
			return strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		}
	}
	return 0, nil
}

// The region token, end to end through the CLI: a coordinator started with
// --report-token-file takes the reports of a pod with the same file and
// refuses those of a pod with another token or none.
func TestReportTokenFiles(t *testing.T) {
	srv := etcdtest.Start(t)
	rs := redistest.Start(t)
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "report-token"), filepath.Join(dir, "other-token")
	if err := os.WriteFile(good, []byte("r3gion-t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("guess\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := startCoordinatorOn(t, srv, "--insecure-admin", "--report-token-file", good)
	if _, errs, code := runCLI(t, "policy", "apply", "-f", "../../deploy/policy.example.yaml", "--coordinator", url); code != 0 {
		t.Fatalf("policy apply: exit %d: %s", code, errs)
	}
	pods := []struct {
		name   string
		args   []string
		env    bool   // ALLOT_REPORT_TOKEN_FILE=good (last: the variable stays set)
		result string // the result its reports get
	}{
		{"same token", []string{"--pod", "a", "--report-token-file", good}, false, "accepted"},
		{"other token", []string{"--pod", "c", "--report-token-file", bad}, false, "failed"},
		{"no token", []string{"--pod", "d"}, false, "failed"},
		{"same token from the environment", []string{"--pod", "b"}, true, "accepted"},
	}
	addrs := make([]string, len(pods))
	for i, p := range pods {
		if p.env {
			t.Setenv("ALLOT_REPORT_TOKEN_FILE", good)
		}
		addrs[i] = startRegional(t, srv, rs.Addr, p.args...)
		// Serving: it has read its flags and environment.
		wait.Until(t, 10*time.Second, func() error { _, err := reportsTotal(addrs[i], "accepted"); return err })
	}
	for i, p := range pods {
		wait.Until(t, 20*time.Second, func() error {
			n, err := reportsTotal(addrs[i], p.result)
			if err == nil && n < 2 {
				err = fmt.Errorf("pod %q: %v reports %s, want 2", p.name, n, p.result)
			}
			return err
		})
		other := "failed"
		if p.result == "failed" {
			other = "accepted"
		}
		if n, err := reportsTotal(addrs[i], other); err != nil || n != 0 {
			t.Errorf("pod %q: %v reports %s (%v), want none", p.name, n, other, err)
		}
	}
}
