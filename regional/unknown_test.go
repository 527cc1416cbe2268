package regional

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// unknownPod is a pod on a real redis-server.
func unknownPod(t *testing.T) *pod {
	t.Helper()
	rs := redistest.Start(t)
	rc := redis.NewClient(redistest.ClientOptions(rs.Addr))
	t.Cleanup(func() { _ = rc.Close() })
	store, err := redisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	return startPod(t, store, nil)
}

// With unknown_tenants: deny, a tenant with no entry in the policy and no
// budget record is denied on every transport (limit unknown_tenant, 429 on
// forward-auth, OVER_LIMIT on RLS), counted in allot_decisions_total and
// never reported; tenants with an entry or a budget are decided as before;
// with allow (the default) the stranger gets the default tier again.
func TestUnknownTenantsDeny(t *testing.T) {
	p := unknownPod(t)
	ctx := context.Background()
	base, err := os.ReadFile("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	deny := "unknown_tenants: deny\n" + string(base) + "tenants:\n  listed: {tier: free}\n"
	p.applyPolicy(t, deny, "stranger", func(te *tenantEntry) bool { return te.resolved.UnknownDenied })
	if _, err := p.st.PutBudget(ctx, "budgeted", policy.Budget{Rate: "5/s", Burst: 3, Mode: policy.ModePinned, Home: "us-east"}, false, 0); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		if !p.s.view.hasBudget("budgeted") {
			return errors.New("budget not mirrored yet")
		}
		return nil
	})

	denials := 0
	// HTTP /v1/decide.
	for _, tn := range []string{"listed", "budgeted"} {
		if code, d, raw := postDecide(t, p, `{"descriptors":{"tenant":"`+tn+`"}}`); code != 200 || !d.Allowed || d.Limit != "tenant" {
			t.Errorf("decide %s = %d %s, want allowed by the tenant limit", tn, code, raw)
		}
	}
	code, d, raw := postDecide(t, p, `{"descriptors":{"tenant":"stranger","user":"7"}}`)
	if code != 200 || d.Allowed || d.Limit != policy.UnknownTenantLimit || d.RetryAfterMS <= 0 {
		t.Errorf("decide stranger = %d %s, want denied by unknown_tenant with a retry-after", code, raw)
	}
	denials++

	// Forward-auth: 429 with Retry-After, as other denials.
	req, _ := http.NewRequest("GET", p.http.URL+"/v1/forward-auth", nil)
	req.Header.Set("X-Allot-Tenant", "stranger")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), policy.UnknownTenantLimit) {
		t.Errorf("forward-auth stranger = %d %v %q, want 429 with Retry-After naming unknown_tenant", resp.StatusCode, resp.Header, body)
	}
	denials++

	// gRPC Decide and DecideBatch.
	lim := allotv1.NewLimiterClient(p.conn)
	r, err := lim.Decide(ctx, &allotv1.DecideRequest{Descriptors: map[string]string{"tenant": "stranger"}, Cost: 1})
	if err != nil || r.GetAllowed() || r.GetLimit() != policy.UnknownTenantLimit {
		t.Errorf("gRPC Decide stranger = %v, %v; want denied by unknown_tenant", r, err)
	}
	denials++
	// (The known tenants' region shares come from the leader and may be a
	// floor's single unit at first, spent by the requests above: retry.)
	wait.Until(t, 10*time.Second, func() error {
		br, err := lim.DecideBatch(ctx, &allotv1.DecideBatchRequest{Requests: []*allotv1.DecideRequest{
			{Descriptors: map[string]string{"tenant": "listed"}},
			{Descriptors: map[string]string{"tenant": "stranger"}},
			{Descriptors: map[string]string{"tenant": "budgeted"}},
		}})
		if err == nil && len(br.GetResponses()) == 3 && (br.Responses[1].GetAllowed() || br.Responses[1].GetLimit() != policy.UnknownTenantLimit) {
			t.Fatalf("DecideBatch: stranger = %v, want denied by unknown_tenant", br.Responses[1])
		}
		if err == nil && len(br.GetResponses()) == 3 {
			denials++
		}
		if err != nil || len(br.GetResponses()) != 3 || !br.Responses[0].GetAllowed() || !br.Responses[2].GetAllowed() {
			time.Sleep(250 * time.Millisecond) // let the keys rest
			return fmt.Errorf("DecideBatch(listed, stranger, budgeted) = %v, %w; want allowed, denied by unknown_tenant, allowed", br, err)
		}
		return nil
	})

	// Envoy RLS.
	rr, err := rlsv3.NewRateLimitServiceClient(p.conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "x", Descriptors: []*ratelimitv3.RateLimitDescriptor{rlsDesc(0, "tenant", "stranger")},
	})
	if err != nil || rr.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("RLS stranger = %v, %v; want OVER_LIMIT", rr, err)
	}
	denials++

	if got := testutil.ToFloat64(p.s.m.decisions.WithLabelValues(policy.UnknownTenantLimit, "us-east", "denied")); got != float64(denials) {
		t.Errorf(`allot_decisions_total{limit="unknown_tenant",result="denied"} = %v, want %d`, got, denials)
	}
	if _, counted := p.s.countsOf(0).m.Load("stranger"); counted {
		t.Error("the stranger's requests are counted for the report: the coordinator would learn the tenant")
	}

	// Its budget deleted, budgeted is unknown too.
	if err := p.st.DeleteBudget(ctx, "budgeted"); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		if d, err := p.s.Decide(ctx, map[string]string{"tenant": "budgeted"}, 1); err != nil || d.Limit != policy.UnknownTenantLimit {
			return errors.New("budgeted not denied yet")
		}
		return nil
	})

	// allow: the default tier again, once the leader's next answer carries
	// the default tier's cold floor (it was zero under deny).
	p.applyPolicy(t, string(base), "stranger", func(te *tenantEntry) bool { return !te.resolved.UnknownDenied })
	wait.Until(t, 10*time.Second, func() error {
		if d, err := p.s.Decide(ctx, map[string]string{"tenant": "stranger"}, 1); err != nil || !d.Allowed || d.Limit != "tenant" {
			return fmt.Errorf("stranger under allow = %+v, %w; want allowed by the default tier", d, err)
		}
		return nil
	})
}
