package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/dev"
	"github.com/allot-dev/allot/internal/devtest"
)

// startAllot runs allot dev (one region, this example's policy) and returns
// a client of its region.
func startAllot(t *testing.T) *client.Client {
	t.Helper()
	pol, err := os.ReadFile("policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := dev.DefaultConfig()
	cfg.Regions, cfg.Policy, cfg.HTTPListen = []string{"us-east"}, string(pol), "127.0.0.1:0"
	cl := devtest.Start(t, cfg)
	c, err := client.New(client.Config{Target: cl.Regions[0].GRPCAddr, Insecure: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func startGateway(t *testing.T, upstream http.Handler) string {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	gw := httptest.NewServer(&Gateway{Upstream: u, Limiter: startAllot(t)})
	t.Cleanup(gw.Close)
	return gw.URL
}

// reply is a gateway's answer, its body read and closed.
type reply struct {
	StatusCode int
	Header     http.Header
}

func complete(t *testing.T, base, tenant string, maxTokens int, stream bool) (reply, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"m","max_tokens":%d,"stream":%v,"messages":[{"role":"user","content":"hello there"}]}`, maxTokens, stream)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Tenant", tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{StatusCode: resp.StatusCode, Header: resp.Header}, string(b)
}

// A tenant is charged the tokens it used, not the tokens it might have:
// with a burst of 4,000 tokens, two completions of max_tokens 3,000 that
// use a tenth of it both pass (without the settle the second would be
// denied), streamed or not; a third asking for more than is left is denied
// with 429 and Retry-After.
func TestGatewaySettlesUsage(t *testing.T) {
	base := startGateway(t, fakeModel{})
	for i, stream := range []bool{false, true} {
		resp, body := complete(t, base, "acme", 3000, stream)
		if resp.StatusCode != 200 {
			t.Fatalf("completion %d (stream %v): %d %s", i, stream, resp.StatusCode, body)
		}
		if stream && (!strings.Contains(body, "data: [DONE]") || strings.Count(body, `"delta"`) != 300) {
			t.Fatalf("streamed completion not passed through whole: %.200s", body)
		}
	}
	// 2 × (3 + 300) used of 4,000: 3,394 left; 3,500 is too many.
	resp, body := complete(t, base, "acme", 3497, false)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a completion beyond what is left: %d %s (Retry-After %q), want 429 with Retry-After", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	// Another tenant is untouched.
	if resp, body := complete(t, base, "globex", 3000, false); resp.StatusCode != 200 {
		t.Fatalf("another tenant: %d %s", resp.StatusCode, body)
	}
}

// The reservation without a settle would deny the second completion: the
// same two requests against an upstream that reports no usage (so the
// estimate stands) get 200 then 429.
func TestGatewayWithoutUsageKeepsTheEstimate(t *testing.T) {
	base := startGateway(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"chat.completion","choices":[]}`)
	}))
	if resp, body := complete(t, base, "acme", 3000, false); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	if resp, body := complete(t, base, "acme", 3000, false); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second, the first's estimate standing: %d %s, want 429", resp.StatusCode, body)
	}
}

// Requests are limited on their own: the eleventh at once gets 429.
func TestGatewayLimitsRequests(t *testing.T) {
	base := startGateway(t, fakeModel{})
	for i := range 10 {
		if resp, body := complete(t, base, "acme", 10, false); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	resp, body := complete(t, base, "acme", 10, false)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "requests") {
		t.Fatalf("eleventh request: %d %s, want 429 by the requests limit", resp.StatusCode, body)
	}
	if resp, _ := complete(t, base, "", 10, false); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no tenant: %d, want 401", resp.StatusCode)
	}
}

// The fake model streams server-sent events with the usage last.
func TestFakeModelStreams(t *testing.T) {
	srv := httptest.NewServer(fakeModel{})
	defer srv.Close()
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"max_tokens":50,"stream":true,"messages":[{"content":"abcd"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var last string
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			last = sc.Text()
		}
	}
	if !strings.Contains(last, `"total_tokens":6`) {
		t.Fatalf("last chunk %q, want the usage (1 + 5 tokens)", last)
	}
}
