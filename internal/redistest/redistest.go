package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/wait"

	"github.com/redis/go-redis/v9"
)

// StartTimeout bounds how long Start and StartCluster wait for servers.
const StartTimeout = 20 * time.Second

// Server is one redis-server process owned by a test.
type Server struct {
	// Addr is host:port of the server.
	Addr string
	// Port is the server's TCP port.
	Port int
	// Dir is the server's working directory.
	Dir string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// binaries returns the paths of redis-server and redis-cli, failing tb with
// installation advice when either is missing.
func binaries(tb testing.TB) (server, cli string) {
	tb.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redistest: redis-server is not on PATH (%v); install it: apt-get install -y redis-server (or run .ci/run)", err)
	}
	cli, err = exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("redistest: redis-cli is not on PATH (%v); install it: apt-get install -y redis-tools", err)
	}
	return server, cli
}

// Start starts a single redis-server on a free loopback port, with no
// persistence and its data in tb.TempDir(), and stops it when tb ends.
// Extra arguments are passed to redis-server (e.g. "--maxmemory", "1mb").
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	bin, _ := binaries(tb)
	return start(tb, bin, false, args)
}

func start(tb testing.TB, bin string, cluster bool, extra []string) *Server {
	tb.Helper()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(cluster)
		if err != nil {
			tb.Fatalf("redistest: no free port: %v", err)
		}
		s, err := launch(tb, bin, port, cluster, extra)
		if err == nil {
			return s
		}
		lastErr = err
	}
	tb.Fatalf("redistest: redis-server did not start: %v", lastErr)
	return nil
}

func launch(tb testing.TB, bin string, port int, cluster bool, extra []string) (*Server, error) {
	dir := tb.TempDir()
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", "",
	}
	if cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000",
		)
	}
	args = append(args, extra...)
	cmd := exec.Command(bin, args...)
	log := &bytes.Buffer{}
	cmd.Stdout = &syncWriter{w: log}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Server{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Port: port,
		Dir:  dir,
		cmd:  cmd,
		done: make(chan struct{}),
	}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	tb.Cleanup(s.Kill)

	deadline := time.Now().Add(StartTimeout)
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("redis-server on port %d exited: %s", port, s.Log())
		default:
		}
		if err := ping(s.Addr); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			s.Kill()
			return nil, fmt.Errorf("redis-server on port %d did not answer PING within %v: %w; log: %s", port, StartTimeout, err, s.Log())
		}
		// Poll the real process; a short pause keeps this loop from spinning.
		select {
		case <-s.done:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func ping(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// freePort returns a loopback port that is free now; for a cluster node the
// cluster bus port (port+10000) is free too.
func freePort(cluster bool) (int, error) {
	for i := 0; i < 100; i++ {
		var port int
		if cluster {
			port = 20000 + rand.IntN(20000)
		} else {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return 0, err
			}
			port = l.Addr().(*net.TCPAddr).Port
			_ = l.Close()
			return port, nil
		}
		if portFree(port) && portFree(port+10000) {
			return port, nil
		}
	}
	return 0, errors.New("no free port pair found")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// Client returns a go-redis client for s with context deadlines honoured,
// closed when tb ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(ClientOptions(s.Addr))
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// ClientOptions returns the client options tests use: context deadlines
// honoured (so a stalled server costs a call its deadline, not the client's
// read timeout), generous timeouts otherwise.
func ClientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           2 * time.Second,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
	}
}

// Log returns what the server wrote to its log so far.
func (s *Server) Log() string {
	if w, ok := s.cmd.Stdout.(*syncWriter); ok {
		return w.String()
	}
	return ""
}

// Pid returns the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Kill stops the server at once (SIGKILL) and waits for it to exit. It is
// safe to call more than once.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// Pause stops the server's process (SIGSTOP): connections stay open and the
// kernel still accepts new ones, but nothing answers. Resume undoes it.
func (s *Server) Pause(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatalf("redistest: SIGSTOP %d: %v", s.cmd.Process.Pid, err)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		tb.Fatalf("redistest: SIGCONT %d: %v", s.cmd.Process.Pid, err)
	}
}

// Exited reports whether the server process has exited.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Cluster is a Redis Cluster of three masters and no replicas.
type Cluster struct {
	Nodes []*Server
}

// Addrs returns the address of every node.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Client returns a cluster client over every node with context deadlines
// honoured, closed when tb ends.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 c.Addrs(),
		ContextTimeoutEnabled: true,
		DialTimeout:           2 * time.Second,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
	})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// StartCluster starts three redis-server nodes with cluster mode enabled,
// joins them with `redis-cli --cluster create` (three masters, no replicas)
// and waits until every node reports cluster_state:ok.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	bin, cli := binaries(tb)
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		c.Nodes = append(c.Nodes, start(tb, bin, true, nil))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, n := range c.Nodes {
		n := n
		wait.Until(tb, StartTimeout, func() error {
			cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, PoolSize: 1})
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") ||
				!strings.Contains(info, "cluster_known_nodes:3") {
				return fmt.Errorf("node %s: cluster not ready yet: %s", n.Addr, info)
			}
			return nil
		})
	}
	return c
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.String()
}

// ScriptCost returns what Redis itself accounts for script calls (INFO
// commandstats: calls, and CPU µs spent, of EVAL and EVALSHA). Benchmarks
// read it before and after a run to report the server's µs per decision:
// what bounds one shard's decisions per second, free of client-side noise.
func ScriptCost(tb testing.TB, c redis.Cmdable) (calls, usec int64) {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("redistest: INFO commandstats: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, fields, _ := strings.Cut(line, ":")
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	return calls, usec
}

// ReportScriptCost reports, when the returned func runs, Redis's CPU µs per
// script call since ReportScriptCost was called, as the metric
// "redis-µs/op". Use it as defer redistest.ReportScriptCost(b, c)().
func ReportScriptCost(b *testing.B, c redis.Cmdable) func() {
	calls0, usec0 := ScriptCost(b, c)
	return func() {
		calls1, usec1 := ScriptCost(b, c)
		if calls1 > calls0 {
			b.ReportMetric(float64(usec1-usec0)/float64(calls1-calls0), "redis-µs/op")
		}
	}
}
