package coordinator

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// A budget or policy the decide path could not enforce, and a tenant name
// ValidateTenant refuses, are refused by the admin API with 400 naming the
// field, and change nothing (I8).
func TestAdminRefusesUnusable(t *testing.T) {
	_, hs := api(t)
	u := hs.URL
	pol := string(examplePolicy(t))
	if code, m := do(t, "PUT", u+"/v1/policy", token, pol); code != 200 {
		t.Fatalf("apply policy = %d %v", code, m)
	}
	steps := []struct {
		name         string
		method, path string
		body         string
		field, msg   string
	}{
		{"int64-max burst", "PUT", "/v1/budgets/t9", `{"rate":"1000/s","burst":9223372036854775807}`, "burst",
			"burst: 9223372036854775807: rate 1000/s × burst exceeds the longest window allot can keep (about 71 years); lower the burst to at most 2251799813685"},
		{"slow rate, large burst", "PUT", "/v1/budgets/t9", `{"rate":"1/h","burst":1000000}`, "burst", "at most 625499"},
		{"rate below one unit per window", "PUT", "/v1/budgets/t9", `{"rate":"1/1000000h","burst":1}`, "rate", "below one unit per the maximum window"},
		{"burst below the regions", "PUT", "/v1/budgets/t9", `{"rate":"100/s","burst":2}`, "burst", "below 3, the number of regions"},
		{"tenant with a slash", "PUT", "/v1/budgets/a%2Fb", `{"rate":"100/s","burst":20}`, "tenant", "path separators"},
		{"tenant with braces", "PUT", "/v1/budgets/%7Bt9%7D", `{"rate":"100/s","burst":20}`, "tenant", "hash tag"},
		{"tenant with dots", "PUT", "/v1/budgets/a..b", `{"rate":"100/s","burst":20}`, "tenant", "path element"},
		{"get with a space", "GET", "/v1/budgets/a%20b", "", "tenant", "whitespace"},
		{"delete with a control character", "DELETE", "/v1/budgets/a%00b", "", "tenant", "non-printable"},
		{"shares with braces", "GET", "/v1/shares/%7Bt9%7D", "", "tenant", "hash tag"},
		{"policy burst beyond the window", "PUT", "/v1/policy", strings.Replace(pol, "burst: 20\n    scope: regional", "burst: 9223372036854775807\n    scope: regional", 1),
			"limits[1].burst", "rate 50/s × burst exceeds"},
		{"policy unknown_tenants", "PUT", "/v1/policy", strings.Replace(pol, "unknown_tenants: allow", "unknown_tenants: sometimes", 1), "unknown_tenants", "want allow"},
	}
	for _, s := range steps {
		code, m := do(t, s.method, u+s.path, token, s.body)
		msg, _ := m["error"].(string)
		if code != 400 || m["field"] != s.field || !strings.Contains(msg, s.msg) {
			t.Errorf("%s: %s %s = %d %v, want 400 naming %s with %q", s.name, s.method, s.path, code, m, s.field, s.msg)
		}
	}
	if code, m := do(t, "GET", u+"/v1/budgets", "", ""); code != 200 || len(m["budgets"].([]any)) != 0 {
		t.Errorf("budgets after refused writes = %d %v, want none", code, m)
	}
	if code, m := do(t, "GET", u+"/v1/policy", "", ""); code != 200 || m["version"].(float64) != 1 {
		t.Errorf("policy after refused writes = %d %v, want version 1", code, m)
	}
	// Names of any reasonable shape are fine.
	for _, tenant := range []string{"t-9_x.y", "org:team", "alice@example.com", "tënant"} {
		if code, m := do(t, "PUT", u+"/v1/budgets/"+tenant, token, `{"rate":"100/s","burst":20}`); code != 200 {
			t.Errorf("PUT /v1/budgets/%s = %d %v, want 200", tenant, code, m)
		}
	}
}

func TestGRPCAdminRefusesUnusable(t *testing.T) {
	n, _ := api(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	n.c.RegisterGRPC(gs, Auth{Token: token})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	admin := allotv1.NewAdminClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	if _, err := admin.ApplyPolicy(ctx, &allotv1.ApplyPolicyRequest{Document: string(examplePolicy(t))}); err != nil {
		t.Fatal(err)
	}
	_, err = admin.PutBudget(ctx, &allotv1.PutBudgetRequest{Budget: &allotv1.Budget{Tenant: "t9", Rate: "1000/s", Burst: 1<<63 - 1}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "burst: 9223372036854775807: rate 1000/s × burst exceeds") {
		t.Errorf("PutBudget(int64-max burst) = %v, want InvalidArgument naming burst", err)
	}
	if _, err := admin.GetBudget(ctx, &allotv1.GetBudgetRequest{Tenant: "t9"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetBudget(t9) after the refused write = %v, want NotFound", err)
	}
	_, err = admin.PutBudget(ctx, &allotv1.PutBudgetRequest{Budget: &allotv1.Budget{Tenant: "../../x", Rate: "10/s", Burst: 5}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "tenant") {
		t.Errorf("PutBudget(../../x) = %v, want InvalidArgument naming tenant", err)
	}
	if _, err := admin.GetBudget(ctx, &allotv1.GetBudgetRequest{Tenant: "a/b"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("GetBudget(a/b) = %v, want InvalidArgument", err)
	}
	if _, err := admin.DeleteBudget(ctx, &allotv1.DeleteBudgetRequest{Tenant: "{x}"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("DeleteBudget({x}) = %v, want InvalidArgument", err)
	}
}

// A record stored before tenant names were checked as now (here "a b") can
// still be removed; once gone, its name is refused like any other.
func TestDeleteLegacyTenant(t *testing.T) {
	n, hs := api(t)
	pol := string(examplePolicy(t))
	if code, m := do(t, "PUT", hs.URL+"/v1/policy", token, pol); code != 200 {
		t.Fatalf("apply policy = %d %v", code, m)
	}
	key := n.c.store.BudgetsPrefix() + url.PathEscape("a b")
	if _, err := n.c.cfg.Etcd.Put(context.Background(), key, `{"tenant":"a b","rate":"10/s","burst":5,"version":1}`); err != nil {
		t.Fatal(err)
	}
	if code, m := do(t, "DELETE", hs.URL+"/v1/budgets/a%20b", token, ""); code != 200 {
		t.Errorf("DELETE the legacy record = %d %v, want 200", code, m)
	}
	if code, m := do(t, "DELETE", hs.URL+"/v1/budgets/a%20b", token, ""); code != 400 || m["field"] != "tenant" {
		t.Errorf("DELETE it again = %d %v, want 400 naming tenant", code, m)
	}
}
