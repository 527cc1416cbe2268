package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/allot-dev/allot/client"
)

// Limiter is what the gateway needs of allot: a plain decision for the
// request count, a reservation for the tokens (*client.Client).
type Limiter interface {
	Decide(ctx context.Context, descriptors map[string]string, cost int64) (client.Decision, error)
	Reserve(ctx context.Context, descriptors map[string]string, cost int64) (client.Decision, error)
}

// Gateway is a reverse proxy for an OpenAI-style chat completions API that
// limits each tenant on requests and on tokens: it reserves the tokens a
// completion may use (the prompt's estimate plus max_tokens) before calling
// the upstream, and settles with the usage the upstream reports.
type Gateway struct {
	Upstream *url.URL
	Limiter  Limiter
	// TenantHeader names the tenant (set by the authenticating proxy in
	// front, never by the caller). Default X-Tenant.
	TenantHeader string
	// DefaultMaxTokens is the completion budget of a request without
	// max_tokens. Default 256.
	DefaultMaxTokens int64
	HTTP             *http.Client
	Log              *slog.Logger
}

// completionRequest is the part of a chat completion request the gateway
// reads; the body goes upstream as it came.
type completionRequest struct {
	MaxTokens int64 `json:"max_tokens"`
	Stream    bool  `json:"stream"`
	Messages  []struct {
		Content string `json:"content"`
	} `json:"messages"`
}

// usage is the upstream's count of the tokens a completion used.
type usage struct {
	Usage *struct {
		TotalTokens int64 `json:"total_tokens"`
	} `json:"usage"`
}

// estimate is the tokens a request may use: about four bytes a token of
// prompt, plus its completion budget.
func (g *Gateway) estimate(r completionRequest) int64 {
	var n int64
	for _, m := range r.Messages {
		n += int64(len(m.Content)+3) / 4
	}
	max := r.MaxTokens
	if max <= 0 {
		max = g.DefaultMaxTokens
		if max <= 0 {
			max = 256
		}
	}
	return n + max
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "only POST /v1/chat/completions", http.StatusNotFound)
		return
	}
	h := g.TenantHeader
	if h == "" {
		h = "X-Tenant"
	}
	tenant := r.Header.Get(h)
	if tenant == "" {
		http.Error(w, h+": missing: the tenant", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4<<20))
	if err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req completionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "body: not a chat completion request: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	// One request, then the tokens it may use.
	d, err := g.Limiter.Decide(ctx, map[string]string{"tenant": tenant, "kind": "request"}, 1)
	if !g.admitted(w, d, err) {
		return
	}
	est := g.estimate(req)
	d, err = g.Limiter.Reserve(ctx, map[string]string{"tenant": tenant, "kind": "tokens"}, est)
	if !g.admitted(w, d, err) {
		return
	}
	meter := d.Meter()
	settle := func(actual int64, known bool) {
		if !known {
			actual = est // no usage reported: the estimate stands
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		meter.Add(actual)
		if s, err := meter.Finish(sctx); err != nil && !errors.Is(err, client.ErrNotReserved) {
			g.log().Warn("settle failed: the estimate stands", "tenant", tenant, "err", err)
		} else if err == nil {
			g.log().Debug("settled", "tenant", tenant, "reserved", s.Reserved, "actual", s.Actual)
		}
	}

	up, err := http.NewRequestWithContext(ctx, http.MethodPost, g.Upstream.JoinPath("/v1/chat/completions").String(), bytes.NewReader(body))
	if err != nil {
		settle(0, true)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	up.Header = r.Header.Clone()
	up.Header.Del(h)
	resp, err := g.httpClient().Do(up)
	if err != nil {
		settle(0, true) // nothing was generated
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	if !req.Stream || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		_, _ = w.Write(b)
		var u usage
		if json.Unmarshal(b, &u) == nil && u.Usage != nil {
			settle(u.Usage.TotalTokens, true)
		} else {
			settle(0, resp.StatusCode >= 400) // an error generated nothing
		}
		return
	}
	// Server-sent events, passed on as they come; the usage arrives in the
	// last chunk (OpenAI's stream_options.include_usage).
	var total int64
	known := false
	rd := bufio.NewReader(resp.Body)
	fl, _ := w.(http.Flusher)
	for {
		line, err := rd.ReadBytes('\n')
		if len(line) > 0 {
			_, _ = w.Write(line)
			if fl != nil && len(bytes.TrimSpace(line)) == 0 { // an event ends: pass it on now
				fl.Flush()
			}
			if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
				var u usage
				if json.Unmarshal(bytes.TrimSpace(data), &u) == nil && u.Usage != nil {
					total, known = u.Usage.TotalTokens, true
				}
			}
		}
		if err != nil {
			break
		}
	}
	if fl != nil {
		fl.Flush()
	}
	settle(total, known)
}

// admitted answers a denial or a limiter failure and reports whether the
// request may go on.
func (g *Gateway) admitted(w http.ResponseWriter, d client.Decision, err error) bool {
	switch {
	case errors.Is(err, client.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	case err != nil:
		// The limiter is out of reach: this gateway fails closed.
		http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
		return false
	case !d.Allowed:
		client.SetRateLimitHeaders(w.Header(), d)
		w.Header().Set("Retry-After", strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10))
		http.Error(w, fmt.Sprintf("rate limited by %s; retry in %v", d.Limit, d.RetryAfter.Round(time.Millisecond)), http.StatusTooManyRequests)
		return false
	}
	return true
}

func (g *Gateway) httpClient() *http.Client {
	if g.HTTP != nil {
		return g.HTTP
	}
	return http.DefaultClient
}

func (g *Gateway) log() *slog.Logger {
	if g.Log != nil {
		return g.Log
	}
	return slog.New(slog.DiscardHandler)
}
