package regional

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/keys"
	"github.com/allot-dev/allot/policy"
	"github.com/allot-dev/allot/policy/envoyconf"
)

// EnvoyOptions are the settings of envoyproxy/ratelimit that shape how the
// RLS API answers from an envoyconf configuration.
type EnvoyOptions struct {
	// ShadowMode answers OK whatever the limits decide (its SHADOW_MODE):
	// decisions are still made and counted.
	ShadowMode bool
	// Only answers every RLS request from the configuration, never from
	// allot's policy: a domain the configuration does not hold has no
	// limits (every descriptor OK), as in the original service. Without
	// it, only the configuration's domains are answered from it and the
	// others from the policy. A Service without etcd always behaves so.
	Only bool
	// Headers adds the original's limit headers to every answer with a
	// limit (its LIMIT_RESPONSE_HEADERS_ENABLED), for the descriptor
	// closest to its limit: LimitHeader (requests per unit),
	// RemainingHeader and ResetHeader (whole seconds until the limit is
	// fully rested). Empty names take the original's defaults,
	// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset.
	Headers                                   bool
	LimitHeader, RemainingHeader, ResetHeader string
	// FailClosed denies while the store is unavailable; otherwise each
	// limit fails open through a local limiter at its rate divided by the
	// region's live pods.
	FailClosed bool
	// QuotaMode puts every limit in quota mode (its QUOTA_MODE): over a
	// limit answers OK.
	QuotaMode bool
	// ChargeOverLimit charges a descriptor's hits even when they do not
	// fit (as debt past the burst: the key admits again once it is paid),
	// as the original counts hits past its limit, and answers a
	// descriptor whose hits_addend is 0 (a check) from its key:
	// OVER_LIMIT while the key is past its limit. Check-then-charge usage
	// limits (hits_addend 0 as the request starts, its real cost when the
	// stream ends, as Envoy Gateway's cost-based limits send them) are
	// then bounded. A caller that keeps sending past a limit keeps paying:
	// it is admitted again only once it slows below the rate. Limits
	// shared across regions (Global) are not affected.
	ChargeOverLimit bool
	// KeyPrefix starts every counter's key (its CACHE_KEY_PREFIX), so that
	// several deployments can share one Redis.
	KeyPrefix string
	// Global marks limits of the configuration (by path, as /rlconfig
	// lists them, e.g. edge.path_/api) global, each decided as a request
	// of an allot tenant by allot's policy instead of by a counter of
	// this region's own, so that it spends a budget the coordinator
	// shares across regions. A limit with one counter (exact values on
	// its path) is decided as {tenant: T}: it spends the tenant's budget.
	// A limit counted per value (a bare key, or a wildcard without
	// share_threshold, on its path) is decided as {tenant: T, NAME:
	// value, ...}, one descriptor per entry counted per value (named by
	// envoyconf.Global.Descriptors, default the entry's key): the
	// tenant's policy must have a global limit with a rate of its own
	// keyed on exactly those (policy.Resolved.KeyLimit), which shares
	// each value's budget across regions; its rate must be the file's
	// requests_per_unit per unit, and its rate and burst are what is
	// enforced. Both are checked when the configuration is set if the
	// pod has a policy; a policy that loses that limit later makes the
	// limit's descriptors decided by this region's own counter, logged
	// and counted in allot_fallback_decisions_total{reason=
	// "no_global_limit"}. Every other limit of the policy that the
	// descriptors match applies too (one keyed on tenant alone, e.g. the
	// tenant's budget, caps every value together). Needs etcd.
	Global map[string]envoyconf.Global
}

// Envoy answer limits: a request beyond them is refused as malformed.
const (
	maxEnvoyEntries = 64
	maxEnvoyValue   = 4096
	// maxEnvoyCost caps a descriptor's hits_addend: above every burst
	// (requests_per_unit is a uint32), so over every limit.
	maxEnvoyCost = 1 << 40
)

// envoyTable is a loaded configuration, compiled for the decide path.
// It is immutable.
type envoyTable struct {
	cfg    *envoyconf.Config
	opts   EnvoyOptions
	limits map[*envoyconf.Limit]*envoyLimit
}

