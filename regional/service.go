package regional

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"golang.org/x/sync/errgroup"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/lease"
	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/gcra/pipeline"
	"github.com/allot-dev/allot/internal/state"
)

// Service is one regional pod: it decides requests against the region's
// store with the region's grants, reports traffic to the leader, and
// degrades as each limit's on_failure says when the store fails.
type Service struct {
	cfg   Config
	log   *slog.Logger
	m     *metrics
	store *state.Store
	view  *view
	// policy and budgets mirror etcd into view (nil without etcd).
	policy  *state.PolicyMirror
	budgets *state.BudgetMirror
	// counts holds, per coordinator shard, the counts its reporter sends
	// (nil until the shard count is known: decisions are then not
	// counted, and budget limits enforce nothing).
	counts  atomic.Pointer[[]*counters]
	breaker *gobreaker.CircuitBreaker[[]gcra.Answer]
	settler gcra.Settler // the region's store, when it keeps reservations
	charger gcra.Charger // and when it takes charges
	// restater restates keys under new limits (the region's store, when
	// it can): keys decided under a cold floor, as their grant arrives.
	restater gcra.Restater
	checker  gcra.Checker    // and when it can check a key without charging it
	local    *memstore.Store // the fallback limiter

	// leases serves every leased limit, each with its policy's lease size
	// (lease.Limiter.Reserve), over the region's store. Run runs it:
	// served decisions then read its coarse clock (one atomic load) instead
	// of the monotonic clock, so leased units may be served past their TTL
	// by at most its Tick (lease.DefaultConfig: 1 s leases, 10 ms ticks)
	// plus any delay of the goroutine; never early, and never a unit the
	// store did not count. Without Run, decisions read the clock.
	leases *lease.Limiter

	failMu     sync.Mutex
	failLogged map[string]time.Time

	warm atomic.Bool // the store answered once (or warmUp gave up)

	// envoy answers RLS requests from envoyproxy/ratelimit's configuration
	// (SetEnvoyConfig); nil: none.
	envoy atomic.Pointer[envoyTable]
	// envoyCheckWarned: the check-only warning was logged.
	envoyCheckWarned atomic.Bool
}

// New validates cfg and builds a Service. Run starts it.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// A pod's identity is unique per process: the leader counts every
	// process that may hold a lease, and a restarted pod is a new one.
	var b [4]byte
	_, _ = rand.Read(b[:])
	if cfg.Pod == "" {
		cfg.Pod = cfg.Region
	}
	cfg.Pod += "-" + hex.EncodeToString(b[:])
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	settler, _ := cfg.Store.(gcra.Settler)
	charger, _ := cfg.Store.(gcra.Charger)
	restater, _ := cfg.Store.(gcra.Restater)
	checker, _ := cfg.Store.(gcra.Checker)
	if bs, ok := cfg.Store.(gcra.BatchStore); ok && cfg.Coalesce {
		ps, err := pipeline.New(bs, pipeline.DefaultConfig())
		if err != nil {
			return nil, fmt.Errorf("regional: coalescing store: %w", err)
		}
		cfg.Store = ps
	}
	// The fallback's buckets start empty: Redis may have spent the burst
	// just before it failed.
	lcfg := memstore.DefaultConfig()
	lcfg.StartEmpty = true
	local, err := memstore.New(lcfg)
	if err != nil {
		return nil, err
	}
	st := state.New(cfg.Etcd, cfg.Prefix)
	s := &Service{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "regional", "region", cfg.Region, "pod", cfg.Pod),
		store:      st,
		view:       newView(cfg.Region, cfg.Drift),
		local:      local,
		failLogged: map[string]time.Time{},
		settler:    settler,
		charger:    charger,
		restater:   restater,
		checker:    checker,
	}
	s.breaker = gobreaker.NewCircuitBreaker[[]gcra.Answer](gobreaker.Settings{
		Name:         "store-" + cfg.Region,
		MaxRequests:  3,
		Timeout:      cfg.BreakerOpen,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= cfg.BreakerFailures },
		IsSuccessful: func(err error) bool { return !isStoreFailure(err) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			s.log.Warn("store circuit breaker", "from", from.String(), "to", to.String())
		},
	})
	// Leases reach the store as every other decision does: through the
	// breaker, under the store timeout, observed in the store metrics.
	if s.leases, err = lease.New(guardedStore{s}, lease.DefaultConfig()); err != nil {
		return nil, fmt.Errorf("regional: leases: %w", err)
	}
	if s.m, err = newMetrics(cfg.Registerer, cfg.Region, s); err != nil {
		return nil, err
	}
	if cfg.Etcd != nil {
		if err := s.mirrors(); err != nil {
			return nil, fmt.Errorf("regional: %w", err)
		}
	}
	return s, nil
}

// mirrors sets up the mirrors of the policy and the budgets into the view.
// A record that fails to decode is logged and counted
// (allot_state_decode_errors_total, in the registry without a region
// label: a coordinator of the same process shares the counter); the pod
// keeps the last good policy, and a tenant whose budget record does not
// decode keeps its last good one (or, after a resync, the policy's).
func (s *Service) mirrors() error {
	mcfg := func(what string) state.MirrorConfig {
		c := state.DefaultMirrorConfig()
		c.Registerer = s.cfg.Registerer
		c.OnResync = func(err error) { s.log.Warn("etcd "+what+" resync", "err", err) }
		c.OnDecodeError = func(e *state.DecodeError) {
			s.log.Warn("etcd record does not decode: ignored", "kind", e.Kind, "key", e.Key, "revision", e.Rev, "err", e.Err)
		}
		return c
	}
	var err error
	if s.policy, err = state.NewPolicyMirror(s.store, policyMirror{s.view}, mcfg("policy")); err != nil {
		return err
	}
	s.budgets, err = state.NewBudgetMirror(s.store, budgetMirror{s.view}, mcfg("budgets"))
	return err
}

