package e2e

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	mobynet "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allot-dev/allot/coordinator"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// topology is the shape of a cluster and its timings.
type topology struct {
	Regions       []string
	PodsPerRegion int
	Etcd          int
	Coordinators  int
	// Interval is the rebalance and report interval P; Lease the lease L
	// the coordinators grant; SessionTTL the election session TTL; Drift
	// the pods' lease drift margin.
	Interval, Lease, SessionTTL, Drift time.Duration
	// StoreTimeout bounds one Redis call in the pods.
	StoreTimeout time.Duration
}

// node is one container and the aliases it has on each network (kept to
// reconnect it after a cut).
type node struct {
	name    string
	c       *testcontainers.DockerContainer
	aliases map[string][]string // network ID -> aliases
}

// pod is a regional pod and its public endpoints on loopback (new ones
// after a restart: Docker publishes a restarted container's ports anew).
type pod struct {
	*node
	region string
	ep     atomic.Pointer[podEndpoints]
}

type podEndpoints struct {
	grpcAddr, httpAddr string
	conn               *grpc.ClientConn
	lim                allotv1.LimiterClient
}

func (p *pod) lim() allotv1.LimiterClient { return p.ep.Load().lim }
func (p *pod) httpAddr() string           { return p.ep.Load().httpAddr }

// refresh reads the pod's published ports and dials them.
func (p *pod) refresh(ctx context.Context) error {
	e := &podEndpoints{}
	var err error
	if e.grpcAddr, err = p.c.PortEndpoint(ctx, "8081/tcp", ""); err != nil {
		return err
	}
	if e.httpAddr, err = p.c.PortEndpoint(ctx, "8080/tcp", ""); err != nil {
		return err
	}
	if e.conn, err = grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return err
	}
	e.lim = allotv1.NewLimiterClient(e.conn)
	if old := p.ep.Swap(e); old != nil {
		_ = old.conn.Close()
	}
	return nil
}

// coord is a coordinator replica and its HTTP endpoint on loopback.
type coord struct {
	*node
	id   string
	addr atomic.Pointer[string]
}

func (co *coord) httpAddr() string { return *co.addr.Load() }

// refresh reads the coordinator's published HTTP port.
func (co *coord) refresh(ctx context.Context) error {
	a, err := co.c.PortEndpoint(ctx, "7070/tcp", "")
	if err == nil {
		co.addr.Store(&a)
	}
	return err
}

type region struct {
	name   string
	net    *testcontainers.DockerNetwork
	subnet netip.Prefix
	redis  *node
	pods   []*pod
}

// cluster is a running topology.
type cluster struct {
	topo topology
	mgmt *testcontainers.DockerNetwork
	// backbone joins etcd and the coordinators; etcdNet the pods and etcd;
	// coordNet the pods and the coordinators: each of a pod's two links,
	// and a coordinator's link to etcd, can be cut alone.
	backbone, etcdNet, coordNet *testcontainers.DockerNetwork
	etcd                        []*node
	coords                      []*coord
	regions                     []*region
	labels                      map[string]string
	http                        *http.Client
	// reportToken is the region token of this cluster's pods and
	// coordinators, copied into every allot container as reportTokenPath.
	reportToken string

	mu    sync.Mutex
	nodes []*node
}

func (c *cluster) region(name string) *region {
	for _, r := range c.regions {
		if r.name == name {
			return r
		}
	}
	panic("no region " + name)
}

