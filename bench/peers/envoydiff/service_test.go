package envoydiff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allot-dev/allot/bench/peers/internal/peerkit"
	"github.com/allot-dev/allot/internal/redistest"
)

// readyWithin bounds a service's start: the first configuration loaded,
// /healthcheck answering and gRPC serving.
const readyWithin = 30 * time.Second

// readinessDomain is a domain no scenario configures: a call on it answers
// OK without touching Redis, in both services.
const readinessDomain = "envoydiff-readiness"

// service is one RLS server process of a scenario.
type service struct {
	name string // "envoyproxy/ratelimit" or "allot"
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // the process's exit, set before done closes

	httpAddr, grpcAddr, debugAddr string
	rls                           rlsv3.RateLimitServiceClient
}

// pair is the two services of a scenario: the same configuration directory
// and environment, each its own redis-server.
type pair struct {
	envoy, allot *service
}

// startPair writes files (name → YAML) into a fresh runtime directory with
// the original's layout (RUNTIME_ROOT/ratelimit/config/) and starts both
// services on it, each on its own redis-server, with the same settings:
// env is added to the common ones (a later value of a name wins).
func startPair(t *testing.T, files map[string]string, env ...string) *pair {
	t.Helper()
	root := t.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, yaml := range files {
		if err := os.WriteFile(filepath.Join(cfgDir, name), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return startPairAt(t, root, env...)
}

// commonEnv are the settings both services of every scenario get, before
// the scenario's own. ALLOT_STORE_TIMEOUT (allot's, the original ignores
// it) is raised from its 5 ms default: on a busy host a Redis call can take
// longer, and allot then decides without Redis (ALLOT_ON_FAILURE), which
// is not what this test compares; (*pair).noFallbacks checks none was made.
var commonEnv = []string{"USE_STATSD=false", "LOG_LEVEL=warn", "ALLOT_STORE_TIMEOUT=1s"}

// startPairAt starts both services on the runtime directory root (the
// original's RUNTIME_ROOT, with RUNTIME_SUBDIRECTORY=ratelimit).
func startPairAt(t *testing.T, root string, env ...string) *pair {
	t.Helper()
	common := slices.Concat(commonEnv, []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit"}, env)
	for attempt := 1; ; attempt++ {
		// Both start at once; each then waits for its own readiness.
		p := &pair{
			envoy: launchService(t, "envoyproxy/ratelimit", bins.envoy, common),
			allot: launchService(t, "allot", bins.allot, common, "envoy-ratelimit"),
		}
		err := p.envoy.waitReady()
		if err == nil {
			err = p.allot.waitReady()
		}
		if err == nil {
			return p
		}
		// A port found free can be taken by another process before the
		// service binds it: start both again on other ports.
		if attempt < 3 && (p.envoy.portTaken() || p.allot.portTaken()) {
			t.Logf("starting again on other ports: %v", err)
			p.envoy.stop()
			p.allot.stop()
			continue
		}
		t.Fatal(err)
	}
}

// noFallbacks fails t when allot made any decision without Redis
// (allot_fallback_decisions_total on its /metrics): such a decision is
// allot's failure policy, not the semantics this test compares.
func (p *pair) noFallbacks(t *testing.T, scenario string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.allot.httpAddr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scenario %q: allot /metrics: %v", scenario, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("scenario %q: allot /metrics: %v", scenario, err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "allot_fallback_decisions_total{") && !strings.HasSuffix(l, " 0") {
			lines = append(lines, l)
		}
	}
	if len(lines) > 0 {
		t.Errorf("scenario %q: allot decided without Redis (its answers above are its failure policy, not its semantics):\n  %s", scenario, strings.Join(lines, "\n  "))
	}
}

// launchService starts bin on its own redis-server and free loopback ports.
func launchService(t *testing.T, name, bin string, common []string, args ...string) *service {
	t.Helper()
	rs := redistest.Start(t)
	addrs, err := peerkit.FreeAddrs(3)
	if err != nil {
		t.Fatal(err)
	}
	s := &service{name: name, httpAddr: addrs[0], grpcAddr: addrs[1], debugAddr: addrs[2], done: make(chan struct{})}
	// A clean environment, so that the caller's (PORT, REDIS_URL, ...)
	// reaches neither service.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	env = append(env, common...)
	env = append(env,
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rs.Addr,
		"HOST=127.0.0.1", "PORT="+portOf(s.httpAddr),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+portOf(s.grpcAddr),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+portOf(s.debugAddr),
	)
	s.log = filepath.Join(t.TempDir(), strings.ReplaceAll(name, "/", "-")+".log")
	f, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Env, s.cmd.Stdout, s.cmd.Stderr, s.cmd.SysProcAttr = env, f, f, childAttr()
	if err := s.cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatalf("%s: start %s: %v", name, bin, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		_ = f.Close()
		close(s.done)
	}()
	t.Cleanup(s.stop)
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s.rls = rlsv3.NewRateLimitServiceClient(conn)
	return s
}

// waitReady polls until /healthcheck on PORT answers 200 and an RLS call
// answers; its error, with the log's tail, says why not when the process
// exits first or readyWithin passes.
func (s *service) waitReady() error {
	deadline := time.Now().Add(readyWithin)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := s.ready()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			exit := "exit status 0"
			if s.err != nil {
				exit = s.err.Error()
			}
			return fmt.Errorf("%s exited (%s) before it was ready: %w; its log:\n%s", s.name, exit, err, s.tail(30))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %v: %w; its log:\n%s", s.name, readyWithin, err, s.tail(30))
		}
		<-tick.C
	}
}

// portTaken reports whether the service exited because a port it was
// given was in use.
func (s *service) portTaken() bool {
	select {
	case <-s.done:
	default:
		return false
	}
	b, _ := os.ReadFile(s.log)
	return strings.Contains(string(b), "address already in use")
}

func (s *service) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.httpAddr+"/healthcheck", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthcheck: %s", resp.Status)
	}
	_, err = s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: readinessDomain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	if err != nil {
		return fmt.Errorf("ShouldRateLimit: %w", err)
	}
	return nil
}

// ask sends one request.
func (s *service) ask(r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.rls.ShouldRateLimit(ctx, r)
}

// stop sends SIGTERM, then SIGKILL after a grace period.
func (s *service) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// logTails logs the end of both services' logs, for a failure.
func (p *pair) logTails(t *testing.T) {
	t.Helper()
	for _, s := range []*service{p.envoy, p.allot} {
		t.Logf("--- %s log (last lines):\n%s", s.name, s.tail(20))
	}
}

// tail returns the last n lines of the service's log.
func (s *service) tail(n int) string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func portOf(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		panic(errors.New("portOf: " + addr))
	}
	return port
}