// envoyLimit is one limit of a configuration, ready to decide.
type envoyLimit struct {
	src *envoyconf.Limit // nil for a request's own limit
	rl  policy.ResolvedLimit
	lc  limitCache
	// admits is false for requests_per_unit 0: every hit is over.
	admits bool
	// current is the limit as RLS statuses carry it (shared, read-only).
	current *rlsv3.RateLimitResponse_RateLimit
	// ec are its children of the original's metrics.
	ec *envoyCounters
	// tenant, when set, is the allot tenant whose budget the limit spends
	// (EnvoyOptions.Global).
	tenant string
	// names are, for a global limit counted per value, the allot
	// descriptors its values are decided under, and vary where each
	// value sits in a matching descriptor's entries (nil: one counter).
	names []string
	vary  []int
	// keyed caches, for a limit with names, the last tenant entry checked
	// for the policy's limit that shares its values; warned is set once
	// its absence was logged.
	keyed  atomic.Pointer[keyedCheck]
	warned atomic.Bool
}

// keyedCheck is whether one tenant entry (one policy) has the global limit
// a per-value envoy limit's values are shared by.
type keyedCheck struct {
	te  *tenantEntry
	err error
}

// keyLimit returns the limit of te's policy (tenant's) that shares the
// values of a global envoy limit counted per value, decided under names,
// or why it has none; rate and burst are the envoy limit's, for the
// example the error gives.
func keyLimit(te *tenantEntry, tenant string, names []string, rate gcra.Rate, burst int64) (*policy.ResolvedLimit, error) {
	l, ok := te.resolved.KeyLimit(names)
	if !ok {
		return nil, fmt.Errorf("tenant %s's policy has no global limit with a rate of its own keyed on exactly [tenant %s] (without match), e.g. {name: %s, descriptors: [tenant, %s], rate: %s, burst: %d, scope: global}",
			tenant, strings.Join(names, " "), strings.ReplaceAll(names[0], "_", "-"), strings.Join(names, ", "), rate, burst)
	}
	return l, nil
}

// keyedOK reports whether the tenant's policy has the global limit that
// shares a per-value limit's values (true when no policy is loaded yet:
// Decide answers that). The first time it has not, it logs why.
func (s *Service) keyedOK(el *envoyLimit) bool {
	te := s.view.tenant(el.tenant)
	if te == nil {
		return true
	}
	c := el.keyed.Load()
	if c == nil || c.te != te {
		_, err := keyLimit(te, el.tenant, el.names, el.rl.Rate, el.rl.Burst)
		c = &keyedCheck{te: te, err: err}
		el.keyed.Store(c)
	}
	if c.err != nil && el.warned.CompareAndSwap(false, true) {
		s.log.Warn("a global envoy limit counted per value has no global limit in its tenant's policy to share its values: deciding it with this region's own counter, as if it were not global",
			"limit", el.rl.Name, "err", c.err.Error(),
			"note", "further such decisions are counted in allot_fallback_decisions_total{reason=\"no_global_limit\"}, not logged")
	}
	return c.err == nil
}

func (s *Service) newEnvoyLimit(src *envoyconf.Limit, name string, rpu uint32, unit string, failClosed bool) (*envoyLimit, error) {
	period, ok := envoyconf.UnitPeriod(unit)
	if !ok {
		return nil, fmt.Errorf("unit %q: want SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR", unit)
	}
	el := &envoyLimit{
		src: src,
		ec:  s.m.forEnvoy(name),
		rl: policy.ResolvedLimit{
			Name: name, Rate: gcra.Rate{Count: int64(rpu), Period: period}, Burst: int64(rpu), FailClosed: failClosed,
		},
		current: &rlsv3.RateLimitResponse_RateLimit{
			RequestsPerUnit: rpu,
			Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unit)]),
		},
	}
	if src != nil {
		el.current.Name = src.Name
	}
	if rpu > 0 {
		lim, err := gcra.NewLimit(el.rl.Rate, el.rl.Burst)
		if err != nil {
			return nil, err
		}
		el.lc.lim, el.admits = lim, true
	}
	return el, nil
}