// startCluster starts topo and registers its teardown (container logs are
// written to out/logs/ first).
func startCluster(t *testing.T, topo topology) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	c := &cluster{
		topo:   topo,
		labels: map[string]string{labelKey: "1", labelKey + ".test": t.Name()},
		http:   &http.Client{Timeout: 5 * time.Second},
	}
	var tok [16]byte
	_, _ = crand.Read(tok[:])
	c.reportToken = hex.EncodeToString(tok[:])
	t.Cleanup(func() { c.teardown(t) })
	var err error
	newNet := func(internal bool) (*testcontainers.DockerNetwork, error) {
		opts := []network.NetworkCustomizer{network.WithLabels(c.labels)}
		if internal {
			opts = append(opts, network.WithInternal())
		}
		return network.New(ctx, opts...)
	}
	if c.mgmt, err = newNet(false); err != nil {
		t.Fatalf("management network: %v", err)
	}
	for _, nw := range []**testcontainers.DockerNetwork{&c.backbone, &c.etcdNet, &c.coordNet} {
		if *nw, err = newNet(true); err != nil {
			t.Fatalf("backbone networks: %v", err)
		}
	}
	// Region networks have chosen subnets: pods get fixed addresses there
	// (.10, .11, ...) to advertise to their peers, others get .128 and up.
	subnets, err := freeSubnets(ctx, len(topo.Regions))
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range topo.Regions {
		dyn := netip.PrefixFrom(hostIP(subnets[i], 128), 25)
		nw, err := network.New(ctx, network.WithLabels(c.labels), network.WithInternal(),
			network.WithIPAM(&mobynet.IPAM{Config: []mobynet.IPAMConfig{{Subnet: subnets[i], IPRange: dyn}}}))
		if err != nil {
			t.Fatalf("network of %s: %v", name, err)
		}
		c.regions = append(c.regions, &region{name: name, net: nw, subnet: subnets[i]})
	}

	// etcd: every member starts at once (a member is healthy only once
	// the cluster has a leader).
	var members []string
	for i := range topo.Etcd {
		members = append(members, fmt.Sprintf("etcd-%d=http://etcd-%d:2380", i, i))
	}
	c.etcd = make([]*node, topo.Etcd)
	g, gctx := errgroup.WithContext(ctx)
	for i := range topo.Etcd {
		name := fmt.Sprintf("etcd-%d", i)
		g.Go(func() error {
			n, err := c.run(gctx, name, imgs.Etcd, []string{
				"--name", name, "--data-dir", "/var/lib/etcd/data",
				"--listen-client-urls", "http://0.0.0.0:2379", "--advertise-client-urls", "http://" + name + ":2379",
				"--listen-peer-urls", "http://0.0.0.0:2380", "--initial-advertise-peer-urls", "http://" + name + ":2380",
				"--initial-cluster", strings.Join(members, ","), "--initial-cluster-state", "new",
				"--initial-cluster-token", "allot-e2e", "--log-level", "warn",
			}, []string{"2379/tcp"}, wait.ForHTTP("/health").WithPort("2379/tcp").WithStartupTimeout(2*time.Minute),
				netAlias{c.backbone, []string{name}, netip.Addr{}}, netAlias{c.etcdNet, []string{name}, netip.Addr{}})
			c.etcd[i] = n
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("etcd: %v", err)
	}
	etcdURLs := strings.Join(c.etcdEndpoints(), ",")

	c.coords = make([]*coord, topo.Coordinators)
	g, gctx = errgroup.WithContext(ctx)
	for i := range topo.Coordinators {
		name := fmt.Sprintf("coord-%d", i)
		g.Go(func() error {
			n, err := c.run(gctx, name, imgs.Allot, []string{
				"coordinator", "--id", name, "--etcd", etcdURLs,
				"--grpc-listen", "0.0.0.0:7071", "--http-listen", "0.0.0.0:7070",
				"--advertise-grpc", name + ":7071", "--advertise-http", name + ":7070",
				"--insecure-admin", "--report-token-file", reportTokenPath, "--log-level", "info",
				"--rebalance-interval", topo.Interval.String(), "--lease", topo.Lease.String(),
				"--session-ttl", topo.SessionTTL.String(),
			}, []string{"7070/tcp"}, wait.ForHTTP("/healthz").WithPort("7070/tcp").WithStartupTimeout(time.Minute),
				netAlias{c.backbone, []string{name}, netip.Addr{}}, netAlias{c.coordNet, []string{name}, netip.Addr{}})
			if err != nil {
				return err
			}
			co := &coord{node: n, id: name}
			c.coords[i] = co
			return co.refresh(gctx)
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("coordinators: %v", err)
	}
	policy, err := os.ReadFile(filepath.Join("testdata", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.put(ctx, c.coords[0], "/v1/policy?note=e2e", policy); err != nil {
		t.Fatalf("apply the e2e policy: %v", err)
	}

	// Regions: Redis, then the pods, every region at once.
	g, gctx = errgroup.WithContext(ctx)
	for _, r := range c.regions {
		g.Go(func() error { return c.startRegion(gctx, r, etcdURLs) })
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("regions: %v", err)
	}
	// Every pod sees its peer through memberlist (the fallback share
	// depends on it).
	for _, r := range c.regions {
		for _, p := range r.pods {
			if err := eventually(ctx, 30*time.Second, func(ctx context.Context) error {
				n, err := c.metric(ctx, p, "allot_live_pods", nil)
				if err == nil && n != float64(topo.PodsPerRegion) {
					err = fmt.Errorf("allot_live_pods = %v, want %d", n, topo.PodsPerRegion)
				}
				return err
			}); err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
		}
	}
	t.Logf("cluster up in %v: %d etcd, %d coordinators, %d regions × (Redis + %d pods); P=%v L=%v TTL=%v",
		time.Since(start).Round(time.Millisecond), topo.Etcd, topo.Coordinators, len(topo.Regions), topo.PodsPerRegion,
		topo.Interval, topo.Lease, topo.SessionTTL)
	return c
}

func (c *cluster) etcdEndpoints() []string {
	var out []string
	for i := range c.topo.Etcd {
		out = append(out, fmt.Sprintf("http://etcd-%d:2379", i))
	}
	return out
}

func (c *cluster) startRegion(ctx context.Context, r *region, etcdURLs string) error {
	var err error
	if r.redis, err = c.run(ctx, r.name+"-redis", imgs.Redis, []string{"--port", "6379"}, []string{"6379/tcp"},
		wait.ForListeningPort("6379/tcp").WithStartupTimeout(time.Minute), netAlias{r.net, []string{"redis"}, netip.Addr{}}); err != nil {
		return err
	}
	// Gossip stays on the region's network, at fixed addresses: a pod on
	// three networks would otherwise advertise whichever address its
	// default lookup finds, and peers on other networks could not agree.
	var seeds []string
	podIP := func(i int) netip.Addr { return hostIP(r.subnet, byte(10+i)) }
	for i := range c.topo.PodsPerRegion {
		seeds = append(seeds, podIP(i).String()+":7946")
	}
	r.pods = make([]*pod, c.topo.PodsPerRegion)
	g, gctx := errgroup.WithContext(ctx)
	for i := range c.topo.PodsPerRegion {
		name := fmt.Sprintf("%s-%d", r.name, i)
		g.Go(func() error {
			n, err := c.run(gctx, name, imgs.Allot, []string{
				"regional", "--region", r.name, "--pod", name, "--redis", "redis:6379", "--etcd", etcdURLs,
				"--grpc-listen", "0.0.0.0:8081", "--http-listen", "0.0.0.0:8080",
				"--report-interval", c.topo.Interval.String(), "--lease-drift", c.topo.Drift.String(),
				"--store-timeout", c.topo.StoreTimeout.String(), "--report-token-file", reportTokenPath,
				"--gossip-listen", "0.0.0.0:7946", "--gossip-advertise", podIP(i).String(), "--gossip-join", strings.Join(seeds, ","),
				"--log-level", "info",
			}, []string{"8080/tcp", "8081/tcp"}, wait.ForHTTP("/readyz").WithPort("8080/tcp").WithStartupTimeout(2*time.Minute),
				netAlias{r.net, []string{name}, podIP(i)}, netAlias{c.etcdNet, []string{name}, netip.Addr{}},
				netAlias{c.coordNet, []string{name}, netip.Addr{}})
			if err != nil {
				return err
			}
			p := &pod{node: n, region: r.name}
			if err := p.refresh(gctx); err != nil {
				return err
			}
			r.pods[i] = p
			return nil
		})
	}
	return g.Wait()
}

// reportTokenPath is where allot containers find the cluster's region token.
const reportTokenPath = "/report-token"

// netAlias attaches a container to nw under aliases, at ip when it is
// valid (a network whose subnet the test chose).
type netAlias struct {
	nw      *testcontainers.DockerNetwork
	aliases []string
	ip      netip.Addr
}

// run creates one labelled container on the management network (first, so
// its published ports live there), connects it to the other networks with
// their aliases and addresses, and starts it.
func (c *cluster) run(ctx context.Context, name, image string, cmd, ports []string, w wait.Strategy, nets ...netAlias) (*node, error) {
	n := &node{name: name, aliases: map[string][]string{}}
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithCmd(cmd...),
		testcontainers.WithLabels(c.labels),
		testcontainers.WithExposedPorts(ports...),
		testcontainers.WithWaitStrategyAndDeadline(3*time.Minute, w),
		network.WithNetwork(nil, c.mgmt),
		testcontainers.WithConfigModifier(func(cfg *container.Config) {
			// No Hostname: Docker's DNS would answer it on every
			// network, the management one included, and a cut region
			// would still reach etcd through it.
			stop := 2
			cfg.StopTimeout = &stop
		}),
		testcontainers.WithNoStart(),
	}
	if image == imgs.Allot {
		// The images are FROM scratch: a file at the root needs no directory.
		opts = append(opts, testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader: strings.NewReader(c.reportToken + "\n"), ContainerFilePath: reportTokenPath, FileMode: 0o444}))
	}
	ctr, err := testcontainers.Run(ctx, image, opts...)
	if ctr != nil {
		n.c = ctr
		c.mu.Lock()
		c.nodes = append(c.nodes, n)
		c.mu.Unlock()
	}
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	for _, na := range nets {
		es := &mobynet.EndpointSettings{Aliases: na.aliases}
		if na.ip.IsValid() {
			es.IPAMConfig = &mobynet.EndpointIPAMConfig{IPv4Address: na.ip}
		}
		if _, err := docker.NetworkConnect(ctx, na.nw.ID, client.NetworkConnectOptions{Container: ctr.GetContainerID(), EndpointConfig: es}); err != nil {
			return nil, fmt.Errorf("connect %s: %w", name, err)
		}
		n.aliases[na.nw.ID] = na.aliases
	}
	if err := ctr.Start(ctx); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return n, nil
}

// freeSubnets returns n /24 subnets of 10.213.0.0/16 that no Docker network
// uses, for networks whose members need addresses known before they start.
func freeSubnets(ctx context.Context, n int) ([]netip.Prefix, error) {
	ns, err := docker.NetworkList(ctx, client.NetworkListOptions{})
	if err != nil {
		return nil, err
	}
	var used []netip.Prefix
	for _, nw := range ns.Items {
		for _, cfg := range nw.IPAM.Config {
			if cfg.Subnet.IsValid() {
				used = append(used, cfg.Subnet)
			}
		}
	}
	var out []netip.Prefix
	for k := 0; k < 256 && len(out) < n; k++ {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 213, byte(k), 0}), 24)
		if !slices.ContainsFunc(used, p.Overlaps) {
			out = append(out, p)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("no %d free /24 subnets in 10.213.0.0/16", n)
	}
	return out, nil
}

