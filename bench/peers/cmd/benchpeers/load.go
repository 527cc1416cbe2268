package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gubernator-io/gubernator/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allot-dev/allot/client"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// callFunc makes one decision for tenant on goroutine g's connection and
// says whether it was allowed.
type callFunc func(ctx context.Context, g, tenant int) (allowed bool, err error)

// batchFunc makes one call carrying several decisions, for tenants first,
// first+1, ... (modulo the tenant count), on goroutine g's connection. It
// returns how many were decided (answered, allowed or denied) and how many
// of those were denied; err is set when fewer than all were decided.
type batchFunc func(ctx context.Context, g, first int) (decided, denied int, err error)

// driver is how the load generator drives one peer: each call makes per
// decisions (1: one decision per call, latency per decision; more: a batch,
// latency per batch).
type driver struct {
	call batchFunc
	per  int
}

// single drives call, one decision per call.
func single(call callFunc) driver {
	return driver{per: 1, call: func(ctx context.Context, g, tenant int) (int, int, error) {
		ok, err := call(ctx, g, tenant)
		switch {
		case err != nil:
			return 0, 0, err
		case !ok:
			return 1, 1, nil
		}
		return 1, 0, nil
	}}
}

// sample is what one case measured.
type sample struct {
	// decisions answered (allowed or denied) by calls that completed inside
	// the measured window.
	decisions int64
	denied    int64
	// errors counts decisions not made (a failed batch counts all of its).
	errors   int64
	firstErr error
	elapsed  time.Duration
	// lat holds every counted call's latency, sorted: one per decision, or
	// one per batch for a batch driver.
	lat []time.Duration
}

// drive runs d on conc goroutines, each with one call in flight, for
// warmup+dur. Calls that complete inside [start+warmup, start+warmup+dur]
// are counted; throughput is their decisions over dur. Tenants rotate
// through a shared counter, d.per of them per call. mark (if not nil) is
// called with 0 as the measured window opens and 1 as it closes, from a
// goroutine of its own.
func drive(ctx context.Context, d driver, conc, tenants int, warmup, dur time.Duration, mark func(int)) sample {
	type worker struct {
		lat       []time.Duration
		decisions int64
		denied    int64
		errors    int64
		firstErr  error
	}
	per := uint64(max(d.per, 1))
	ws := make([]worker, conc)
	var next atomic.Uint64
	start := time.Now()
	t0, t1 := start.Add(warmup), start.Add(warmup+dur)
	cctx, cancel := context.WithDeadline(ctx, t1.Add(30*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	if mark != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, at := range []time.Time{t0, t1} {
				t := time.NewTimer(time.Until(at))
				select {
				case <-t.C:
				case <-cctx.Done():
					t.Stop()
					return
				}
				mark(i)
			}
		}()
	}
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &ws[g]
			w.lat = make([]time.Duration, 0, 4096)
			for {
				s := time.Now()
				if !s.Before(t1) || cctx.Err() != nil {
					return
				}
				first := int((next.Add(per) - per) % uint64(tenants))
				decided, denied, err := d.call(cctx, g, first)
				e := time.Now()
				if e.Before(t0) || e.After(t1) {
					continue
				}
				if missed := int64(per) - int64(decided); missed > 0 {
					w.errors += missed
					if w.firstErr == nil {
						w.firstErr = err
						if err == nil {
							w.firstErr = fmt.Errorf("%d of %d decisions missing, no error", missed, per)
						}
					}
				}
				if decided == 0 {
					continue
				}
				w.decisions += int64(decided)
				w.denied += int64(denied)
				w.lat = append(w.lat, e.Sub(s))
			}
		}()
	}
	wg.Wait()
	var out sample
	n := 0
	for i := range ws {
		n += len(ws[i].lat)
	}
	out.lat = make([]time.Duration, 0, n)
	for i := range ws {
		out.lat = append(out.lat, ws[i].lat...)
		out.decisions += ws[i].decisions
		out.denied += ws[i].denied
		out.errors += ws[i].errors
		if out.firstErr == nil {
			out.firstErr = ws[i].firstErr
		}
	}
	slices.Sort(out.lat)
	out.elapsed = dur
	return out
}

