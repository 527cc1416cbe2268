package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/internal/envoycompat"
	"github.com/allot-dev/allot/internal/envoyxds"
	"github.com/allot-dev/allot/internal/tlsconfig"
	"github.com/allot-dev/allot/internal/tlstest"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy/envoyconf"
)

// xdsSAN is the only name on the xDS server's certificate: it carries no
// IP, so that a subscriber dialling 127.0.0.1 verifies it only by
// CONFIG_GRPC_XDS_SERVER_TLS_SAN, as one dialling a Service's ClusterIP
// would in Kubernetes.
const xdsSAN = "envoy-gateway.envoy-gateway-system.svc"

// tlsXDSServer is go-control-plane's ADS server with a snapshot cache,
// serving TLS on a loopback port.
type tlsXDSServer struct {
	addr  string
	cache cachev3.SnapshotCache
	stop  func()
}

// startTLSXDS serves ts's TLS (requiring client certificates when it has
// a ClientCAFile) on addr until the test ends or stop is called.
func startTLSXDS(t *testing.T, addr string, ts tlsconfig.Server) *tlsXDSServer {
	t.Helper()
	creds, err := ts.TransportCredentials()
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	x := &tlsXDSServer{addr: lis.Addr().String(), cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	gs := grpc.NewServer(grpc.Creds(creds))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, x.cache, nil))
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	var once sync.Once
	x.stop = func() { once.Do(func() { gs.Stop(); cancel(); <-served }) }
	t.Cleanup(x.stop)
	return x
}

// set publishes version for the node envoy-ratelimit: domain edge with
// one limit of rpu a minute.
func (x *tlsXDSServer) set(t *testing.T, version string, rpu uint32) {
	t.Helper()
	rl := &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: rpu},
	}}}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: {rl}})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), "envoy-ratelimit", snap); err != nil {
		t.Fatal(err)
	}
}

// xdsClient is the subscriber envoy-ratelimit builds from its settings
// (envoySubscriber), running until the test ends, with what it applied,
// logged and counted.
type xdsClient struct {
	sub *envoyxds.Subscriber
	log *syncBuffer
	reg *prometheus.Registry

	mu      sync.Mutex
	applied []uint32 // the edge limit of each configuration applied
}

