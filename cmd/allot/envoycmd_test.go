package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
)

// syncBuffer is a bytes.Buffer safe for the command's log and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// envoyProc is `allot envoy-ratelimit` running in-process.
type envoyProc struct {
	grpc, http, debug, prom string
	log                     *syncBuffer
	cancel                  context.CancelFunc
	done                    chan error
}

// startEnvoy runs the command with the original's settings in env (plus
// free loopback ports and the Redis at redisAddr) until the test ends.
func startEnvoy(t *testing.T, redisAddr string, env map[string]string) *envoyProc {
	t.Helper()
	p := &envoyProc{log: &syncBuffer{}, done: make(chan error, 1)}
	all := map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisAddr,
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:0",
		"LOG_LEVEL": "info", "ALLOT_STORE_TIMEOUT": "100ms", "ALLOT_RUNTIME_POLL": "20ms",
	}
	for k, v := range env {
		all[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	addrs := make(chan struct{})
	go func() {
		p.done <- runEnvoy(ctx, &streams{out: io.Discard, err: p.log}, func(k string) (string, bool) { v, ok := all[k]; return v, ok }, false,
			func(l *envoyListeners) {
				p.grpc, p.http, p.debug, p.prom = l.grpc.Addr().String(), l.http.Addr().String(), l.debug.Addr().String(), l.prom.Addr().String()
				close(addrs)
			})
	}()
	select {
	case <-addrs:
	case err := <-p.done:
		t.Fatalf("envoy-ratelimit: %v\n%s", err, p.log)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-p.done; err != nil {
			t.Errorf("envoy-ratelimit: %v\n%s", err, p.log)
		}
	})
	return p
}

func (p *envoyProc) rls(t *testing.T) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	wait.Until(t, 10*time.Second, func() error {
		r, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health %s", r.GetStatus())
		}
		return nil
	})
	return rlsv3.NewRateLimitServiceClient(conn)
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	code, body, err := tryGet(url)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

func tryGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// Written beside the directory, then renamed into it: the runtime
	// watcher never reads half a file (as a ConfigMap update, or an
	// operator's mv, lands).
	tmp, err := os.CreateTemp(filepath.Dir(filepath.Dir(path)), ".write-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		t.Fatal(err)
	}
}

