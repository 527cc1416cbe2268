package e2e

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// envoyConfig is an envoyproxy/ratelimit configuration, mounted where
// Envoy Gateway's and Istio's Deployments mount theirs.
const envoyConfig = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
`

// TestEnvoyRatelimitImage runs the allot image exactly as a Deployment
// written for envoyproxy/ratelimit runs that image: command /bin/ratelimit,
// the original's environment, the configuration under
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config, Redis over tcp; then asks it
// over gRPC and /json.
func TestEnvoyRatelimitImage(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := &cluster{labels: map[string]string{labelKey: "1", labelKey + ".test": t.Name()}, http: &http.Client{Timeout: 5 * time.Second}}
	t.Cleanup(func() { c.teardown(t) })
	var err error
	if c.mgmt, err = network.New(ctx, network.WithLabels(c.labels)); err != nil {
		t.Fatal(err)
	}
	// Redis only on an internal network, as a Deployment reaches it.
	if c.backbone, err = network.New(ctx, network.WithLabels(c.labels), network.WithInternal()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.run(ctx, "redis", imgs.Redis, []string{"--port", "6379"}, []string{"6379/tcp"},
		wait.ForListeningPort("6379/tcp").WithStartupTimeout(time.Minute), netAlias{c.backbone, []string{"redis"}, netip.Addr{}}); err != nil {
		t.Fatal(err)
	}
	n := &node{name: "ratelimit", aliases: map[string][]string{}}
	ctr, err := testcontainers.Run(ctx, imgs.Allot,
		testcontainers.WithEntrypoint("/bin/ratelimit"),
		testcontainers.WithCmd(),
		testcontainers.WithEnv(map[string]string{
			"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379",
			"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
			"USE_STATSD": "false", "LOG_LEVEL": "info", "LIMIT_RESPONSE_HEADERS_ENABLED": "true",
		}),
		testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader: strings.NewReader(envoyConfig), ContainerFilePath: "/data/ratelimit/config/config.yaml", FileMode: 0o444,
		}),
		testcontainers.WithLabels(c.labels),
		testcontainers.WithExposedPorts("8080/tcp", "8081/tcp", "6070/tcp"),
		testcontainers.WithWaitStrategyAndDeadline(2*time.Minute, wait.ForHTTP("/healthcheck").WithPort("8080/tcp")),
		network.WithNetwork(nil, c.mgmt),
		network.WithNetwork([]string{"ratelimit"}, c.backbone),
	)
	if ctr != nil {
		n.c = ctr
		c.mu.Lock()
		c.nodes = append(c.nodes, n)
		c.mu.Unlock()
	}
	if err != nil {
		t.Fatalf("start the allot image as /bin/ratelimit: %v", err)
	}
	endpoint := func(port string) string {
		t.Helper()
		ep, err := ctr.PortEndpoint(ctx, port, "")
		if err != nil {
			t.Fatal(err)
		}
		return ep
	}
	conn, err := grpc.NewClient(endpoint("8081/tcp"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.1.2.3"}},
	}}}
	var got []string
	for range 4 {
		r, err := rls.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.GetOverallCode().String())
	}
	if strings.Join(got, " ") != "OK OK OK OVER_LIMIT" {
		t.Errorf("3 a minute, 4 requests: %v", got)
	}
	resp, err := c.http.Post("http://"+endpoint("8080/tcp")+"/json", "application/json",
		strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.1.2.3"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("/json over the limit = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	body, err := c.get(ctx, endpoint("6070/tcp"), "/rlconfig")
	if err != nil || !strings.Contains(string(body), "edge.remote_address: unit=MINUTE requests_per_unit=3") {
		t.Errorf("/rlconfig = %q, %v", body, err)
	}
	t.Logf("allot image as /bin/ratelimit: %s; /json %d", strings.Join(got, " "), resp.StatusCode)
}