// grpcPool is a few client connections to one server; goroutine g uses
// conns[g % len].
type grpcPool []*grpc.ClientConn

func dialPool(addr string, n int) (grpcPool, error) {
	p := make(grpcPool, 0, n)
	for range n {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			p.close()
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		c.Connect()
		p = append(p, c)
	}
	return p, nil
}

func (p grpcPool) conn(g int) *grpc.ClientConn { return p[g%len(p)] }

func (p grpcPool) close() {
	for _, c := range p {
		_ = c.Close()
	}
}

// tenantName is the tenant (key) every peer sees for index i.
func tenantName(i int) string { return "bench-" + strconv.Itoa(i) }

// rlsDomain is the RLS domain sent to every RLS server.
const rlsDomain = "bench"

// modeKey is the descriptor that selects allot's exact or leased limit. Every
// RLS peer gets the same two entries (tenant, mode), so the requests are
// byte for byte the same; peers key on both.
const modeKey = "mode"

// rlsCall returns the one RLS client used for allot's RLS and every RLS
// peer: ShouldRateLimit with one descriptor {tenant, mode} and hits 1, on
// requests built once per tenant.
func rlsCall(pool grpcPool, tenants int, mode string) callFunc {
	clients := make([]rlsv3.RateLimitServiceClient, len(pool))
	for i, c := range pool {
		clients[i] = rlsv3.NewRateLimitServiceClient(c)
	}
	reqs := make([]*rlsv3.RateLimitRequest, tenants)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: rlsDomain, Descriptors: rlsCallDescriptor(tenantName(i), mode), HitsAddend: 1}
	}
	return func(ctx context.Context, g, tenant int) (bool, error) {
		r, err := clients[g%len(clients)].ShouldRateLimit(ctx, reqs[tenant])
		if err != nil {
			return false, err
		}
		return r.GetOverallCode() == rlsv3.RateLimitResponse_OK, nil
	}
}

// rlsCallDescriptor is the one descriptor of every RLS request.
func rlsCallDescriptor(tenant, mode string) []*rlcommonv3.RateLimitDescriptor {
	return []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
		{Key: "tenant", Value: tenant},
		{Key: modeKey, Value: mode},
	}}}
}

// allotGRPCCall is allot.v1.Limiter/Decide with {tenant, mode}, cost 1.
func allotGRPCCall(pool grpcPool, tenants int, mode string) callFunc {
	clients := make([]allotv1.LimiterClient, len(pool))
	for i, c := range pool {
		clients[i] = allotv1.NewLimiterClient(c)
	}
	reqs := make([]*allotv1.DecideRequest, tenants)
	for i := range reqs {
		reqs[i] = &allotv1.DecideRequest{Descriptors: map[string]string{"tenant": tenantName(i), modeKey: mode}, Cost: 1}
	}
	return func(ctx context.Context, g, tenant int) (bool, error) {
		r, err := clients[g%len(clients)].Decide(ctx, reqs[tenant])
		if err != nil {
			return false, err
		}
		return r.GetAllowed(), nil
	}
}

// allotHTTPCall is POST /v1/decide with {tenant, mode}, cost 1, over
// keep-alive connections (one per goroutine at most).
func allotHTTPCall(hc *http.Client, base string, tenants int, mode string) callFunc {
	url := base + "/v1/decide"
	bodies := make([][]byte, tenants)
	for i := range bodies {
		b, _ := json.Marshal(map[string]any{"descriptors": map[string]string{"tenant": tenantName(i), modeKey: mode}, "cost": 1})
		bodies[i] = b
	}
	return func(ctx context.Context, _ int, tenant int) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bodies[tenant]))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var d struct {
			Allowed bool `json:"allowed"`
		}
		err = json.NewDecoder(resp.Body).Decode(&d)
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
			return false, fmt.Errorf("POST %s: status %d", url, resp.StatusCode)
		}
		if err != nil {
			return false, fmt.Errorf("POST %s: decode: %w", url, err)
		}
		return d.Allowed, nil
	}
}