const envoyCmdConfig = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`

func rlsReq(domain string, kvs ...string) *rlsv3.RateLimitRequest {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kvs); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kvs[i], Value: kvs[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
}

// TestEnvoyRatelimitCommand runs the command as Envoy Gateway configures
// the original (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY, RUNTIME_WATCH_ROOT=false,
// dot files ignored) and checks each endpoint, a reload, and a broken file.
func TestEnvoyRatelimitCommand(t *testing.T) {
	rs := redistest.Start(t)
	root := t.TempDir()
	cfgPath := filepath.Join(root, "ratelimit", "config", "edge.yaml")
	writeFile(t, cfgPath, envoyCmdConfig)
	p := startEnvoy(t, rs.Addr, map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "USE_STATSD": "false", "STATSD_PORT": "9125",
	})
	c := p.rls(t)
	ctx := context.Background()
	codes := func(domain string, n int, kvs ...string) string {
		var out []string
		for range n {
			r, err := c.ShouldRateLimit(ctx, rlsReq(domain, kvs...))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r.GetOverallCode().String())
		}
		return strings.Join(out, " ")
	}
	// gRPC health answers for "" and for the original's service name.
	hc, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	if r, err := healthpb.NewHealthClient(hc).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health of service ratelimit = %v, %v", r, err)
	}
	if got := codes("edge", 3, "remote_address", "1.2.3.4"); got != "OK OK OVER_LIMIT" {
		t.Errorf("2 a minute: %s", got)
	}
	r, err := c.ShouldRateLimit(ctx, rlsReq("edge", "remote_address", "1.2.3.4"))
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	for _, hv := range r.GetResponseHeadersToAdd() {
		h[hv.GetKey()] = hv.GetValue()
	}
	if h["RateLimit-Limit"] != "2" || h["RateLimit-Remaining"] != "0" || h["RateLimit-Reset"] == "" {
		t.Errorf("limit headers = %v", h)
	}
	// /healthcheck, /json, /rlconfig, Prometheus with the original's names.
	if code, body := httpGet(t, "http://"+p.http+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck = %d %q", code, body)
	}
	post := func(body string) (int, string) {
		resp, err := http.Post("http://"+p.http+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}`); code != 429 || !strings.Contains(body, "OVER_LIMIT") {
		t.Errorf("/json over the limit = %d %s", code, body)
	}
	if code, body := post(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"5.6.7.8"}]}]}`); code != 200 || !strings.Contains(body, `"overallCode":"OK"`) {
		t.Errorf("/json within the limit = %d %s", code, body)
	}
	if code, _ := post(`{"domain":`); code != 400 {
		t.Errorf("/json with a broken body = %d, want 400", code)
	}
	if code, body := httpGet(t, "http://"+p.debug+"/rlconfig"); code != 200 || body != "edge.remote_address: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n" {
		t.Errorf("/rlconfig = %d %q", code, body)
	}
	_, metrics := httpGet(t, "http://"+p.prom+"/metrics")
	for _, want := range []string{
		`ratelimit_service_rate_limit_over_limit{domain="edge",key1="remote_address",key2=""} 3`,
		`ratelimit_service_config_load_success 1`,
		`allot_decisions_total{limit="edge.remote_address",region="local",result="denied"} 3`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The ignored settings were logged, once each.
	for _, s := range []string{"USE_STATSD", "STATSD_PORT"} {
		if n := strings.Count(p.log.String(), "setting="+s+" "); n != 1 {
			t.Errorf("%s logged %d times, want once:\n%s", s, n, p.log)
		}
	}
	// A change reloads; the counter of an unchanged limit continues.
	writeFile(t, cfgPath, envoyCmdConfig+"  - key: path\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	wait.Until(t, 5*time.Second, func() error {
		if _, body := httpGet(t, "http://"+p.debug+"/rlconfig"); !strings.Contains(body, "edge.path") {
			return errors.New("not reloaded")
		}
		return nil
	})
	if got := codes("edge", 2, "path", "/a"); got != "OK OVER_LIMIT" {
		t.Errorf("new limit 1 an hour: %s", got)
	}
	if got := codes("edge", 1, "remote_address", "1.2.3.4"); got != "OVER_LIMIT" {
		t.Errorf("after the reload the old counter = %s, want still over", got)
	}
	// A broken file is rejected; the last good configuration serves on.
	writeFile(t, cfgPath, "domain: edge\ndescriptors:\n  - key: path\n    rate_limit: {unit: lightyear, requests_per_unit: 1}\n")
	wait.Until(t, 5*time.Second, func() error {
		if _, m := httpGet(t, "http://"+p.prom+"/metrics"); !strings.Contains(m, "ratelimit_service_config_load_error 1") {
			return errors.New("not rejected yet")
		}
		return nil
	})
	if got := codes("edge", 1, "path", "/b"); got != "OK" {
		t.Errorf("after a broken file, the last good limit = %s", got)
	}
	if !strings.Contains(p.log.String(), "edge.yaml") || !strings.Contains(p.log.String(), "unit") {
		t.Errorf("the rejection is not logged with the file and field:\n%s", p.log)
	}
}

// TestEnvoyRatelimitStart checks the start: a broken first configuration is
// fatal and says what to do, unless FORCE_START_WITHOUT_INITIAL_CONFIG.
func TestEnvoyRatelimitStart(t *testing.T) {
	rs := redistest.Start(t)
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "config", "bad.yaml"), "domain: ''\n")
	env := map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": rs.Addr, "RUNTIME_ROOT": root,
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}
	err := runEnvoy(context.Background(), &streams{out: io.Discard, err: io.Discard}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, false, nil)
	if err == nil || !strings.Contains(err.Error(), "config.bad.yaml") || !strings.Contains(err.Error(), "FORCE_START_WITHOUT_INITIAL_CONFIG") {
		t.Errorf("broken first configuration: %v", err)
	}
	// --check says the same, and prints the limits of a good one.
	var out bytes.Buffer
	if err := runEnvoy(context.Background(), &streams{out: &out, err: io.Discard}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, true, nil); err == nil {
		t.Error("--check passed a broken configuration")
	}
	writeFile(t, filepath.Join(root, "config", "bad.yaml"), envoyCmdConfig)
	out.Reset()
	if err := runEnvoy(context.Background(), &streams{out: &out, err: io.Discard}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, true, nil); err != nil ||
		!strings.Contains(out.String(), "1 domains (edge), 1 limits") || !strings.Contains(out.String(), "edge.remote_address: unit=MINUTE") {
		t.Errorf("--check = %v\n%s", err, out.String())
	}
	// Bad settings are usage errors naming the variable.
	env["REDIS_POOL_SIZE"] = "lots"
	err = runEnvoy(context.Background(), &streams{out: io.Discard, err: io.Discard}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, false, nil)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "REDIS_POOL_SIZE") {
		t.Errorf("bad REDIS_POOL_SIZE: %v", err)
	}
	if got := envoyArgs("/bin/ratelimit", []string{"--check"}); strings.Join(got, " ") != "envoy-ratelimit --check" {
		t.Errorf("as /bin/ratelimit: args %v", got)
	}
	if got := envoyArgs("/usr/bin/allot", []string{"dev"}); strings.Join(got, " ") != "dev" {
		t.Errorf("as allot: args %v", got)
	}
}

// TestEnvoyRatelimitForceStart serves without a configuration, answers
// Unavailable, and picks the configuration up when it appears.
func TestEnvoyRatelimitForceStart(t *testing.T) {
	rs := redistest.Start(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "config", "edge.yaml"), "domain: edge\ndescriptors: [{key: k, rate_limit: {unit: day}}]\nnope: 1\n")
	p := startEnvoy(t, rs.Addr, map[string]string{"RUNTIME_ROOT": root, "FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"})
	wait.Until(t, 10*time.Second, func() error {
		if code, _, err := tryGet("http://" + p.http + "/healthcheck"); err != nil || code != 500 {
			return fmt.Errorf("/healthcheck = %d (want 500 before any configuration): %w", code, err)
		}
		return nil
	})
	writeFile(t, filepath.Join(root, "config", "edge.yaml"), envoyCmdConfig)
	c := p.rls(t)
	// The reload follows the file's change by a watch event: wait for it.
	wait.Until(t, 10*time.Second, func() error {
		r, err := c.ShouldRateLimit(context.Background(), rlsReq("edge", "remote_address", "9"))
		if err != nil || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 2 {
			return fmt.Errorf("after the configuration appeared: %v, %w", r, err)
		}
		return nil
	})
}

// TestEnvoyRatelimitXDS serves the configuration from a go-control-plane
// xDS server, as Envoy Gateway does, then a new version of it.
func TestEnvoyRatelimitXDS(t *testing.T) {
	rs := redistest.Start(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	sctx, scancel := context.WithCancel(context.Background())
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(sctx, cache, nil))
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); scancel(); <-served })
	set := func(version string, rpu uint32) {
		t.Helper()
		rl := &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: rpu},
		}}}
		snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: {rl}})
		if err != nil {
			t.Fatal(err)
		}
		if err := cache.SetSnapshot(context.Background(), "envoy-ratelimit", snap); err != nil {
			t.Fatal(err)
		}
	}
	set("1", 2)
	p := startEnvoy(t, rs.Addr, map[string]string{
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": lis.Addr().String(), "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
	})
	c := p.rls(t)
	limit := func() uint32 {
		r, err := c.ShouldRateLimit(context.Background(), rlsReq("edge", "remote_address", "x"))
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := limit(); got != 2 {
		t.Errorf("version 1: limit %d, want 2", got)
	}
	set("2", 5)
	wait.Until(t, 10*time.Second, func() error {
		if got := limit(); got != 5 {
			return fmt.Errorf("limit %d, want version 2's 5", got)
		}
		return nil
	})
	if _, body := httpGet(t, "http://"+p.debug+"/rlconfig"); !strings.Contains(body, "requests_per_unit=5") {
		t.Errorf("/rlconfig = %q", body)
	}
}

// TestEnvoyRatelimitGlobal joins envoy-ratelimit to an allot cluster
// (ALLOT_ETCD, ALLOT_REGION) and marks a limit of its configuration global
// (ALLOT_GLOBAL_LIMITS): the limit then spends the tenant's budget through
// the coordinator's grants, and its decisions count under the tenant's
// budget limit.
func TestEnvoyRatelimitGlobal(t *testing.T) {
	srv := etcdtest.Start(t)
	url := startCoordinatorOn(t, srv, "--insecure-reports", "--insecure-admin")
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, "version: 1\nregions: [us-east, eu-west]\ndefault_tier: free\nlimits:\n  - name: budget\n    descriptors: [tenant]\n    rate: budget\ntiers:\n  free:\n    budget: {rate: 1/s, burst: 2}\n")
	if out, errOut, code := runCLI(t, "policy", "apply", "-f", pol, "--coordinator", url); code != 0 {
		t.Fatalf("policy apply: %s %s", out, errOut)
	}
	if out, errOut, code := runCLI(t, "budget", "set", "edge-api", "--rate", "5/m", "--burst", "5", "--coordinator", url); code != 0 {
		t.Fatalf("budget set: %s %s", out, errOut)
	}
	root := filepath.Join(dir, "rl")
	writeFile(t, filepath.Join(root, "config", "edge.yaml"), "domain: edge\ndescriptors:\n  - key: path\n    value: /api\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	global := filepath.Join(dir, "global.yaml")
	writeFile(t, global, "global:\n  - limit: edge.path_/api\n    tenant: edge-api\n")
	// --check validates the global file against the configuration.
	checkEnv := map[string]string{"RUNTIME_ROOT": root, "ALLOT_ETCD": srv.Endpoint, "ALLOT_GLOBAL_LIMITS": global}
	var out bytes.Buffer
	if err := runEnvoy(context.Background(), &streams{out: &out, err: io.Discard}, func(k string) (string, bool) { v, ok := checkEnv[k]; return v, ok }, true, nil); err != nil ||
		!strings.Contains(out.String(), "global: edge.path_/api spends tenant edge-api's budget") {
		t.Errorf("--check with a global file = %v\n%s", err, out.String())
	}
	// A limit counted per value, global under the names of its entries.
	checkRoot := filepath.Join(dir, "rl-check")
	writeFile(t, filepath.Join(checkRoot, "config", "edge.yaml"), "domain: edge\ndescriptors:\n  - key: path\n    value: /api\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"+
		"  - key: X-Client\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	perValue := filepath.Join(dir, "per-value.yaml")
	writeFile(t, perValue, "global:\n  - limit: edge.X-Client\n    tenant: edge-client\n    descriptors: [client]\n")
	checkEnv["RUNTIME_ROOT"], checkEnv["ALLOT_GLOBAL_LIMITS"] = checkRoot, perValue
	out.Reset()
	if err := runEnvoy(context.Background(), &streams{out: &out, err: io.Discard}, func(k string) (string, bool) { v, ok := checkEnv[k]; return v, ok }, true, nil); err != nil ||
		!strings.Contains(out.String(), "global: edge.X-Client spends, per value, tenant edge-client's global limit keyed on [tenant client]") {
		t.Errorf("--check with a global limit counted per value = %v\n%s", err, out.String())
	}
	for doc, want := range map[string]string{
		"global:\n  - limit: edge.path\n    tenant: edge-api\n":                                "bad-global.yaml: global[0].limit: ",
		"global:\n  - limit: edge.X-Client\n    tenant: edge-api\n":                            "bad-global.yaml: global[0].descriptors: ", // X-Client is no descriptor name
		"global:\n  - limit: edge.path_/api\n    tenant: edge-api\n    descriptors: [x]\n":     "bad-global.yaml: global[0].descriptors: ",
		"global:\n  - limit: edge.X-Client\n    tenant: edge-api\n    descriptors: [Client]\n": "bad-global.yaml: global[0].descriptors[0]: ",
	} {
		bad := filepath.Join(dir, "bad-global.yaml")
		writeFile(t, bad, doc)
		checkEnv["ALLOT_GLOBAL_LIMITS"] = bad
		if err := runEnvoy(context.Background(), &streams{out: io.Discard, err: io.Discard}, func(k string) (string, bool) { v, ok := checkEnv[k]; return v, ok }, true, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--check with %q: %v, want an error naming %s", doc, err, want)
		}
	}
	rs := redistest.Start(t)
	p := startEnvoy(t, rs.Addr, map[string]string{
		"RUNTIME_ROOT": root, "ALLOT_ETCD": srv.Endpoint, "ALLOT_REGION": "us-east", "ALLOT_GLOBAL_LIMITS": global,
	})
	c := p.rls(t) // serving: the policy, the budget and a grant are in
	admitted := 0
	wait.Until(t, 15*time.Second, func() error {
		r, err := c.ShouldRateLimit(context.Background(), rlsReq("edge", "path", "/api"))
		if err != nil {
			return err
		}
		if r.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			admitted++
		}
		if admitted == 0 {
			return errors.New("nothing admitted yet: no grant")
		}
		return nil
	})
	_, metrics := httpGet(t, "http://"+p.prom+"/metrics")
	if !strings.Contains(metrics, `allot_decisions_total{limit="budget",region="us-east",result="allowed"}`) {
		t.Errorf("the global limit's decisions are not counted under the tenant's budget limit:\n%s", grepLines(metrics, "allot_decisions_total"))
	}
	// One region of two, a budget of 5 a minute burst 5: this region's
	// share never admits more than the whole budget in the test's minute.
	for range 10 {
		r, err := c.ShouldRateLimit(context.Background(), rlsReq("edge", "path", "/api"))
		if err != nil {
			t.Fatal(err)
		}
		if r.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted > 5+1 {
		t.Errorf("admitted %d of a global budget of 5 a minute (burst 5) within seconds", admitted)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestEnvoyRatelimitRedisCluster runs on a 3-master Redis Cluster
// (REDIS_TYPE=CLUSTER, REDIS_URL a list of nodes): counters of one domain
// spread over the slots, every one enforced.
func TestEnvoyRatelimitRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "config", "edge.yaml"), envoyCmdConfig)
	p := startEnvoy(t, strings.Join(cl.Addrs(), ","), map[string]string{"RUNTIME_ROOT": root, "REDIS_TYPE": "CLUSTER"})
	c := p.rls(t)
	for i := range 20 {
		ip := fmt.Sprintf("10.0.0.%d", i)
		var got []string
		for range 3 {
			r, err := c.ShouldRateLimit(context.Background(), rlsReq("edge", "remote_address", ip))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.GetOverallCode().String())
		}
		if strings.Join(got, " ") != "OK OK OVER_LIMIT" {
			t.Fatalf("%s on the cluster: %v, want OK OK OVER_LIMIT", ip, got)
		}
	}
	// The keys landed on more than one master.
	used := 0
	for _, n := range cl.Nodes {
		rc := redis.NewClient(redistest.ClientOptions(n.Addr))
		if k, err := rc.DBSize(context.Background()).Result(); err == nil && k > 0 {
			used++
		}
		_ = rc.Close()
	}
	if used < 2 {
		t.Errorf("the counters of 20 descriptors are on %d master(s), want them spread", used)
	}
}

// TestRegionalEnvoyConfig serves an envoyproxy/ratelimit configuration from
// `allot regional --envoy-config`: its domains answer from it, others from
// allot's policy, side by side on one RLS port.
func TestRegionalEnvoyConfig(t *testing.T) {
	srv := etcdtest.Start(t)
	url := startCoordinatorOn(t, srv, "--insecure-reports", "--insecure-admin")
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, "version: 1\nregions: [us-east]\ndefault_tier: free\nlimits:\n  - name: budget\n    descriptors: [tenant]\n    rate: budget\ntiers:\n  free:\n    budget: {rate: 100/s, burst: 100}\n")
	if out, errOut, code := runCLI(t, "policy", "apply", "-f", pol, "--coordinator", url); code != 0 {
		t.Fatalf("policy apply: %s %s", out, errOut)
	}
	conf := filepath.Join(dir, "envoy")
	writeFile(t, filepath.Join(conf, "edge.yaml"), envoyCmdConfig)
	rs := redistest.Start(t)
	if _, errOut, code := runCLI(t, "regional", "--region", "us-east", "--redis", rs.Addr, "--etcd", srv.Endpoint,
		"--envoy-config", filepath.Join(dir, "missing")); code != 2 || !strings.Contains(errOut, "--envoy-config") {
		t.Errorf("a missing --envoy-config: exit %d, %s", code, errOut)
	}
	grpcAddr := freeAddr(t)
	startRegional(t, srv, rs.Addr, "--grpc-listen", grpcAddr, "--envoy-config", conf)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(domain string, kvs ...string) (string, error) {
		r, err := c.ShouldRateLimit(context.Background(), rlsReq(domain, kvs...))
		if err != nil {
			return "", err
		}
		return r.GetOverallCode().String(), nil
	}
	// Ready once the policy and a grant are in.
	wait.Until(t, 15*time.Second, func() error {
		got, err := ask("api", "tenant", "t1")
		if err != nil || got != "OK" {
			return fmt.Errorf("policy path answered %q: %w", got, err)
		}
		return nil
	})
	var got []string
	for range 3 {
		g, err := ask("edge", "remote_address", "1.1.1.1")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, g)
	}
	if strings.Join(got, " ") != "OK OK OVER_LIMIT" {
		t.Errorf("the envoy configuration's domain, 2 a minute: %v", got)
	}
	// A domain the configuration does not hold is allot's policy's: the
	// descriptors must name a tenant.
	if _, err := ask("other", "remote_address", "1.1.1.1"); err == nil || !strings.Contains(err.Error(), "tenant") {
		t.Errorf("a descriptor without a tenant outside the envoy domains: %v, want the policy's error", err)
	}
}

// REDIS_SOCKET_TYPE=unix with REDIS_URL a socket path: allot
// envoy-ratelimit decides on a real redis-server reached over its unix
// socket (the limit's two requests a minute, then OVER_LIMIT), and the
// counters live in that server.
func TestEnvoyRatelimitRedisUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	rs := redistest.Start(t, "--unixsocket", sock, "--unixsocketperm", "700")
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "config", "edge.yaml"), envoyCmdConfig)
	p := startEnvoy(t, "", map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": sock, "RUNTIME_ROOT": root})
	c := p.rls(t)
	var got []string
	for range 3 {
		r, err := c.ShouldRateLimit(context.Background(), rlsReq("edge", "remote_address", "10.0.0.7"))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.GetOverallCode().String())
	}
	if want := "OK OK OVER_LIMIT"; strings.Join(got, " ") != want {
		t.Errorf("over the unix socket: %s, want %s", strings.Join(got, " "), want)
	}
	// The decisions were written to that server: it holds the key.
	keys, err := rs.Client(t).Keys(context.Background(), "*").Result()
	if err != nil || len(keys) == 0 {
		t.Errorf("the redis-server behind the socket holds no key (%v, %v): the decisions went elsewhere", keys, err)
	}
}

// REDIS_TYPE=SENTINEL with REDIS_URL master-name,host:port: allot
// envoy-ratelimit asks a real Redis Sentinel for the master and decides on
// it (two requests a minute, then OVER_LIMIT; the counters live in the
// master).
func TestEnvoyRatelimitRedisSentinel(t *testing.T) {
	master := redistest.Start(t)
	_, mport, _ := strings.Cut(master.Addr, ":")
	sentinel := freeAddr(t)
	_, sport, _ := strings.Cut(sentinel, ":")
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf") // (Sentinel rewrites it: its own copy)
	writeFile(t, conf, fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor allot-master 127.0.0.1 %s 1\n", sport, dir, mport))
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server: %v (install it: apt-get install -y redis-server)", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, conf, "--sentinel")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()
	wait.Until(t, 10*time.Second, func() error {
		addr, err := sc.GetMasterAddrByName(context.Background(), "allot-master").Result()
		if err != nil || len(addr) != 2 || addr[1] != mport {
			return fmt.Errorf("sentinel does not name the master yet: %v %w", addr, err)
		}
		return nil
	})
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "config", "edge.yaml"), envoyCmdConfig)
	p := startEnvoy(t, "", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "allot-master," + sentinel, "RUNTIME_ROOT": root})
	c := p.rls(t)
	var got []string
	for range 3 {
		r, err := c.ShouldRateLimit(context.Background(), rlsReq("edge", "remote_address", "10.0.0.8"))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.GetOverallCode().String())
	}
	if want := "OK OK OVER_LIMIT"; strings.Join(got, " ") != want {
		t.Errorf("through the sentinel: %s, want %s", strings.Join(got, " "), want)
	}
	keys, err := master.Client(t).Keys(context.Background(), "*").Result()
	if err != nil || len(keys) == 0 {
		t.Errorf("the master holds no key (%v, %v): the decisions went elsewhere", keys, err)
	}
}