// SetEnvoyConfig makes the RLS API answer from cfg (envoyproxy/ratelimit's
// configuration) as that service would, each limit enforced by GCRA in this
// region's store; nil stops it. It replaces the configuration at once:
// decisions in flight finish with the one they started with. Counters are
// keyed by domain and descriptor entries, so a limit that keeps its
// entries keeps its state across configurations.
func (s *Service) SetEnvoyConfig(cfg *envoyconf.Config, opts EnvoyOptions) error {
	if cfg == nil {
		s.envoy.Store(nil)
		return nil
	}
	if s.cfg.Etcd == nil {
		opts.Only = true
	}
	if opts.LimitHeader == "" {
		opts.LimitHeader = "RateLimit-Limit"
	}
	if opts.RemainingHeader == "" {
		opts.RemainingHeader = "RateLimit-Remaining"
	}
	if opts.ResetHeader == "" {
		opts.ResetHeader = "RateLimit-Reset"
	}
	if len(opts.Global) > 0 && s.cfg.Etcd == nil {
		return errors.New("global limits: need etcd (ALLOT_ETCD): the coordinator shares their budgets across regions")
	}
	names := make(map[string][]string, len(opts.Global))
	for _, path := range slices.Sorted(maps.Keys(opts.Global)) {
		g := opts.Global[path]
		ns, err := cfg.CheckGlobal(path, g)
		if err != nil {
			return err
		}
		names[path] = ns
		if err := s.checkKeyLimit(cfg, path, g, ns); err != nil {
			return err
		}
	}
	t := &envoyTable{cfg: cfg, opts: opts, limits: map[*envoyconf.Limit]*envoyLimit{}}
	for _, l := range cfg.All() {
		if l.Unlimited {
			continue
		}
		el, err := s.newEnvoyLimit(l, l.Path, l.RequestsPerUnit, l.Unit, opts.FailClosed)
		if err != nil {
			return fmt.Errorf("%s:%d: limit %s: %w", l.File, l.Line, l.Path, err)
		}
		el.tenant = opts.Global[l.Path].Tenant
		if el.tenant != "" && l.PerValue {
			el.names = names[l.Path]
			for _, e := range l.PerValueEntries {
				el.vary = append(el.vary, e.Index)
			}
		}
		t.limits[l] = el
	}
	s.envoy.Store(t)
	return nil
}

// checkKeyLimit checks, when the pod has a policy, that the global limit
// at path counted per value (names: its allot descriptors; nil for one
// counter, which needs nothing) has a global limit in its tenant's policy
// to share its values, at the file's rate.
func (s *Service) checkKeyLimit(cfg *envoyconf.Config, path string, g envoyconf.Global, names []string) error {
	te := s.view.tenant(g.Tenant)
	if names == nil || te == nil {
		return nil
	}
	l, _ := cfg.Limit(path)
	r, b, ok := l.GCRA()
	kl, err := keyLimit(te, g.Tenant, names, r, b)
	if err != nil {
		return g.Errorf(path, "tenant", "%v", err)
	}
	if ok && !sameRate(r, kl.Rate) {
		return g.Errorf(path, "limit", "requests_per_unit %d per %s, but tenant %s's limit %s that shares its values is %s: make them equal (the policy's rate and burst are enforced; the file's is what answers and headers report)",
			l.RequestsPerUnit, strings.ToLower(l.Unit), g.Tenant, kl.Name, kl.Rate)
	}
	return nil
}

// sameRate reports whether a and b are one rate (1/s and 60/m are).
func sameRate(a, b gcra.Rate) bool {
	x, y := a.PerSecond(), b.PerSecond()
	return math.Abs(x-y) <= 1e-9*max(x, y)
}

// EnvoyConfig returns the configuration SetEnvoyConfig set (nil: none).
func (s *Service) EnvoyConfig() *envoyconf.Config {
	if t := s.envoy.Load(); t != nil {
		return t.cfg
	}
	return nil
}

// envoyDescriptor is one descriptor of an RLS request on the envoy path.
type envoyDescriptor struct {
	lim       *envoyLimit // nil: no limit applies
	unlimited bool
	key       string
	cost      int64
	// descs are the descriptors a global limit counted per value is
	// decided with (tenant and each value; nil otherwise).
	descs map[string]string
	// dec is the decision; decided is set once it is made; global when
	// Decide made it (and counted it).
	dec             Decision
	decided, global bool
}

