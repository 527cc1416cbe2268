package regional

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/client"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// Bad input over HTTP and gRPC answers 400 / InvalidArgument naming the
// field; never a 500 or a panic.
func TestBadInputTable(t *testing.T) {
	p, _ := memPod(t)
	many := map[string]string{"tenant": "t1"}
	for i := range 10_000 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	manyJSON, _ := json.Marshal(map[string]any{"descriptors": many})
	huge := `{"descriptors":{"tenant":"t1","user":"` + strings.Repeat("x", 1<<20) + `"}}`
	cases := []struct {
		name  string
		body  string
		d     map[string]string
		cost  int64
		field string
	}{
		{"malformed JSON", `{"descriptors":`, nil, 0, "body"},
		{"missing tenant", `{"descriptors":{"user":"7"}}`, map[string]string{"user": "7"}, 1, "descriptors.tenant"},
		{"empty tenant", `{"descriptors":{"tenant":""}}`, map[string]string{"tenant": ""}, 1, "descriptors.tenant"},
		{"cost zero", `{"descriptors":{"tenant":"t1"},"cost":0}`, map[string]string{"tenant": "t1"}, -1, "cost"},
		{"cost negative", `{"descriptors":{"tenant":"t1"},"cost":-1}`, map[string]string{"tenant": "t1"}, -1, "cost"},
		{"cost above burst", `{"descriptors":{"tenant":"t1"},"cost":4}`, map[string]string{"tenant": "t1"}, 4, "cost"},
		{"cost not a number", `{"descriptors":{"tenant":"t1"},"cost":"x"}`, nil, 0, "cost"},
		{"1 MB body", huge, nil, 0, "body"},
		{"10,000 descriptors", string(manyJSON), many, 1, "descriptors"},
		{"value too long", `{"descriptors":{"tenant":"t1","user":"` + strings.Repeat("x", 2000) + `"}}`,
			map[string]string{"tenant": "t1", "user": strings.Repeat("x", 2000)}, 1, "descriptors.user"},
	}
	lim := allotv1.NewLimiterClient(p.conn)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, raw := postDecide(t, p, c.body)
			if code != http.StatusBadRequest || !strings.Contains(raw, c.field) {
				t.Errorf("HTTP: %d %.200s, want 400 naming %s", code, raw, c.field)
			}
			if c.d == nil {
				return
			}
			cost := c.cost
			if cost == -1 {
				cost = -5
			}
			_, err := lim.Decide(context.Background(), &allotv1.DecideRequest{Descriptors: c.d, Cost: cost})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.field) {
				t.Errorf("gRPC: %v, want InvalidArgument naming %s", err, c.field)
			}
		})
	}
}

// Tenants with ':', '%', '@' and unicode are accepted and cannot forge
// another tenant's or limit's key: each of these tenants has its own budget
// of 3. Names with braces, whitespace or path elements are refused
// (policy.ValidateTenant), over HTTP and gRPC alike.
func TestNoKeyForging(t *testing.T) {
	p, _ := memPod(t)
	lim := allotv1.NewLimiterClient(p.conn)
	for _, tn := range []string{"t1}", "{t1", "t1 ", "a/b", "../t1", "t1\x00"} {
		body, _ := json.Marshal(map[string]any{"descriptors": map[string]string{"tenant": tn}})
		if code, _, raw := postDecide(t, p, string(body)); code != http.StatusBadRequest || !strings.Contains(raw, "descriptors.tenant") {
			t.Errorf("POST /v1/decide tenant %q = %d %s, want 400 naming descriptors.tenant", tn, code, raw)
		}
		_, err := lim.Decide(context.Background(), &allotv1.DecideRequest{Descriptors: map[string]string{"tenant": tn}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors.tenant") {
			t.Errorf("gRPC Decide tenant %q = %v, want InvalidArgument naming descriptors.tenant", tn, err)
		}
	}
	tenants := []string{"t1", "t1:user", "t1:user:7", "t1%3Auser", "tënant", "用户", "t1@x"}
	for _, tn := range tenants {
		for i := range 4 {
			d, err := p.s.Decide(context.Background(), map[string]string{"tenant": tn}, 1)
			if err != nil {
				t.Fatalf("Decide(%q): %v", tn, err)
			}
			if want := i < 3; d.Allowed != want {
				t.Errorf("tenant %q request %d: allowed %v, want %v (its own burst of 3)", tn, i, d.Allowed, want)
			}
		}
	}
}

// FuzzDecideRequest: any body is answered with a decision or a 400, never
// a panic or a 500.
func FuzzDecideRequest(f *testing.F) {
	for _, s := range []string{`{"descriptors":{"tenant":"t1"},"cost":1}`, `{"descriptors":{"tenant":"a{b}:c","user":"ü"}}`, `{}`, `[]`, `{"cost":1e99}`} {
		f.Add(s)
	}
	p, _ := memPod(f)
	h := p.s.Handler(nil, "")
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/decide", strings.NewReader(body)))
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("POST /v1/decide %q = %d %s, want 200 or 400", body, rec.Code, rec.Body)
		}
		var req decideRequest
		if json.Unmarshal([]byte(body), &req) != nil {
			return
		}
		cost := int64(1)
		if req.Cost != nil {
			cost = *req.Cost
		}
		if err := checkRequest(req.Descriptors, cost); err != nil && !errors.Is(err, ErrBadRequest) {
			t.Fatalf("checkRequest(%q) = %v, not a bad request", body, err)
		}
	})
}