// newHTTPClient keeps up to maxConns idle keep-alive connections to one
// host, so every goroutine keeps its own.
func newHTTPClient(maxConns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns: maxConns, MaxIdleConnsPerHost: maxConns, IdleConnTimeout: time.Minute,
		DisableCompression: true, ForceAttemptHTTP2: false,
	}}
}

// gubernatorCall is gubernator's own V1/GetRateLimits with one request:
// name "bench", unique key the tenant, hits 1, the same limit (per second,
// burst equal to the rate), token bucket.
func gubernatorCall(pool grpcPool, tenants int, limit int64) callFunc {
	clients := make([]gubernator.V1Client, len(pool))
	for i, c := range pool {
		clients[i] = gubernator.NewV1Client(c)
	}
	reqs := make([]*gubernator.GetRateLimitsReq, tenants)
	for i := range reqs {
		reqs[i] = &gubernator.GetRateLimitsReq{Requests: []*gubernator.RateLimitReq{{
			Name: rlsDomain, UniqueKey: tenantName(i), Hits: 1, Limit: limit, Burst: limit,
			Duration: 1000, Algorithm: gubernator.Algorithm_TOKEN_BUCKET,
		}}}
	}
	return func(ctx context.Context, g, tenant int) (bool, error) {
		r, err := clients[g%len(clients)].GetRateLimits(ctx, reqs[tenant])
		if err != nil {
			return false, err
		}
		rs := r.GetResponses()
		if len(rs) != 1 {
			return false, fmt.Errorf("GetRateLimits: %d responses, want 1", len(rs))
		}
		if e := rs[0].GetError(); e != "" {
			return false, errors.New("GetRateLimits: " + e)
		}
		return rs[0].GetStatus() == gubernator.Status_UNDER_LIMIT, nil
	}
}

// allotClientCall is Decide through allot's Go client (package client),
// {tenant, mode}, cost 1, on one Client that every goroutine shares: with
// the client's default coalescing, concurrent calls travel together as
// independent DecideBatch RPCs.
func allotClientCall(c *client.Client, tenants int, mode string) callFunc {
	desc := make([]map[string]string, tenants)
	for i := range desc {
		desc[i] = map[string]string{"tenant": tenantName(i), modeKey: mode}
	}
	return func(ctx context.Context, _ int, tenant int) (bool, error) {
		d, err := c.Decide(ctx, desc[tenant], 1)
		if err != nil {
			return false, err
		}
		return d.Allowed, nil
	}
}

// allotBatchCall is allot.v1.Limiter/DecideBatch of per requests
// ({tenant, mode}, cost 1, consecutive tenants), independent: each request
// is answered on its own, so one that fails counts alone. Requests are
// built once per tenant and batches once per first tenant.
func allotBatchCall(pool grpcPool, tenants, per int, mode string) batchFunc {
	clients := make([]allotv1.LimiterClient, len(pool))
	for i, c := range pool {
		clients[i] = allotv1.NewLimiterClient(c)
	}
	reqs := make([]*allotv1.DecideRequest, tenants)
	for i := range reqs {
		reqs[i] = &allotv1.DecideRequest{Descriptors: map[string]string{"tenant": tenantName(i), modeKey: mode}, Cost: 1}
	}
	batches := make([]*allotv1.DecideBatchRequest, tenants)
	for first := range batches {
		b := &allotv1.DecideBatchRequest{Requests: make([]*allotv1.DecideRequest, per), Independent: true}
		for j := range per {
			b.Requests[j] = reqs[(first+j)%tenants]
		}
		batches[first] = b
	}
	return func(ctx context.Context, g, first int) (decided, denied int, err error) {
		r, err := clients[g%len(clients)].DecideBatch(ctx, batches[first])
		if err != nil {
			return 0, 0, err
		}
		rs := r.GetResponses()
		if len(rs) != per {
			return 0, 0, fmt.Errorf("DecideBatch: %d responses for %d requests", len(rs), per)
		}
		for _, x := range rs {
			switch {
			case x.GetErrorCode() != 0:
				if err == nil {
					err = fmt.Errorf("DecideBatch: a request failed: code %d: %s", x.GetErrorCode(), x.GetError())
				}
			case !x.GetAllowed():
				decided++
				denied++
			default:
				decided++
			}
		}
		return decided, denied, err
	}
}
