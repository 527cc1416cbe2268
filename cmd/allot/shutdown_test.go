package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
)

// loadUntilStopped runs the command args in process, sends requests (POST
// body to path when body is set, else GET) from four clients until it is
// interrupted, and checks that every request it answered was answered
// 200: its listeners drain before the components behind them stop, so no
// request fails for a component that went away. Requests after the
// listener closed are refused at connect; those are not failures.
func loadUntilStopped(t *testing.T, args []string, httpAddr, path, body string, ready func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var errb strings.Builder
	go func() {
		var out strings.Builder
		done <- run(ctx, args, &out, &errb)
	}()
	wait.Until(t, 30*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("allot %s exited before serving: %v\n%s", args[0], err, errb.String())
		default:
		}
		return ready()
	})
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	var served, refused atomic.Int64
	var mu sync.Mutex
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var resp *http.Response
				var err error
				if body != "" {
					resp, err = hc.Post("http://"+httpAddr+path, "application/json", strings.NewReader(body))
				} else {
					resp, err = hc.Get("http://" + httpAddr + path)
				}
				if err != nil {
					refused.Add(1)
					select { // (a closed port: do not spin)
					case <-stop:
						return
					case <-time.After(time.Millisecond):
					}
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%d %s", resp.StatusCode, b))
					mu.Unlock()
					continue
				}
				served.Add(1)
			}
		})
	}
	for served.Load() < 200 {
		<-time.After(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("allot %s: %v", args[0], err)
	}
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d answered requests failed while allot %s shut down, e.g. %s", len(failures), args[0], failures[0])
	}
	t.Logf("allot %s: %d requests answered 200 under load, %d refused once its listener closed, %d failed", args[0], served.Load(), refused.Load(), len(failures))
}

func get200(url string) func() error {
	return func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %d", url, resp.StatusCode)
		}
		return nil
	}
}

// allot regional, allot coordinator and allot dev, each shut down under
// load: no answered request fails.
func TestShutdownUnderLoad(t *testing.T) {
	decide := `{"descriptors":{"tenant":"t1"},"cost":1}`
	t.Run("regional", func(t *testing.T) {
		srv := etcdtest.Start(t)
		rs := redistest.Start(t)
		url := startCoordinatorOn(t, srv, "--insecure-admin", "--insecure-reports")
		if _, errs, code := runCLI(t, "policy", "apply", "-f", "../../deploy/policy.example.yaml", "--coordinator", url); code != 0 {
			t.Fatalf("policy apply: exit %d: %s", code, errs)
		}
		httpAddr := freeAddr(t)
		args := []string{"regional", "--region", "us-east", "--redis", rs.Addr, "--etcd", srv.Endpoint,
			"--grpc-listen", freeAddr(t), "--http-listen", httpAddr, "--report-interval", "200ms", "--log-level", "error"}
		loadUntilStopped(t, args, httpAddr, "/v1/decide", decide, get200("http://"+httpAddr+"/readyz"))
	})
	t.Run("coordinator", func(t *testing.T) {
		srv := etcdtest.Start(t)
		httpAddr := freeAddr(t)
		args := []string{"coordinator", "--etcd", srv.Endpoint, "--grpc-listen", freeAddr(t), "--http-listen", httpAddr,
			"--insecure-admin", "--insecure-reports", "--session-ttl", "1s", "--rebalance-interval", "200ms", "--log-level", "error"}
		loadUntilStopped(t, args, httpAddr, "/v1/status", "", get200("http://"+httpAddr+"/readyz"))
	})
	t.Run("dev", func(t *testing.T) {
		httpAddr := freeAddr(t)
		args := []string{"dev", "--http-listen", httpAddr}
		loadUntilStopped(t, args, httpAddr, "/regions/us-east/v1/decide", decide, get200("http://"+httpAddr+"/regions/us-east/readyz"))
	})
}
