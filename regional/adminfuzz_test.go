package regional

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/coordinator"
	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// adminEnv is a leading coordinator (admin API over HTTP and gRPC) and one
// pod of us-east on a real redis-server, sharing an embedded etcd; the pod
// reports to the coordinator, which grants.
type adminEnv struct {
	p       *pod
	adminHS *httptest.Server
	admin   allotv1.AdminClient
	policyV int64 // the policy version in force (this env's writes only)
	n       atomic.Int64
}

func startAdminEnv(tb testing.TB) *adminEnv {
	tb.Helper()
	etcd := etcdtest.Start(tb)
	rs := redistest.Start(tb)
	rc := redis.NewClient(redistest.ClientOptions(rs.Addr))
	tb.Cleanup(func() { _ = rc.Close() })
	store, err := redisstore.New(rc)
	if err != nil {
		tb.Fatal(err)
	}
	p := startPodOn(tb, etcd, store, func(c *Config) { c.ReportInterval = 100 * time.Millisecond })

	ccfg := coordinator.DefaultConfig()
	ccfg.ID, ccfg.Etcd = "fuzz", etcd.Client(tb)
	ccfg.SessionTTL, ccfg.RebalanceInterval, ccfg.Lease = time.Second, 100*time.Millisecond, 1500*time.Millisecond
	ccfg.Shares.Interval = ccfg.RebalanceInterval
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ccfg.GRPCAddr = lis.Addr().String()
	coord, err := coordinator.New(ccfg)
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer()
	coord.RegisterGRPC(gs, coordinator.Auth{Insecure: true})
	go func() { _ = gs.Serve(lis) }()
	tb.Cleanup(gs.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- coord.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("coordinator: %v", err)
		}
	})
	hs := httptest.NewServer(coord.Handler(coordinator.Auth{Insecure: true}, nil))
	tb.Cleanup(hs.Close)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	e := &adminEnv{p: p, adminHS: hs, admin: allotv1.NewAdminClient(conn)}
	pv, _, err := p.st.Policy(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	e.policyV = pv.Version
	return e
}

