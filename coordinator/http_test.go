package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/wait"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

const token = "s3cret"

// api starts one leading coordinator with its HTTP API.
func api(t *testing.T) (*node, *httptest.Server) {
	t.Helper()
	srv := etcdtest.Start(t)
	n := startNode(t, srv, "solo")
	wait.Until(t, 10*time.Second, func() error {
		if !n.c.IsLeader() {
			return errors.New("not leading yet")
		}
		return nil
	})
	reg := prometheus.NewRegistry()
	hs := httptest.NewServer(n.c.Handler(Auth{Token: token}, reg))
	t.Cleanup(hs.Close)
	return n, hs
}

func do(t *testing.T, method, url, auth, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

func TestHTTPAdmin(t *testing.T) {
	_, hs := api(t)
	u := hs.URL
	pol := string(examplePolicy(t))

	steps := []struct {
		name       string
		method     string
		path, auth string
		body       string
		code       int
		check      func(map[string]any) bool
	}{
		{"write without token", "PUT", "/v1/policy", "", pol, 401, nil},
		{"write with wrong token", "PUT", "/v1/policy", "nope", pol, 401, nil},
		{"budget before policy", "PUT", "/v1/budgets/t1", token, `{"rate":"5/s","burst":3}`, 409, func(m map[string]any) bool {
			return strings.Contains(m["error"].(string), "apply one first")
		}},
		{"apply policy", "PUT", "/v1/policy", token, pol, 200, func(m map[string]any) bool { return m["version"].(float64) == 1 }},
		{"bad policy names line and field", "PUT", "/v1/policy", token, strings.Replace(pol, "rate: 50/s", "rate: 10/x", 1), 400,
			func(m map[string]any) bool { return m["field"] == "limits[1].rate" && m["line"].(float64) > 0 }},
		{"policy unchanged", "GET", "/v1/policy", "", "", 200, func(m map[string]any) bool { return m["version"].(float64) == 1 }},
		{"put budget", "PUT", "/v1/budgets/t1", token, `{"rate":"5/s","burst":3,"mode":"pinned","home":"us-east"}`, 200,
			func(m map[string]any) bool { return m["version"].(float64) == 1 && m["home"] == "us-east" }},
		{"bad budget names field", "PUT", "/v1/budgets/t1", token, `{"rate":"10/x","burst":3}`, 400, func(m map[string]any) bool { return m["field"] == "rate" }},
		{"unknown json field", "PUT", "/v1/budgets/t1", token, `{"rate":"5/s","burst":3,"brust":1}`, 400, nil},
		{"get budget", "GET", "/v1/budgets/t1", "", "", 200, func(m map[string]any) bool { return m["rate"] == "5/s" }},
		{"list budgets", "GET", "/v1/budgets", "", "", 200, func(m map[string]any) bool { return len(m["budgets"].([]any)) == 1 }},
		{"shares", "GET", "/v1/shares/t1", "", "", 200, func(m map[string]any) bool { return len(m["regions"].([]any)) == 3 && m["mode"] == "pinned" }},
		{"status", "GET", "/v1/status", "", "", 200, func(m map[string]any) bool { return m["is_leader"] == true }},
		{"apply v2", "PUT", "/v1/policy?note=more", token, strings.Replace(pol, "rate: 100/s, burst: 20", "rate: 150/s, burst: 20", 1), 200, nil},
		{"history", "GET", "/v1/policy/history", "", "", 200, func(m map[string]any) bool { return len(m["versions"].([]any)) == 2 }},
		{"stale if_version", "PUT", "/v1/policy?if_version=1", token, pol, 409, nil},
		{"rollback", "POST", "/v1/policy/rollback", token, `{}`, 200, func(m map[string]any) bool { return m["document"] == pol && m["restored_from"].(float64) == 1 }},
		{"delete budget", "DELETE", "/v1/budgets/t1", token, "", 200, nil},
		{"get deleted budget", "GET", "/v1/budgets/t1", "", "", 404, nil},
	}
	for _, s := range steps {
		code, m := do(t, s.method, u+s.path, s.auth, s.body)
		if code != s.code || (s.check != nil && !s.check(m)) {
			t.Errorf("%s: %s %s = %d %v, want %d", s.name, s.method, s.path, code, m, s.code)
		}
	}
	// The status page renders for a person, once the leader has loaded the
	// policy (at its next rebalance).
	wait.Until(t, 5*time.Second, func() error {
		resp, err := http.Get(u + "/")
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte("Leader")) || !bytes.Contains(b, []byte("<td>us-east</td>")) {
			return errors.New("GET / does not name the leader and the regions:\n" + string(b))
		}
		return nil
	})
}

func TestGRPCAdmin(t *testing.T) {
	n, _ := api(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	n.c.cfg.Reports = ReportAuth{Insecure: true} // reports' own tests: reportauth_test.go
	n.c.RegisterGRPC(gs, Auth{Token: token})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	admin := allotv1.NewAdminClient(conn)
	ctx := context.Background()
	_, err = admin.ApplyPolicy(ctx, &allotv1.ApplyPolicyRequest{Document: string(examplePolicy(t))})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ApplyPolicy without token = %v, want Unauthenticated", err)
	}
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	if _, err := admin.ApplyPolicy(actx, &allotv1.ApplyPolicyRequest{Document: string(examplePolicy(t))}); err != nil {
		t.Fatal(err)
	}
	_, err = admin.PutBudget(actx, &allotv1.PutBudgetRequest{Budget: &allotv1.Budget{Tenant: "t1", Rate: "10/x", Burst: 1}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "rate") {
		t.Errorf("PutBudget(bad rate) = %v, want InvalidArgument naming rate", err)
	}
	st, err := admin.Status(ctx, &allotv1.StatusRequest{})
	if err != nil || !st.GetIsLeader() {
		t.Errorf("Status = %v, %v; want is_leader", st, err)
	}
	// Pods report through allot.v1.Coordinator.
	coord := allotv1.NewCoordinatorClient(conn)
	wait.Until(t, 5*time.Second, func() error {
		r, err := coord.Report(ctx, &allotv1.ReportRequest{Region: "us-east", Pod: "p1", IntervalMs: 100,
			Usage: []*allotv1.TenantUsage{{Tenant: "t42", Offered: 10, Admitted: 10}}})
		if err != nil {
			return err
		}
		if !r.GetAccepted() || r.GetLeaseMs() != n.c.cfg.Lease.Milliseconds() {
			return errors.New("report not accepted with a lease")
		}
		return nil
	})
	_, err = coord.Report(ctx, &allotv1.ReportRequest{Region: "mars", Pod: "p1", IntervalMs: 100})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Report(region mars) = %v, want InvalidArgument", err)
	}
}