// A batch with one bad request is refused whole: nothing is charged.
func TestDecideBatchAllChecked(t *testing.T) {
	p, _ := memPod(t)
	lim := allotv1.NewLimiterClient(p.conn)
	_, err := lim.DecideBatch(context.Background(), &allotv1.DecideBatchRequest{Requests: []*allotv1.DecideRequest{
		{Descriptors: map[string]string{"tenant": "b1"}, Cost: 3},
		{Descriptors: map[string]string{"user": "no-tenant"}},
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "requests[1]: descriptors.tenant") ||
		strings.Count(err.Error(), "bad request") > 1 {
		t.Fatalf("DecideBatch with a bad second request = %v, want InvalidArgument naming requests[1]: descriptors.tenant once", err)
	}
	d, err := p.s.Decide(context.Background(), map[string]string{"tenant": "b1"}, 3)
	if err != nil || !d.Allowed {
		t.Errorf("b1's full burst after the refused batch = %+v, %v; want allowed (nothing was charged)", d, err)
	}
}

// An independent batch answers each request on its own: the bad one gets
// its error (INVALID_ARGUMENT naming the field) in its own response, the
// others are decided and charged.
func TestDecideBatchIndependent(t *testing.T) {
	p, _ := memPod(t)
	lim := allotv1.NewLimiterClient(p.conn)
	r, err := lim.DecideBatch(context.Background(), &allotv1.DecideBatchRequest{Independent: true, Requests: []*allotv1.DecideRequest{
		{Descriptors: map[string]string{"tenant": "i1"}, Cost: 3},
		{Descriptors: map[string]string{"user": "no-tenant"}},
		{Descriptors: map[string]string{"tenant": "i2"}, Cost: 0},
	}})
	if err != nil || len(r.GetResponses()) != 3 {
		t.Fatalf("independent DecideBatch = %v, %v; want 3 responses", r, err)
	}
	got := r.GetResponses()
	if !got[0].GetAllowed() || got[0].GetErrorCode() != 0 {
		t.Errorf("responses[0] = %v, want allowed", got[0])
	}
	if codes.Code(got[1].GetErrorCode()) != codes.InvalidArgument || !strings.Contains(got[1].GetError(), "descriptors.tenant") || got[1].GetAllowed() {
		t.Errorf("responses[1] = %v, want error_code 3 naming descriptors.tenant, not allowed", got[1])
	}
	if !got[2].GetAllowed() || got[2].GetErrorCode() != 0 {
		t.Errorf("responses[2] (cost 0 means 1) = %v, want allowed", got[2])
	}
	d, err := p.s.Decide(context.Background(), map[string]string{"tenant": "i1"}, 3)
	if err != nil || d.Allowed {
		t.Errorf("i1's full burst again after the batch = %+v, %v; want denied (the batch charged it)", d, err)
	}
}

// Forward-auth reads the headers the Go client's middleware and FromHeaders
// write: one prefix.
func TestHeaderPrefixMatchesClient(t *testing.T) {
	if DefaultHeaderPrefix != client.DefaultHeaderPrefix {
		t.Fatalf("regional.DefaultHeaderPrefix %q, client.DefaultHeaderPrefix %q", DefaultHeaderPrefix, client.DefaultHeaderPrefix)
	}
}