// xdsEnv is the environment of a subscriber to the server at addr, with
// backoffs short enough for a test; extra adds to it or overrides it.
func xdsEnv(addr string, extra map[string]string) map[string]string {
	env := map[string]string{
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": addr, "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "5ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "20ms", "XDS_CLIENT_BACKOFF_JITTER": "false",
		"LOG_LEVEL": "debug", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:1",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func startXDSClient(t *testing.T, env map[string]string) *xdsClient {
	t.Helper()
	st, _, err := envoycompat.FromEnv(lookup(env))
	if err != nil {
		t.Fatal(err)
	}
	c := &xdsClient{log: &syncBuffer{}, reg: prometheus.NewRegistry()}
	c.sub, err = envoySubscriber(st, envoyLogger(&streams{out: io.Discard, err: c.log}, st), c.reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.sub.Run(ctx, func(cfg *envoyconf.Config) error {
			m, ok := cfg.Match("edge", []envoyconf.Entry{{Key: "remote_address", Value: "x"}})
			if !ok {
				return errors.New("no edge limit")
			}
			c.mu.Lock()
			c.applied = append(c.applied, m.Limit.RequestsPerUnit)
			c.mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
	return c
}

func (c *xdsClient) limits() []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint32(nil), c.applied...)
}

// waitVersion waits until version is applied with the edge limit rpu.
func (c *xdsClient) waitVersion(t *testing.T, version string, rpu uint32) {
	t.Helper()
	wait.Until(t, 5*time.Second, func() error {
		if v := c.sub.Version(); v != version {
			return fmt.Errorf("version %q, want %q\n%s", v, version, c.log)
		}
		return nil
	})
	if l := c.limits(); len(l) == 0 || l[len(l)-1] != rpu {
		t.Fatalf("version %s applied limits %v, want the last %d", version, l, rpu)
	}
}

// unavailable is the subscriber's log line for each failed connection.
const unavailable = "xDS management server unavailable"

// waitRefused waits until the subscriber has failed to connect `tries`
// more times, the last logged with an error holding one of causes, and
// checks that it stays disconnected with version (and nothing further)
// applied.
func (c *xdsClient) waitRefused(t *testing.T, tries int, causes []string, version string, applied int) {
	t.Helper()
	before := strings.Count(c.log.String(), unavailable)
	wait.Until(t, 5*time.Second, func() error {
		if n := strings.Count(c.log.String(), unavailable) - before; n < tries {
			return fmt.Errorf("%d failed connections logged, want %d\n%s", n, tries, c.log)
		}
		return nil
	})
	lines := strings.Split(c.log.String(), "\n")
	var refused []string
	for _, l := range lines {
		if strings.Contains(l, unavailable) {
			refused = append(refused, l)
		}
	}
	last := refused[len(refused)-1]
	if !slices.ContainsFunc(causes, func(c string) bool { return strings.Contains(last, c) }) {
		t.Errorf("failed connection logged as\n%s\nwant one of the causes %q", last, causes)
	}
	if !strings.Contains(c.log.String(), "level=WARN msg=\""+unavailable) {
		t.Errorf("no failed connection logged at WARN:\n%s", c.log)
	}
	if v := c.sub.Version(); v != version {
		t.Errorf("version %q after failed connections, want %q", v, version)
	}
	if n := len(c.limits()); n != applied {
		t.Errorf("%d configurations applied, want %d", n, applied)
	}
	if got := gatherValue(t, c.reg, "allot_envoy_xds_connected", ""); got != 0 {
		t.Errorf("allot_envoy_xds_connected = %v while refused, want 0", got)
	}
	if got := gatherValue(t, c.reg, "allot_envoy_xds_retries_total", ""); got < 1 {
		t.Errorf("allot_envoy_xds_retries_total = %v after refused connections, want ≥ 1", got)
	}
	if got := gatherValue(t, c.reg, "allot_envoy_xds_updates_total", "applied"); got != float64(applied) {
		t.Errorf(`allot_envoy_xds_updates_total{result="applied"} = %v, want %d`, got, applied)
	}
}

// gatherValue is the value of the metric name (with result="result" when
// result is set) in reg.
func gatherValue(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := result == ""
			for _, l := range m.GetLabel() {
				ok = ok || l.GetName() == "result" && l.GetValue() == result
			}
			if !ok {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s{result=%q} not gathered", name, result)
	return 0
}

// TestEnvoyXDSTLS takes the configuration from an xDS server over TLS as
// Envoy Gateway serves it: CONFIG_GRPC_XDS_SERVER_USE_TLS turns TLS on,
// _SERVER_TLS_CACERT verifies the server, _SERVER_TLS_SAN is the name
// expected on its certificate, and _CLIENT_TLS_CERT/_KEY are shown to a
// server that requires a client certificate. A subscriber that cannot
// verify the server, or that the server refuses, applies nothing and
// logs why.
func TestEnvoyXDSTLS(t *testing.T) {
	p := tlstest.New(t)
	serverCert, serverKey := p.IssueServer(t, "xds", xdsSAN)
	tlsOnly := tlsconfig.Server{CertFile: serverCert, KeyFile: serverKey}
	mutual := tlsconfig.Server{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: p.CA}
	verified := map[string]string{
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": p.CA, "CONFIG_GRPC_XDS_SERVER_TLS_SAN": xdsSAN,
	}
	with := func(kvs ...string) map[string]string {
		env := map[string]string{}
		for k, v := range verified {
			env[k] = v
		}
		for i := 0; i+1 < len(kvs); i += 2 {
			if kvs[i+1] == "" {
				delete(env, kvs[i])
			} else {
				env[kvs[i]] = kvs[i+1]
			}
		}
		return env
	}
	// A server that refuses the client's certificate does so after the
	// client's side of the TLS 1.3 handshake has completed: its alert
	// reaches the subscriber only when the subscriber reads before it
	// writes into the closed connection, so the cause logged may be that
	// write's failure.
	refusedBy := func(alert string) []string {
		return []string{"remote error: tls: " + alert, "broken pipe", "connection reset by peer"}
	}
	clientCert := []string{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", p.ClientCert, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", p.ClientKey}
	for _, c := range []struct {
		name   string
		server tlsconfig.Server
		env    map[string]string
		refuse []string // the logged cause of a failed connection is one of these; nil when the configuration applies
	}{
		{"tls", tlsOnly, verified, nil},
		{"mtls", mutual, with(clientCert...), nil},
		{"mtls without a client certificate", mutual, verified, refusedBy("certificate required")},
		{"mtls with a certificate of another CA", mutual, with("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", p.OtherClientCert, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", p.OtherClientKey), refusedBy("unknown certificate authority")},
		{"wrong CA", tlsOnly, with("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", p.OtherCA), []string{"x509: certificate signed by unknown authority"}},
		{"wrong SAN", tlsOnly, with("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds.example.com"), []string{"x509: certificate is valid for " + xdsSAN + ", not xds.example.com"}},
		// Without the SAN the name checked is the host dialled, 127.0.0.1,
		// which the certificate does not carry.
		{"no SAN", tlsOnly, with("CONFIG_GRPC_XDS_SERVER_TLS_SAN", ""), []string{"x509: cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs"}},
		{"plaintext to a TLS server", tlsOnly, map[string]string{}, []string{"error reading server preface"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := startTLSXDS(t, "127.0.0.1:0", c.server)
			x.set(t, "1", 2)
			cl := startXDSClient(t, xdsEnv(x.addr, c.env))
			if c.refuse != nil {
				cl.waitRefused(t, 3, c.refuse, "", 0)
				return
			}
			cl.waitVersion(t, "1", 2)
			if got := gatherValue(t, cl.reg, "allot_envoy_xds_connected", ""); got != 1 {
				t.Errorf("allot_envoy_xds_connected = %v, want 1", got)
			}
			x.set(t, "2", 5)
			cl.waitVersion(t, "2", 5)
			if l := cl.limits(); len(l) != 2 {
				t.Errorf("applied limits %v, want [2 5]", l)
			}
		})
	}
}

// TestEnvoyXDSTLSLastGoodStays: a subscriber applied a configuration over
// mutual TLS; the server comes back trusting another client CA (a
// rotation the subscriber's certificate missed), with a new version. The
// subscriber is refused, says so, and keeps the configuration it had.
func TestEnvoyXDSTLSLastGoodStays(t *testing.T) {
	p := tlstest.New(t)
	serverCert, serverKey := p.IssueServer(t, "xds", xdsSAN)
	x := startTLSXDS(t, "127.0.0.1:0", tlsconfig.Server{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: p.CA})
	x.set(t, "1", 2)
	cl := startXDSClient(t, xdsEnv(x.addr, map[string]string{
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": p.CA, "CONFIG_GRPC_XDS_SERVER_TLS_SAN": xdsSAN,
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": p.ClientCert, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": p.ClientKey,
	}))
	cl.waitVersion(t, "1", 2)

	x.stop()
	y := startTLSXDS(t, x.addr, tlsconfig.Server{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: p.OtherCA})
	y.set(t, "2", 5)
	cl.waitRefused(t, 3, []string{"remote error: tls: unknown certificate authority", "broken pipe", "connection reset by peer"}, "1", 1)
	if l := cl.limits(); l[len(l)-1] != 2 {
		t.Errorf("applied limits %v, want version 1's 2 kept", l)
	}
}

// TestEnvoyXDSTLSSettings: TLS settings that cannot work stop
// envoy-ratelimit at startup, and its --check, with an error naming the
// environment variable at fault.
func TestEnvoyXDSTLSSettings(t *testing.T) {
	p := tlstest.New(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const (
		useTLS = "CONFIG_GRPC_XDS_SERVER_USE_TLS"
		cert   = "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"
		key    = "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"
		ca     = "CONFIG_GRPC_XDS_SERVER_TLS_CACERT"
	)
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string // the error holds each
		not  []string // and none of these
	}{
		{"missing CA", map[string]string{useTLS: "true", ca: missing}, []string{ca, missing, "no such file"}, []string{cert, key}},
		{"CA a directory", map[string]string{useTLS: "true", ca: dir}, []string{ca, "is a directory"}, []string{cert, key}},
		{"CA not PEM", map[string]string{useTLS: "true", ca: notPEM}, []string{ca, notPEM, "no PEM certificates"}, []string{cert, key}},
		{"missing cert", map[string]string{useTLS: "true", cert: missing, key: p.ClientKey}, []string{cert, missing, "no such file"}, []string{key + ":", ca}},
		{"missing key", map[string]string{useTLS: "true", cert: p.ClientCert, key: missing}, []string{key, missing, "no such file"}, []string{cert + ":", ca}},
		{"cert without key", map[string]string{useTLS: "true", cert: p.ClientCert}, []string{cert + "=", key}, []string{ca}},
		{"key without cert", map[string]string{useTLS: "true", key: p.ClientKey}, []string{key + "=", cert}, []string{ca}},
		{"key of another cert", map[string]string{useTLS: "true", cert: p.ClientCert, key: p.OtherClientKey}, []string{cert, key, "private key does not match"}, []string{ca}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := xdsEnv("127.0.0.1:1", c.env)
			env["RUNTIME_ROOT"] = t.TempDir()
			refusesTLS(t, env, c.want, c.not)
		})
	}
}

// GRPC_SERVER_TLS_* files that cannot be read stop envoy-ratelimit before
// it listens, and fail --check, with an error naming the variable at fault.
func TestEnvoyGRPCServerTLSSettings(t *testing.T) {
	p := tlstest.New(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	const (
		cert = "GRPC_SERVER_TLS_CERT"
		key  = "GRPC_SERVER_TLS_KEY"
		ca   = "GRPC_CLIENT_TLS_CACERT"
	)
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string
		not  []string
	}{
		{"missing cert", map[string]string{cert: missing, key: p.ServerKey}, []string{cert, missing}, []string{ca, "--"}},
		{"missing key", map[string]string{cert: p.ServerCert, key: missing}, []string{key, missing}, []string{ca, "--"}},
		{"missing client CA", map[string]string{cert: p.ServerCert, key: p.ServerKey, ca: missing}, []string{ca, missing}, []string{cert, "--"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"GRPC_SERVER_USE_TLS": "true", "RUNTIME_ROOT": t.TempDir(), "REDIS_URL": "127.0.0.1:1"}
			maps.Copy(env, c.env)
			refusesTLS(t, env, c.want, c.not)
		})
	}
}

// refusesTLS runs envoy-ratelimit with env, and again with --check: each
// must fail before any listener opens, with an error holding every one of
// want and none of not.
func refusesTLS(t *testing.T, env map[string]string, want, not []string) {
	t.Helper()
	for _, check := range []bool{false, true} {
		err := runEnvoy(context.Background(), &streams{out: io.Discard, err: io.Discard}, lookup(env), check, func(*envoyListeners) {
			t.Errorf("check=%v: envoy-ratelimit listened despite bad TLS settings", check)
		})
		if err == nil {
			t.Fatalf("check=%v: runEnvoy = nil, want an error", check)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("check=%v: runEnvoy = %v, want it to hold %q", check, err, w)
			}
		}
		for _, n := range not {
			if strings.Contains(err.Error(), n) {
				t.Errorf("check=%v: runEnvoy = %v, naming %s, which is not at fault", check, err, n)
			}
		}
	}
}