// policyVersion is the policy version the pod enforces, from its
// allot_policy_version gauge.
func (e *adminEnv) policyVersion(tb testing.TB) int64 {
	tb.Helper()
	mfs, err := e.p.reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "allot_policy_version" && len(mf.GetMetric()) == 1 {
			return int64(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	tb.Fatal("no allot_policy_version gauge")
	return 0
}

// call sends a request and returns its status and body.
func call(tb testing.TB, method, url, body string, header map[string]string) (int, string) {
	tb.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// fuzzUnits are the rate units the fuzz picks from: the usual ones and
// long periods, where bursts overflow first.
var fuzzUnits = []string{"s", "m", "h", "10s", "1ms", "1000h", "100000h"}

func fuzzRate(count int64, unit uint8) string {
	return fmt.Sprintf("%d/%s", count, fuzzUnits[int(unit)%len(fuzzUnits)])
}

// fuzzDoc renders a small policy around the pod's region: a budget limit, a
// fixed-rate limit (maybe leased), a tier with a budget and an override.
func fuzzDoc(regions uint8, floor float64, deny bool, tierRate int64, tierUnit uint8, tierBurst, userRate int64, userUnit uint8, userBurst, lease int64) string {
	rs := []string{"us-east", "us-east, eu-west", "us-east, eu-west, ap-south"}[int(regions)%3]
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nregions: [%s]\ndefault_tier: free\n", rs)
	if !math.IsNaN(floor) {
		fmt.Fprintf(&b, "floor_fraction: %v\n", floor)
	}
	if deny {
		b.WriteString("unknown_tenants: deny\n")
	}
	b.WriteString("limits:\n  - {name: tenant, descriptors: [tenant], rate: budget, on_failure: open}\n")
	fmt.Fprintf(&b, "  - {name: user, descriptors: [tenant, user], rate: %s, burst: %d, lease: %d}\n", fuzzRate(userRate, userUnit), userBurst, lease)
	fmt.Fprintf(&b, "tiers:\n  free:\n    budget: {rate: %s, burst: %d}\n    limits:\n      user: {burst: %d}\n",
		fuzzRate(tierRate, tierUnit), tierBurst, max(1, userBurst/2))
	b.WriteString("tenants:\n  listed: {tier: free}\n")
	return b.String()
}

// FuzzAdminThenDecide: whatever the coordinator's admin API accepts — a
// small policy over HTTP, a budget over HTTP or gRPC — the pod's decide path
// then answers without a 500 (HTTP /v1/decide: 200 or 400; forward-auth:
// 200, 429 or 400; gRPC: OK or InvalidArgument), for the budgeted tenant, a
// listed one and a stranger, with and without a fixed-rate limit; and what
// it refuses is a 400 / InvalidArgument that stores nothing (I8). The seeds
// run in go test; the first is issue 12's burst 9223372036854775807.
func FuzzAdminThenDecide(f *testing.F) {
	type seed struct {
		policy                 bool
		regions                uint8
		floor                  float64
		deny                   bool
		tierRate               int64
		tierUnit               uint8
		tierBurst, userRate    int64
		userUnit               uint8
		userBurst, lease, rate int64
		unit                   uint8
		burst                  int64
		mode                   uint8
		viaGRPC                bool
		cost                   uint16
	}
	for _, s := range []seed{
		{rate: 1000, unit: 0, burst: math.MaxInt64},
		{rate: 1000, unit: 0, burst: math.MaxInt64, viaGRPC: true},
		{rate: 1, unit: 2, burst: 625_499, cost: 3},                    // 1/h at its largest burst
		{rate: 1, unit: 2, burst: 625_500},                             // one above
		{rate: 1_000_000, unit: 0, burst: 1 << 51, mode: 3, cost: 999}, // 1e6/s, full
		{rate: 1, unit: 6, burst: 6, mode: 2},                          // 1/100000h, pinned
		{rate: 1, unit: 6, burst: 7, viaGRPC: true},
		{rate: 0, unit: 0, burst: 5},
		{rate: 5, unit: 0, burst: -1},
		{policy: true, regions: 2, floor: 1e-300, tierRate: 1, tierUnit: 2, tierBurst: 625_499, userRate: 1, userUnit: 6, userBurst: 6, lease: 3, rate: 3, unit: 5, burst: 2, mode: 1},
		{policy: true, regions: 1, floor: 0.5, deny: true, tierRate: 1000, tierUnit: 0, tierBurst: math.MaxInt64, userRate: 50, userUnit: 0, userBurst: 20, rate: 100, unit: 0, burst: 20},
		{policy: true, regions: 1, floor: math.NaN(), deny: true, tierRate: 100, tierUnit: 0, tierBurst: 20, userRate: 1_000_000, userUnit: 0, userBurst: 1 << 45, lease: 1 << 41, rate: 1, unit: 4, burst: 1 << 40, cost: 1},
		{policy: true, regions: 0, floor: 0.1, tierRate: 100, tierUnit: 0, tierBurst: 20, userRate: 2, userUnit: 0, userBurst: 2, rate: 10, unit: 1, burst: 1, mode: 2},
	} {
		f.Add(s.policy, s.regions, s.floor, s.deny, s.tierRate, s.tierUnit, s.tierBurst, s.userRate, s.userUnit, s.userBurst, s.lease,
			s.rate, s.unit, s.burst, s.mode, s.viaGRPC, s.cost)
	}
	e := startAdminEnv(f)
	f.Fuzz(func(t *testing.T, applyPolicy bool, regions uint8, floor float64, deny bool, tierRate int64, tierUnit uint8, tierBurst, userRate int64,
		userUnit uint8, userBurst, lease, rate int64, unit uint8, burst int64, mode uint8, viaGRPC bool, cost uint16) {
		ctx := context.Background()
		admin := e.adminHS.URL
		if applyPolicy {
			doc := fuzzDoc(regions, floor, deny, tierRate, tierUnit, tierBurst, userRate, userUnit, userBurst, lease)
			code, body := call(t, "PUT", admin+"/v1/policy", doc, nil)
			switch code {
			case http.StatusOK:
				var pv coordinator.PolicyView
				if err := json.Unmarshal([]byte(body), &pv); err != nil {
					t.Fatal(err)
				}
				e.policyV = pv.Version
				wait.Until(t, 10*time.Second, func() error {
					if v := e.policyVersion(t); v != pv.Version {
						return fmt.Errorf("pod enforces policy version %d, want %d", v, pv.Version)
					}
					return nil
				})
			case http.StatusBadRequest:
				if !strings.Contains(body, `"field"`) && !strings.Contains(body, "line") {
					t.Errorf("PUT /v1/policy refused without naming a field or line: %s\n%s", body, doc)
				}
				if v := e.policyVersion(t); v != e.policyV {
					t.Errorf("refused policy changed the version the pod enforces: %d, want %d", v, e.policyV)
				}
			default:
				t.Fatalf("PUT /v1/policy = %d %s, want 200 or 400\n%s", code, body, doc)
			}
		}

		tenant := fmt.Sprintf("f%d", e.n.Add(1))
		modes := []string{"", "static", "pinned", "full"}
		m := modes[int(mode)%len(modes)]
		home := ""
		if m == "pinned" {
			home = "us-east"
		}
		r := fuzzRate(rate, unit)
		var accepted bool
		if viaGRPC {
			_, err := e.admin.PutBudget(ctx, &allotv1.PutBudgetRequest{Budget: &allotv1.Budget{Tenant: tenant, Rate: r, Burst: burst, Mode: m, Home: home}})
			switch status.Code(err) {
			case codes.OK:
				accepted = true
			case codes.InvalidArgument:
			default:
				t.Fatalf("gRPC PutBudget(%s, %s burst %d %s) = %v, want OK or InvalidArgument", tenant, r, burst, m, err)
			}
		} else {
			body := fmt.Sprintf(`{"rate":%q,"burst":%d,"mode":%q,"home":%q}`, r, burst, m, home)
			code, resp := call(t, "PUT", admin+"/v1/budgets/"+tenant, body, nil)
			switch code {
			case http.StatusOK:
				accepted = true
			case http.StatusBadRequest:
				if !strings.Contains(resp, `"field"`) {
					t.Errorf("PUT /v1/budgets/%s %s = 400 %s, want the field named", tenant, body, resp)
				}
			default:
				t.Fatalf("PUT /v1/budgets/%s %s = %d %s, want 200 or 400", tenant, body, code, resp)
			}
		}
		if accepted {
			wait.Until(t, 10*time.Second, func() error {
				if !e.p.s.view.hasBudget(tenant) {
					return errors.New("budget not mirrored yet")
				}
				return nil
			})
			// What was accepted is enforceable whole: every limit the tenant
			// resolves to, its budget included, is a gcra limit.
			for _, l := range e.p.s.view.tenant(tenant).resolved.Limits {
				if _, err := gcra.NewLimit(l.Rate, l.Burst); err != nil {
					t.Errorf("accepted budget %s burst %d %s: limit %q %v burst %d: %v", r, burst, m, l.Name, l.Rate, l.Burst, err)
				}
			}
		} else if code, resp := call(t, "GET", admin+"/v1/budgets/"+tenant, "", nil); code != http.StatusNotFound {
			t.Errorf("GET a refused budget = %d %s, want 404 (nothing stored)", code, resp)
		}

		c := int64(cost)
		for _, tn := range []string{tenant, "listed", "stranger" + tenant} {
			for _, d := range []map[string]string{{"tenant": tn}, {"tenant": tn, "user": "u1"}} {
				req := map[string]any{"descriptors": d}
				if c > 0 {
					req["cost"] = c
				}
				body, _ := json.Marshal(req)
				if code, resp := call(t, "POST", e.p.http.URL+"/v1/decide", string(body), nil); code != http.StatusOK && code != http.StatusBadRequest {
					t.Errorf("POST /v1/decide %s = %d %s, want 200 or 400 (budget %s burst %d %s accepted %v)", body, code, resp, r, burst, m, accepted)
				}
				h := map[string]string{"X-Allot-Tenant": d["tenant"]}
				if u, ok := d["user"]; ok {
					h["X-Allot-User"] = u
				}
				if c > 0 {
					h["X-Allot-Cost"] = strconv.FormatInt(c, 10)
				}
				switch code, resp := call(t, "GET", e.p.http.URL+"/v1/forward-auth", "", h); code {
				case http.StatusOK, http.StatusTooManyRequests, http.StatusBadRequest:
				default:
					t.Errorf("forward-auth %v = %d %s, want 200, 429 or 400", h, code, resp)
				}
				_, err := allotv1.NewLimiterClient(e.p.conn).Decide(ctx, &allotv1.DecideRequest{Descriptors: d, Cost: c})
				if code := status.Code(err); code != codes.OK && code != codes.InvalidArgument {
					t.Errorf("gRPC Decide %v cost %d = %v, want OK or InvalidArgument", d, c, err)
				}
			}
		}
	})
}
