package regional

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy/envoyconf"
)

// envoyKeyPolicy gives tenant edge-ip a global limit per remote_address:
// each address's budget is shared across the three regions on its own.
const envoyKeyPolicy = `version: 1
regions: [us-east, eu-west, ap-south]
default_tier: free
limits:
  - name: per-ip
    descriptors: [tenant, remote_address]
    rate: 40/s
    burst: 40
    scope: global
tiers:
  free:
    budget: {rate: 100000/s, burst: 100000}
`

// envoyKeyConfig is the envoyproxy/ratelimit file: 40 a second per client
// address (a bare key: a counter per value), and limits the bad ALLOT_GLOBAL_LIMITS
// entries below name.
const envoyKeyConfig = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 40}
  - key: X-Client
    rate_limit: {unit: second, requests_per_unit: 40}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 40}
  - key: ip_fast
    rate_limit: {unit: second, requests_per_unit: 50}
`

// TestEnvoyGlobalPerValueLimit marks an envoyproxy/ratelimit limit counted
// per value (per remote_address) global: the tenant's policy has a global
// limit per remote_address, so each address's budget is shared across
// three regions (a redis-server and two pods each; real etcd and
// coordinator) key by key. Two addresses are offered far more than the
// limit, one from every region, one mostly from eu-west: each admits at
// most R·t + B across the regions, and most of R·t, on its own; the second
// one's share follows its callers to eu-west. Bad entries of the global
// limits file are refused naming the field, and change nothing; a policy
// that loses the limit later makes the envoy limit decided by each
// region's own counter, counted as a fallback.
func TestEnvoyGlobalPerValueLimit(t *testing.T) {
	const R, B = 40.0, 40.0
	regions := []string{"us-east", "eu-west", "ap-south"}
	_, pods, all := startThreeRegions(t, envoyKeyPolicy, nil)
	wait.Until(t, 30*time.Second, func() error {
		for i, p := range all {
			te := p.s.view.tenant("edge-ip")
			if !p.s.Ready() || te == nil || len(te.resolved.Limits) != 1 || !te.resolved.Limits[0].Global {
				return fmt.Errorf("pod %d has not loaded the policy, or is not ready", i)
			}
		}
		return nil
	})
	f, err := envoyconf.ParseFile("config.yaml", []byte(envoyKeyConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoyconf.Build([]*envoyconf.File{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	const w = "global.yaml: global[0]"
	for _, c := range []struct {
		path string
		g    envoyconf.Global
		want string
	}{
		// An envoy key that is no allot descriptor name, and no name given.
		{"edge.X-Client", envoyconf.Global{Tenant: "edge-ip"}, w + ".descriptors: "},
		// A name the policy's global limits do not key on.
		{"edge.user", envoyconf.Global{Tenant: "edge-ip"}, w + `.tenant: global limit "edge.user": tenant edge-ip's policy has no global limit`},
		{"edge.X-Client", envoyconf.Global{Tenant: "edge-ip", Descriptors: []string{"client"}}, w + ".tenant: "},
		// The policy's limit, at another rate than the file's.
		{"edge.ip_fast", envoyconf.Global{Tenant: "edge-ip", Descriptors: []string{"remote_address"}}, w + `.limit: global limit "edge.ip_fast": requests_per_unit 50 per second, but tenant edge-ip's limit per-ip`},
		{"edge.remote_address", envoyconf.Global{Tenant: "edge-ip", Descriptors: []string{"remote_address", "x"}}, w + ".descriptors: "},
		{"edge.remote_address", envoyconf.Global{Tenant: "edge-ip", Descriptors: []string{"tenant"}}, w + ".descriptors[0]: "},
	} {
		c.g.Where = w
		err := all[0].s.SetEnvoyConfig(cfg, EnvoyOptions{Only: true, Global: map[string]envoyconf.Global{c.path: c.g}})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("SetEnvoyConfig(Global %s: %+v) = %v, want an error starting %q", c.path, c.g, err, c.want)
		}
	}
	if all[0].s.EnvoyConfig() != nil {
		t.Fatal("a refused configuration was set")
	}
	global := map[string]envoyconf.Global{"edge.remote_address": {Tenant: "edge-ip", Where: w}}
	for _, p := range all {
		if err := p.s.SetEnvoyConfig(cfg, EnvoyOptions{Only: true, Global: global}); err != nil {
			t.Fatal(err)
		}
	}

	// "everywhere" is offered from every pod at R (six times R in all);
	// "eu" mostly from eu-west's pods.
	const everywhere, eu = "10.0.0.1", "10.0.0.2"
	offer := map[string]map[string]int{ // region → address → decisions/s per pod
		"us-east":  {everywhere: 40, eu: 3},
		"eu-west":  {everywhere: 40, eu: 60},
		"ap-south": {everywhere: 40, eu: 3},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() }) // (before the pods stop)
	admitted := map[string]*atomic.Int64{everywhere: {}, eu: {}}
	var errs atomic.Int64
	start := time.Now()
	for _, region := range regions {
		for _, p := range pods[region] {
			api := rlsAPI{s: p.s}
			for addr, per := range offer[region] {
				wg.Go(func() {
					tick := time.NewTicker(time.Second / time.Duration(per))
					defer tick.Stop()
					req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address=" + addr)}}
					for {
						select {
						case <-ctx.Done():
							return
						case <-tick.C:
						}
						resp, err := api.ShouldRateLimit(ctx, req)
						switch {
						case err != nil && ctx.Err() == nil:
							errs.Add(1)
						case err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
							admitted[addr].Add(1)
						}
					}
				})
			}
		}
	}
	share := func(region, addr string) float64 {
		var most float64
		id := keyShareIDFor("edge-ip", "per-ip", addr)
		for _, p := range pods[region] {
			if te := p.s.view.tenant("edge-ip"); te != nil {
				r, _, _, _ := p.s.view.effectiveKey(time.Now(), te, id, &te.limits[0])
				most = max(most, r)
			}
		}
		return most
	}
	shares := func(addr string) string {
		return fmt.Sprintf("us-east %.1f eu-west %.1f ap-south %.1f", share("us-east", addr), share("eu-west", addr), share("ap-south", addr))
	}
	wait.Until(t, 20*time.Second, func() error {
		if share("eu-west", eu) < 0.6*R {
			return fmt.Errorf("eu-west's share of %s not there yet: %s", eu, shares(eu))
		}
		return nil
	})
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
	<-lctx.Done()
	lcancel()
	seen := fmt.Sprintf("%s: %s; %s: %s", everywhere, shares(everywhere), eu, shares(eu))
	for _, addr := range []string{everywhere, eu} {
		if sum := share("us-east", addr) + share("eu-west", addr) + share("ap-south", addr); sum > R*(1+1e-9) {
			t.Errorf("address %s: the regions together enforce %.1f/s, more than R = %.0f", addr, sum, R)
		}
	}
	cancel()
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if n := errs.Load(); n > 0 {
		t.Errorf("%d RLS calls failed", n)
	}
	for addr, a := range admitted {
		got := float64(a.Load())
		if most := R*elapsed + B; got > most {
			t.Errorf("address %s: admitted %v in %.1f s across three regions, more than R·t + B = %.1f", addr, got, elapsed, most)
		}
		// Each address gets most of its own R·t whatever the other does.
		if got < 0.6*R*elapsed {
			t.Errorf("address %s: admitted %v in %.1f s, under 60%% of R·t = %.0f: its key was not granted its budget", addr, got, elapsed, R*elapsed)
		}
	}
	// Two values, two budgets: together they admit more than one could.
	if sum := float64(admitted[everywhere].Load() + admitted[eu].Load()); sum <= R*elapsed+B {
		t.Errorf("the two addresses admitted %v together, within one budget's R·t + B = %.0f: they share one counter", sum, R*elapsed+B)
	}
	t.Logf("after %.1f s: %s; admitted %s %d (%.0f%% of R·t), %s %d (%.0f%%); R·t + B = %.0f", elapsed, seen,
		everywhere, admitted[everywhere].Load(), 100*float64(admitted[everywhere].Load())/(R*elapsed),
		eu, admitted[eu].Load(), 100*float64(admitted[eu].Load())/(R*elapsed), R*elapsed+B)

	// A value allot's descriptors cannot carry is refused, naming it.
	long := desc("remote_address=" + strings.Repeat("a", maxDescriptorValue+1))
	if _, err := (rlsAPI{s: all[0].s}).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{long}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[0].entries[0].value") {
		t.Errorf("a value of %d bytes on the global limit: %v, want InvalidArgument naming descriptors[0].entries[0].value", maxDescriptorValue+1, err)
	}

	// The policy loses the limit per remote_address: the envoy limit is
	// decided by each region's own counter (its 40 a second), counted.
	p := all[0]
	if _, err := p.st.ApplyPolicy(context.Background(), []byte(strings.Replace(envoyKeyPolicy, "remote_address]", "user]", 1)), 0, "test"); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		if te := p.s.view.tenant("edge-ip"); te == nil || te.resolved.Limits[0].Descriptors[1] != "user" {
			return fmt.Errorf("pod has not loaded the new policy")
		}
		return nil
	})
	api := rlsAPI{s: p.s}
	var got []string
	for range 3 {
		resp, err := api.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address=10.0.0.3")}})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, summary(resp))
	}
	// A fresh counter of this region: 40, less one a request.
	if want := "OK: OK/39,OK: OK/38,OK: OK/37"; strings.Join(got, ",") != want {
		t.Errorf("without the policy's limit: %v, want %s (this region's own counter)", got, want)
	}
	if n := testutil.ToFloat64(p.s.m.fallback.WithLabelValues("edge.remote_address", p.s.cfg.Region, "no_global_limit")); n != 3 {
		t.Errorf("allot_fallback_decisions_total{reason=no_global_limit} = %v, want 3", n)
	}
}