// envoyRateLimit answers an RLS request from t, following envoyproxy/
// ratelimit's service: each descriptor is matched and counted on its own;
// unlimited descriptors answer OK with the largest remaining; replaced
// limits and descriptors without a limit answer OK; a descriptor's own
// limit (Envoy's descriptor override) is used when the domain is known;
// hits_addend of a descriptor (0 allowed: check only) else of the request
// (at least 1) is the cost; shadow_mode and quota_mode limits never make
// the answer OVER_LIMIT, nor does ShadowMode.
func (s *Service) envoyRateLimit(ctx context.Context, t *envoyTable, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	domain := r.GetDomain()
	if domain == "" {
		return nil, s.envoyError(codes.InvalidArgument, "domain: must not be empty")
	}
	descs := r.GetDescriptors()
	if len(descs) == 0 {
		return nil, s.envoyError(codes.InvalidArgument, "descriptors: missing: want at least one")
	}
	if len(descs) > maxBatch {
		return nil, s.envoyError(codes.InvalidArgument, "descriptors: %d, at most %d", len(descs), maxBatch)
	}
	known := t.cfg.HasDomain(domain)
	reqCost := max(1, int64(r.GetHitsAddend()))
	var dsBuf [4]envoyDescriptor
	ds := dsBuf[:0]
	if len(descs) > len(dsBuf) {
		ds = make([]envoyDescriptor, 0, len(descs))
	}
	ds = ds[:len(descs)]
	var srcBuf [4]*envoyconf.Limit
	var srcs []*envoyconf.Limit // the matched limits, for replaces
	var entBuf [8]envoyconf.Entry
	entries := entBuf[:0]
	for i, desc := range descs {
		es := desc.GetEntries()
		if len(es) > maxEnvoyEntries {
			return nil, s.envoyError(codes.InvalidArgument, "descriptors[%d].entries: %d, at most %d", i, len(es), maxEnvoyEntries)
		}
		entries = entries[:0]
		for j, e := range es {
			if len(e.GetKey())+len(e.GetValue()) > maxEnvoyValue {
				return nil, s.envoyError(codes.InvalidArgument, "descriptors[%d].entries[%d]: key and value %d bytes, at most %d", i, j, len(e.GetKey())+len(e.GetValue()), maxEnvoyValue)
			}
			entries = append(entries, envoyconf.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		d := &ds[i]
		d.cost = reqCost
		if h := desc.GetHitsAddend(); h != nil {
			// A uint64: beyond any burst long before it would overflow.
			d.cost = int64(min(h.GetValue(), maxEnvoyCost))
		}
		if !known {
			continue
		}
		if ov := desc.GetLimit(); ov != nil {
			unit := rlsv3.RateLimitResponse_RateLimit_Unit(ov.GetUnit()).String()
			el, err := s.newEnvoyLimit(nil, overridePath(domain, entries), ov.GetRequestsPerUnit(), unit, t.opts.FailClosed)
			if err != nil {
				return nil, s.envoyError(codes.InvalidArgument, "descriptors[%d].limit: %v", i, err)
			}
			// Its own counter, apart from the configured limit's on the
			// same entries (and from other overrides'): a rate written
			// under one limit must never be read under another.
			d.lim, d.key = el, envoyKey(t.opts.KeyPrefix, domain, entries, "envoy-"+strconv.FormatUint(uint64(ov.GetRequestsPerUnit()), 10)+"-"+unit)
			continue
		}
		m, ok := t.cfg.Match(domain, entries)
		if !ok {
			continue
		}
		if srcs == nil {
			if srcs = srcBuf[:]; len(descs) > len(srcBuf) {
				srcs = make([]*envoyconf.Limit, len(descs))
			}
			srcs = srcs[:len(descs)]
		}
		srcs[i] = m.Limit
		if m.Limit.Unlimited {
			d.unlimited = true
			continue
		}
		d.lim, d.key = t.limits[m.Limit], envoyKey(t.opts.KeyPrefix, domain, m.Entries, "envoy")
		if el := d.lim; el != nil && el.names != nil {
			d.descs = make(map[string]string, 1+len(el.names))
			d.descs["tenant"] = el.tenant
			for k, j := range el.vary {
				if j >= len(m.Entries) {
					return nil, s.envoyError(codes.Internal, "descriptors[%d]: limit %s: entry %d counted per value is missing", i, el.rl.Name, j)
				}
				v := m.Entries[j].Value
				if len(v) > maxDescriptorValue {
					return nil, s.envoyError(codes.InvalidArgument, "descriptors[%d].entries[%d].value: %d bytes, at most %d for the global limit %s", i, j, len(v), maxDescriptorValue, el.rl.Name)
				}
				d.descs[el.names[k]] = v
			}
		}
	}
	for i, gone := range envoyconf.Replaced(srcs) {
		if gone {
			ds[i].lim = nil
		}
	}
	if err := s.envoyDecide(ctx, ds, t.opts.ChargeOverLimit); err != nil {
		return nil, GRPCError(err)
	}
	return t.answer(ds), nil
}

// envoyDecide decides every descriptor with a limit: those the store must
// count in one round trip, each on its own (not all or nothing), each
// falling back by its on_failure when the store fails for it; those of a
// global limit as requests of its tenant (Decide), which spend the
// tenant's share of its global budget. With over (ChargeOverLimit) the
// others' hits that do not fit are charged anyway and checks read their
// keys. It fails only when a global limit's tenant cannot be decided yet
// (no policy).
func (s *Service) envoyDecide(ctx context.Context, ds []envoyDescriptor, over bool) error {
	var batch [][]gcra.Request
	var reqs []gcra.Request // batch's requests, one backing array
	var ownBuf [4]int
	owners := ownBuf[:0]
	for i := range ds {
		d := &ds[i]
		el := d.lim
		if el == nil {
			continue
		}
		global := el.tenant != "" && d.cost > 0
		if global && el.names != nil && !s.keyedOK(el) {
			// Counted per value, and the tenant's policy has no limit to
			// share the values: this region's own counter decides.
			global = false
			s.m.fallback.WithLabelValues(el.rl.Name, s.cfg.Region, "no_global_limit").Inc()
		}
		switch {
		case global:
			descs := d.descs
			if descs == nil {
				descs = map[string]string{"tenant": el.tenant}
			}
			dec, err := s.Decide(ctx, descs, d.cost)
			if errors.Is(err, ErrBadRequest) {
				// A cost above what the budget can ever admit.
				dec, err = Decision{Limit: el.rl.Name, RetryAfter: el.rl.Rate.Period}, nil
			}
			if err != nil {
				return fmt.Errorf("global limit %s (tenant %s): %w", el.rl.Name, el.tenant, err)
			}
			d.dec, d.decided, d.global = dec, true, true
		case d.cost == 0 && over && el.admits && el.tenant == "":
			d.dec, d.decided = s.envoyCheck(ctx, d), true
		case d.cost == 0:
			// Check only. A denied request costs nothing here, so no key
			// is ever beyond its limit: a check is always within it. Its
			// remaining is not known (the store is not asked).
			d.dec, d.decided = Decision{Allowed: true, Limit: el.rl.Name, Remaining: -1}, true
			if s.envoyCheckWarned.CompareAndSwap(false, true) {
				s.log.Warn("an RLS descriptor with hits_addend 0 (check only) is always OK here, and a later charge that does not fit is not counted: "+
					"set ALLOT_CHARGE_OVER_LIMIT=true to bound check-then-charge usage limits (hits past a limit charged, checks read the key), or use allot's policy with charges: for them", "limit", el.rl.Name)
			}
		case !el.admits || d.cost > el.rl.Burst:
			// Over the limit whatever the store holds: a limit of 0, or a
			// cost above the burst (the original counts it over, too).
			d.dec, d.decided = Decision{Limit: el.rl.Name, RetryAfter: el.rl.Rate.Period}, true
			if over && el.admits {
				s.envoyCharge(ctx, d, -1)
			}
		default:
			if reqs == nil {
				reqs = make([]gcra.Request, 0, len(ds)-i)
			}
			reqs = append(reqs, gcra.Request{Key: d.key, Limit: el.lc.lim, Cost: d.cost})
			owners = append(owners, i)
		}
	}
	if len(reqs) > 0 {
		batch = make([][]gcra.Request, len(reqs))
		for k := range reqs {
			batch[k] = reqs[k : k+1 : k+1]
		}
		answers, reason := s.callStoreBatch(ctx, batch)
		for k, i := range owners {
			d := &ds[i]
			el := d.lim
			why := reason
			if why == "" && answers[k].Err != nil {
				why = failureReason(answers[k].Err)
			}
			if why != "" {
				var its items
				its.add(item{l: &el.rl, lc: &el.lc, req: batch[k][0]})
				d.dec, _ = s.fallbackDecide(ctx, -1, &its, why)
			} else {
				a := answers[k].Decision
				d.dec = Decision{Allowed: a.Allowed, Remaining: a.Remaining, RetryAfter: a.RetryAfter, ResetAfter: a.ResetAfter, Limit: el.rl.Name}
				if over && !a.Allowed {
					s.envoyCharge(ctx, d, a.ResetAfter)
				}
			}
			d.decided = true
		}
	}
	for i := range ds {
		d := &ds[i]
		if !d.decided {
			continue
		}
		ec, units := d.lim.ec, float64(d.cost)
		ec.total.Add(units)
		c := s.counters(&d.lim.lc, d.lim.rl.Name)
		if d.global {
			c = nil // Decide counted it, under the tenant's limit
		}
		switch {
		case d.dec.Allowed:
			if c != nil {
				c.allowed.Inc()
			}
			ec.within.Add(units)
		case d.lim.src != nil && d.lim.src.Shadow:
			if c != nil {
				c.shadowDenied.Inc()
			}
			ec.over.Add(units)
			ec.shadow.Add(units)
		default:
			if c != nil {
				c.denied.Inc()
			}
			ec.over.Add(units)
		}
	}
	return nil
}

// envoyCheck answers a check (hits_addend 0) of d's local limit from its
// key (gcra.CheckMicros): over the limit while the key is past it. When the
// store cannot say, a limit that fails closed denies and the others admit
// (a check spends nothing), counted as fallback decisions.
func (s *Service) envoyCheck(ctx context.Context, d *envoyDescriptor) Decision {
	el := d.lim
	reason := "unavailable"
	if s.checker != nil {
		var res gcra.Result
		err := s.guarded(ctx, func(ctx context.Context) error {
			var err error
			res, err = s.checker.Check(ctx, d.key, el.lc.lim)
			return err
		})
		if err == nil {
			return Decision{Allowed: res.Allowed, Remaining: res.Remaining, RetryAfter: res.RetryAfter, ResetAfter: res.ResetAfter, Limit: el.rl.Name}
		}
		reason = failureReason(err)
	}
	if el.rl.FailClosed {
		s.countFallback(el.rl.Name, reason, "closed")
		return Decision{Limit: el.rl.Name, RetryAfter: time.Second, Fallback: true, Closed: true}
	}
	s.countFallback(el.rl.Name, reason, "open")
	return Decision{Allowed: true, Limit: el.rl.Name, Remaining: -1, Fallback: true}
}

// envoyCharge charges d's hits, which did not fit, to its key anyway
// (ChargeOverLimit): as debt past the burst (gcra.ChargeMicros), but never
// more than one window past the limit (the key's TAT at most two bursts'
// time ahead), as the original forgets what a window counted past its
// limit when the window ends: a caller that stops is within its limit
// again after one window at most. owed is the key's wait until full as
// its decision read it (-1: not read; it is checked first). A charge the
// store cannot take is lost, counted in allot_charges_total{result}
// (failed; capped: the key owes a window already).
func (s *Service) envoyCharge(ctx context.Context, d *envoyDescriptor, owed time.Duration) {
	lim := d.lim.lc.lim
	if s.charger == nil {
		s.m.charges.WithLabelValues("failed").Inc()
		return
	}
	if owed < 0 {
		if s.checker == nil {
			s.m.charges.WithLabelValues("failed").Inc()
			return
		}
		var res gcra.Result
		if err := s.guarded(ctx, func(ctx context.Context) error {
			var err error
			res, err = s.checker.Check(ctx, d.key, lim)
			return err
		}); err != nil {
			s.m.charges.WithLabelValues("failed").Inc()
			return
		}
		owed = res.ResetAfter
	}
	room := (2*lim.Burst*lim.T - owed.Microseconds()) / lim.T
	cost := min(d.cost, room)
	if cost < 1 {
		s.m.charges.WithLabelValues("capped").Inc()
		return
	}
	req := []gcra.Request{{Key: d.key, Limit: lim, Cost: cost}}
	if err := s.guarded(ctx, func(ctx context.Context) error { return s.charger.Charge(ctx, req) }); err != nil {
		s.m.charges.WithLabelValues("failed").Inc()
		s.log.Debug("charge past the limit failed: the hits are not counted", "limit", d.lim.rl.Name, "err", err)
		return
	}
	s.m.charges.WithLabelValues("charged").Inc()
}

// answer builds the RLS answer of decided descriptors.
func (t *envoyTable) answer(ds []envoyDescriptor) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds)),
	}
	// One allocation for the statuses and one for their durations.
	sts := make([]rlsv3.RateLimitResponse_DescriptorStatus, len(ds))
	durs := make([]durationpb.Duration, len(ds))
	closest := -1 // the descriptor closest to its limit, for the headers
	var closestLeft uint32 = math.MaxUint32
	for i := range ds {
		d := &ds[i]
		st := &sts[i]
		st.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = st
		switch {
		case d.unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		case d.lim == nil:
			continue
		}
		st.CurrentLimit = d.lim.current
		if d.dec.Allowed {
			if d.dec.Remaining < 0 {
				continue // a check: the store was not asked
			}
			st.LimitRemaining = uint32(min(d.dec.Remaining, math.MaxUint32))
			st.DurationUntilReset = setDuration(&durs[i], d.dec.ResetAfter)
			if closest < 0 || st.LimitRemaining < closestLeft {
				closest, closestLeft = i, st.LimitRemaining
			}
			continue
		}
		st.DurationUntilReset = setDuration(&durs[i], d.dec.RetryAfter)
		src := d.lim.src
		if t.opts.QuotaMode || src != nil && src.Quota {
			// Quota: the violation is for the caller to see, not a
			// denial: OK, without a reset (as the original).
			st.DurationUntilReset = nil
			if closest < 0 || closestLeft > 0 {
				closest, closestLeft = i, 0
			}
			continue
		}
		if src != nil && src.Shadow {
			// Shadow: the limit would deny; the answer is OK.
			if closest < 0 || closestLeft > 0 {
				closest, closestLeft = i, 0
			}
			continue
		}
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		closest, closestLeft = i, 0
	}
	if t.opts.Headers && closest >= 0 {
		st := resp.Statuses[closest]
		reset := ds[closest].dec.ResetAfter
		if !ds[closest].dec.Allowed {
			reset = ds[closest].dec.RetryAfter
		}
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			header(t.opts.LimitHeader, strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)),
			header(t.opts.RemainingHeader, strconv.FormatUint(uint64(st.LimitRemaining), 10)),
			header(t.opts.ResetHeader, strconv.FormatInt(ceilSeconds(reset), 10)),
		}
	}
	if t.opts.ShadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
	}
	return resp
}