// Pod returns the pod's name.
func (s *Service) Pod() string { return s.cfg.Pod }

// Ready reports whether the pod has its policy and has synced its grants:
// until then it cannot decide. Without etcd, it is ready once it holds an
// envoyproxy/ratelimit configuration.
func (s *Service) Ready() bool {
	if s.cfg.Etcd == nil {
		return s.warm.Load() && s.envoy.Load() != nil
	}
	return s.warm.Load() && s.view.ready()
}

// warmUp makes one decision on a private key before the pod reports ready,
// so that the store's connections are open and the script is loaded when
// the first real request arrives (otherwise it would pay both against the
// few-ms store timeout and fall back). It tries for a few seconds; a store
// that stays down does not keep the pod unready — its limits' on_failure
// then decides, which is what a ready pod with a dead Redis does anyway.
func (s *Service) warmUp(ctx context.Context) {
	defer s.warm.Store(true)
	req := []gcra.Request{{Key: "allot:v1:{__warmup__}:" + s.cfg.Pod, Limit: gcra.Limit{T: 1, Burst: 1 << 20}, Cost: 1}}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.cfg.Store.Decide(cctx, req)
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.log.Warn("store not answering at start; ready anyway: limits decide by on_failure until it does")
}

// Run mirrors policy, budgets and grants from etcd, reports to the leader
// every ReportInterval, sweeps the local stores and advances the leases'
// coarse clock, until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	if s.cfg.Etcd == nil {
		// Standalone: envoyproxy/ratelimit configurations only, no policy,
		// no coordinator.
		g.Go(func() error { return ignoreCtx(s.local.Run(ctx)) })
		g.Go(func() error { s.warmUp(ctx); return nil })
		g.Go(func() error { return s.leases.Run(ctx) })
		return g.Wait()
	}
	g.Go(func() error { return ignoreCtx(s.policy.Run(ctx)) })
	g.Go(func() error { return ignoreCtx(s.budgets.Run(ctx)) })
	g.Go(func() error { return ignoreCtx(s.local.Run(ctx)) })
	g.Go(func() error { return s.report(ctx) })
	g.Go(func() error { return s.restateCold(ctx) })
	g.Go(func() error { s.warmUp(ctx); return nil })
	g.Go(func() error { return s.leases.Run(ctx) })
	return g.Wait()
}

// report waits for the cluster's coordinator shard count, then runs one
// reporter per shard until ctx ends.
func (s *Service) report(ctx context.Context) error {
	n, err := s.awaitShards(ctx)
	if err != nil {
		return ignoreCtx(err)
	}
	s.startShards(n)
	g, ctx := errgroup.WithContext(ctx)
	for i, c := range *s.counts.Load() {
		r := newReporter(s, i, c)
		g.Go(func() error { return r.run(ctx) })
	}
	return g.Wait()
}

// startShards sets up n shards' protocol state and counts.
func (s *Service) startShards(n int) {
	s.view.setShards(n)
	cs := make([]*counters, n)
	for i := range cs {
		// The pod's MaxTenants split between its shards' tables.
		cs[i] = newCounters(max(1, (s.cfg.MaxTenants+n-1)/n))
	}
	s.counts.Store(&cs)
}

// awaitShards reads the coordinator shard count from etcd, polling until a
// coordinator recorded it (a pod of a new cluster may start first).
func (s *Service) awaitShards(ctx context.Context) (int, error) {
	logged := false
	for {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.ReportTimeout)
		n, err := s.store.Shards(rctx)
		cancel()
		if err == nil {
			if n > 1 {
				s.log.Info("coordinator shards", "shards", n)
			}
			return n, nil
		}
		if !logged {
			logged = true
			s.log.Info("waiting for a coordinator to record the cluster's shard count in etcd (the pod reports once it is there)", "err", err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// countsOf returns shard's counts (nil before the shard count is known).
func (s *Service) countsOf(shard int) *counters {
	cs := s.counts.Load()
	if cs == nil || shard < 0 || shard >= len(*cs) {
		return nil
	}
	return (*cs)[shard]
}

func ignoreCtx(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// livePods is the region's live pod count, at least 1.
func (s *Service) livePods() int {
	if s.cfg.LivePods == nil {
		return 1
	}
	return max(1, s.cfg.LivePods())
}

func (s *Service) grantAge() float64 {
	at := s.view.grantsOldest()
	if at.IsZero() {
		return -1
	}
	return s.cfg.Now().Sub(at).Seconds()
}

func (s *Service) leaseValid() float64 {
	if u := s.view.leaseUntil(); !u.IsZero() && s.cfg.Now().Before(u) {
		return 1
	}
	return 0
}

func (s *Service) leaseLeft() float64 {
	u := s.view.leaseUntil()
	if u.IsZero() {
		return -1
	}
	return u.Sub(s.cfg.Now()).Seconds()
}

// Leased reports whether the pod's lease is valid now: it enforces its
// grants (otherwise its floors).
func (s *Service) Leased() bool { return s.leaseValid() == 1 }