// hostIP returns the k-th address of a /24.
func hostIP(p netip.Prefix, k byte) netip.Addr {
	a := p.Addr().As4()
	a[3] = k
	return netip.AddrFrom4(a)
}

// teardown writes every container's log to out/logs and removes the
// containers and networks.
func (c *cluster) teardown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, r := range c.regions {
		for _, p := range r.pods {
			if e := p.ep.Load(); p != nil && e != nil {
				_ = e.conn.Close()
			}
		}
	}
	dir := filepath.Join(outDir, "logs", sanitize(t.Name()))
	_ = os.RemoveAll(dir)
	_ = os.MkdirAll(dir, 0o755)
	c.mu.Lock()
	nodes := append([]*node(nil), c.nodes...)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			if rc, err := n.c.Logs(ctx); err == nil {
				var buf bytes.Buffer
				_, _ = io.Copy(&buf, rc)
				_ = rc.Close()
				_ = os.WriteFile(filepath.Join(dir, n.name+".log"), demux(buf.Bytes()), 0o644)
			}
			if err := n.c.Terminate(ctx, testcontainers.StopTimeout(time.Second)); err != nil {
				t.Logf("terminate %s: %v", n.name, err)
			}
		})
	}
	wg.Wait()
	nets := []*testcontainers.DockerNetwork{c.mgmt, c.backbone, c.etcdNet, c.coordNet}
	for _, r := range c.regions {
		nets = append(nets, r.net)
	}
	for _, nw := range nets {
		if nw != nil {
			if err := nw.Remove(ctx); err != nil {
				t.Logf("remove network %s: %v", nw.Name, err)
			}
		}
	}
}