// envoyKey is the store key of a descriptor's counter in domain:
// keys.Key(T, limit) (limit "envoy" for the configuration's limits) for the tenant part T = escape(prefix) ":"
// escape(domain) then ":" escape(key) "=" escape(value) per entry (keys
// .Escape never writes ':' or '='), so distinct descriptors never share a
// key; the whole descriptor is the hash tag, so that a Redis Cluster spreads
// one domain's counters over its slots. It is written in one pass (T
// escaped twice, as keys.Key escapes T), with one allocation.
func envoyKey(prefix, domain string, es []envoyconf.Entry, limit string) string {
	var buf [256]byte
	b := append(buf[:0], keys.Prefix+":"+keys.Version+":{"...)
	if prefix != "" {
		b = appendEscapedTwice(b, prefix)
		b = append(b, "%3A"...)
	}
	b = appendEscapedTwice(b, domain)
	for _, e := range es {
		b = append(b, "%3A"...)
		b = appendEscapedTwice(b, e.Key)
		b = append(b, "%3D"...)
		b = appendEscapedTwice(b, e.Value)
	}
	b = append(b, "}:"...)
	b = append(b, limit...) // letters, digits and '-': keys.Key leaves them as they are
	return string(b)
}

const hexUpper = "0123456789ABCDEF"

// appendEscapedTwice appends keys.Escape(keys.Escape(s)): bytes keys leaves
// alone as they are, every other byte c as "%25" and c's two hex digits
// (the '%' of its first escape, escaped).
func appendEscapedTwice(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b = append(b, c)
			continue
		}
		b = append(b, '%', '2', '5', hexUpper[c>>4], hexUpper[c&15])
	}
	return b
}

// envoyError counts a refused RLS call (the original's service_error) and
// returns its status.
func (s *Service) envoyError(code codes.Code, format string, args ...any) error {
	s.m.envoyErrors.WithLabelValues("service_error").Inc()
	return status.Errorf(code, format, args...)
}

// overridePath names a descriptor's own limit in metrics: the domain and
// the entries' keys (not their values, which are unbounded), e.g.
// edge.remote_address.path.
func overridePath(domain string, es []envoyconf.Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range es {
		b.WriteByte('.')
		b.WriteString(e.Key)
	}
	return b.String()
}
