package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/wait"
)

// The ops listener serves probes, metrics and (with --pprof) profiles in
// plaintext, and nothing of the API: the status and admin API stay on the
// API listener behind its credentials.
func TestOpsListener(t *testing.T) {
	ops := freeAddr(t)
	startCoordinator(t, "--ops-listen", ops, "--pprof", "--insecure-admin")
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + ops + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wait.Until(t, 10*time.Second, func() error {
		if code, body := get("/readyz"); code != 200 {
			return fmt.Errorf("GET /readyz on the ops listener = %d %s", code, body)
		}
		return nil
	})
	for _, c := range []struct {
		path string
		code int
		body string
	}{
		{"/healthz", 200, ""},
		{"/metrics", 200, "allot_"},
		{"/debug/pprof/", 200, "goroutine"},
		{"/v1/status", 404, ""},
		{"/v1/budgets", 404, ""},
		{"/", 404, ""},
	} {
		if code, body := get(c.path); code != c.code || !strings.Contains(body, c.body) {
			t.Errorf("GET %s on the ops listener = %d (%.80q), want %d containing %q", c.path, code, body, c.code, c.body)
		}
	}
}

func TestPprofNeedsOpsListener(t *testing.T) {
	for _, cmd := range []string{"coordinator", "regional"} {
		args := []string{cmd, "--pprof"}
		if cmd == "regional" {
			args = append(args, "--region", "us-east")
		}
		_, errs, code := runCLI(t, args...)
		if code != 2 || !strings.Contains(errs, "--pprof needs --ops-listen") {
			t.Errorf("allot %v = exit %d, stderr %q; want exit 2 naming --ops-listen", args, code, errs)
		}
	}
}