// demux strips Docker's 8-byte stream headers from a non-TTY log stream.
func demux(b []byte) []byte {
	var out bytes.Buffer
	for len(b) >= 8 {
		n := int(b[4])<<24 | int(b[5])<<16 | int(b[6])<<8 | int(b[7])
		if b[0] > 2 || b[1] != 0 || 8+n > len(b) {
			out.Write(b)
			break
		}
		out.Write(b[8 : 8+n])
		b = b[8+n:]
	}
	return out.Bytes()
}

func sanitize(s string) string {
	return strings.NewReplacer("/", "_", " ", "_").Replace(s)
}

// ---- faults ----

// cut disconnects a region's pods from etcd and the coordinators: they keep
// their Redis, their peers and their clients.
func (c *cluster) cut(ctx context.Context, r *region) error {
	for _, p := range r.pods {
		for _, nw := range []*testcontainers.DockerNetwork{c.etcdNet, c.coordNet} {
			if err := c.disconnect(ctx, p.node, nw); err != nil {
				return err
			}
		}
	}
	return nil
}

// heal reconnects a region's pods to etcd and the coordinators.
func (c *cluster) heal(ctx context.Context, r *region) error {
	for _, p := range r.pods {
		for _, nw := range []*testcontainers.DockerNetwork{c.etcdNet, c.coordNet} {
			if err := c.connect(ctx, p.node, nw); err != nil {
				return err
			}
		}
	}
	return nil
}

// disconnect cuts one link: n from network nw.
func (c *cluster) disconnect(ctx context.Context, n *node, nw *testcontainers.DockerNetwork) error {
	if _, err := docker.NetworkDisconnect(ctx, nw.ID, client.NetworkDisconnectOptions{Container: n.c.GetContainerID(), Force: true}); err != nil {
		return fmt.Errorf("disconnect %s: %w", n.name, err)
	}
	return nil
}

// connect heals one link: n joins nw again with its aliases.
func (c *cluster) connect(ctx context.Context, n *node, nw *testcontainers.DockerNetwork) error {
	if _, err := docker.NetworkConnect(ctx, nw.ID, client.NetworkConnectOptions{
		Container:      n.c.GetContainerID(),
		EndpointConfig: &mobynet.EndpointSettings{Aliases: n.aliases[nw.ID]},
	}); err != nil {
		return fmt.Errorf("connect %s: %w", n.name, err)
	}
	return nil
}

// kill sends SIGKILL: a crash, with no graceful resignation.
func (c *cluster) kill(ctx context.Context, n *node) error {
	_, err := docker.ContainerKill(ctx, n.c.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"})
	return err
}

// ---- coordinator API ----

func (c *cluster) put(ctx context.Context, co *coord, path string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+co.httpAddr()+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT %s: %s: %s", path, resp.Status, b)
	}
	return nil
}

func (c *cluster) getJSON(ctx context.Context, addr, path string, v any) error {
	b, err := c.get(ctx, addr, path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// get returns the body of GET addr/path, or an error naming the status
// when it is not 200.
func (c *cluster) get(ctx context.Context, addr, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// leader returns the coordinator that says it leads, among those running.
func (c *cluster) leader(ctx context.Context, skip *coord) (*coord, error) {
	for _, co := range c.coords {
		if co == skip {
			continue
		}
		var st coordinator.Status
		if err := c.getJSON(ctx, co.httpAddr(), "/v1/status", &st); err != nil {
			continue
		}
		if st.IsLeader {
			return co, nil
		}
	}
	return nil, errors.New("no coordinator leads")
}

// shares returns a tenant's grants as the leader sees them.
func (c *cluster) shares(ctx context.Context, tenant string) (coordinator.SharesView, error) {
	var v coordinator.SharesView
	co, err := c.leader(ctx, nil)
	if err != nil {
		return v, err
	}
	err = c.getJSON(ctx, co.httpAddr(), "/v1/shares/"+tenant, &v)
	return v, err
}

// metric sums the samples of a metric family whose labels include every
// pair in match, from a pod's /metrics (Prometheus text format).
func (c *cluster) metric(ctx context.Context, p *pod, name string, match map[string]string) (float64, error) {
	return c.metricAt(ctx, p.httpAddr(), name, match)
}

// metricAt is metric from the HTTP server at addr (a pod's or a
// coordinator's).
func (c *cluster) metricAt(ctx context.Context, addr, name string, match map[string]string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(name):]
		labels := ""
		if strings.HasPrefix(rest, "{") {
			end := strings.Index(rest, "}")
			if end < 0 {
				continue
			}
			labels, rest = rest[1:end], rest[end+1:]
		} else if !strings.HasPrefix(rest, " ") {
			continue // another metric with this prefix
		}
		ok := true
		for k, v := range match {
			ok = ok && strings.Contains(","+labels+",", ","+k+`="`+v+`",`)
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", name, line, err)
		}
		sum += v
	}
	return sum, nil
}

// eventually polls fn every 200ms until it returns nil or the deadline
// passes, and returns the last error then.
func eventually(ctx context.Context, within time.Duration, fn func(context.Context) error) error {
	deadline := time.Now().Add(within)
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", within, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
