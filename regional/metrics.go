package regional

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/gcra/lease"
	"github.com/allot-dev/allot/internal/promreg"
)

type metrics struct {
	region        string
	decisions     *prometheus.CounterVec
	fallback      *prometheus.CounterVec
	storeDuration *prometheus.HistogramVec
	storeErrors   *prometheus.CounterVec
	grantAge      prometheus.GaugeFunc
	leaseValid    prometheus.GaugeFunc
	leaseLeft     prometheus.GaugeFunc
	reports       *prometheus.CounterVec
	earlyReports  *prometheus.CounterVec
	settles       *prometheus.CounterVec
	charges       *prometheus.CounterVec
	restates      *prometheus.CounterVec
	pushes        *prometheus.CounterVec
	dropped       prometheus.CounterFunc
	policyVersion prometheus.GaugeFunc
	livePods      prometheus.GaugeFunc
	shards        prometheus.GaugeFunc

	// The decide path's children of the vectors, looked up once:
	// WithLabelValues hashes its labels on every call.
	storeOK, storeError prometheus.Observer
	limits              sync.Map // limit name → *limitCounters

	// envoyproxy/ratelimit's metrics, under its names, for limits of an
	// envoyconf configuration: hits in units by domain and the first two
	// entries of the limit's path.
	envoyTotal, envoyOver, envoyWithin, envoyShadow *prometheus.CounterVec
	envoyErrors                                     *prometheus.CounterVec
}

// envoyCounters are one envoyconf limit's children of the original's
// metrics.
type envoyCounters struct {
	total, over, within, shadow prometheus.Counter
}

// forEnvoy returns the counters of the limit at path (domain.key1.key2…).
func (m *metrics) forEnvoy(path string) *envoyCounters {
	parts := strings.SplitN(path, ".", 4)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	l := parts[:3]
	return &envoyCounters{
		total:  m.envoyTotal.WithLabelValues(l...),
		over:   m.envoyOver.WithLabelValues(l...),
		within: m.envoyWithin.WithLabelValues(l...),
		shadow: m.envoyShadow.WithLabelValues(l...),
	}
}

// limitCounters are one limit's children of allot_decisions_total in this
// region, and its lease units (allot_lease_units_total).
type limitCounters struct {
	allowed, denied, shadowDenied prometheus.Counter
	lease                         lease.Class
}

// forLimit returns the decision counters of the limit called name.
func (m *metrics) forLimit(name string) *limitCounters {
	if c, ok := m.limits.Load(name); ok {
		return c.(*limitCounters)
	}
	c := &limitCounters{
		allowed:      m.decisions.WithLabelValues(name, m.region, "allowed"),
		denied:       m.decisions.WithLabelValues(name, m.region, "denied"),
		shadowDenied: m.decisions.WithLabelValues(name, m.region, "shadow_denied"),
	}
	v, _ := m.limits.LoadOrStore(name, c)
	return v.(*limitCounters)
}

func newMetrics(reg prometheus.Registerer, region string, s *Service) (*metrics, error) {
	cl := prometheus.Labels{"region": region}
	envoyLabels := []string{"domain", "key1", "key2"}
	m := &metrics{
		region: region,
		envoyTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_rate_limit_total_hits", Help: "Hits (units) checked against a limit of an envoyproxy/ratelimit configuration, as that service counts them.",
		}, envoyLabels),
		envoyOver: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_rate_limit_over_limit", Help: "Hits (units) over a limit of an envoyproxy/ratelimit configuration (shadow_mode ones included).",
		}, envoyLabels),
		envoyWithin: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_rate_limit_within_limit", Help: "Hits (units) within a limit of an envoyproxy/ratelimit configuration.",
		}, envoyLabels),
		envoyShadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_rate_limit_shadow_mode", Help: "Hits (units) over a shadow_mode limit, admitted.",
		}, envoyLabels),
		envoyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_service_should_rate_limit_error", Help: "RLS calls answered with an error (service_error: a malformed request or no configuration).",
		}, []string{"err_type"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_decisions_total", Help: "Decisions by limiting limit and result (allowed, denied, shadow_denied).",
		}, []string{"limit", "region", "result"}),
		fallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_fallback_decisions_total", Help: "Decisions made without the store, by limit and reason (timeout, unavailable, breaker_open, error, no_share) and policy (open, closed); and decisions of a global envoy limit counted per value made by the region's own counter because its tenant's policy has no global limit to share its values (no_global_limit).",
		}, []string{"limit", "region", "reason"}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "allot_store_duration_seconds", Help: "Duration of store calls (one round trip each).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1}, ConstLabels: cl,
		}, []string{"result"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_store_errors_total", Help: "Failed store calls by kind.", ConstLabels: cl,
		}, []string{"kind"}),
		grantAge: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_grant_age_seconds", Help: "Seconds since this pod last received a grant (or resynced its grants).", ConstLabels: cl,
		}, s.grantAge),
		leaseValid: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_lease_valid", Help: "1 while the pod's lease is valid (grants enforced), 0 when it enforces floors.", ConstLabels: cl,
		}, s.leaseValid),
		leaseLeft: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_lease_remaining_seconds", Help: "Seconds until the pod's lease ends (negative: lapsed).", ConstLabels: cl,
		}, s.leaseLeft),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_reports_total", Help: "Reports sent to the coordinator, by result (accepted, learning: the leader learns, grants nothing and renews at most what the pod holds, no_policy, region_removed, redirected, failed, no_leader).", ConstLabels: cl,
		}, []string{"result"}),
		settles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_settles_total", Help: "Settles of reserved decisions, by result (refunded, charged, exact; gone: unknown, expired or settled already; bad: an actual cost no key can owe; failed: the store failed).", ConstLabels: cl,
		}, []string{"result"}),
		restates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_cold_restates_total", Help: "Keys decided under a budget's cold floor (a tenant the pod held no grant of) restated under its grant as it arrived, so that they refill at the grant's rate at once, by result (restated; failed: the store failed, and the key restates at its next decision).", ConstLabels: cl,
		}, []string{"result"}),
		charges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_charges_total", Help: "Charges of costs already spent (the policy's charges entry, e.g. Envoy's apply_on_stream_done), by result (charged; none: no limit to charge; failed: the store failed and the cost went uncharged; capped: with envoy-ratelimit's ALLOT_CHARGE_OVER_LIMIT, hits past a limit whose key owes a window already, not charged).", ConstLabels: cl,
		}, []string{"result"}),
		earlyReports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_early_reports_total", Help: "Reports sent out of period, by reason (step: a tenant's offered rate stepped; ack: a shrink was applied, which a grow elsewhere may wait for).", ConstLabels: cl,
		}, []string{"reason"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_pushes_total", Help: "Grant pushes from the leader's watch stream, by result (applied; reconnect: the stream broke and is opened again).", ConstLabels: cl,
		}, []string{"result"}),
		dropped: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "allot_report_units_dropped_total", Help: "Units not counted for reports because the tenant table was full.", ConstLabels: cl,
		}, func() float64 {
			var n int64
			if cs := s.counts.Load(); cs != nil {
				for _, c := range *cs {
					n += c.dropped.Load()
				}
			}
			return float64(n)
		}),
		policyVersion: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_policy_version", Help: "Policy version this pod enforces.", ConstLabels: cl,
		}, func() float64 {
			s.view.mu.RLock()
			defer s.view.mu.RUnlock()
			return float64(s.view.policyVersion)
		}),
		livePods: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_live_pods", Help: "Live pods in the region as membership sees them.", ConstLabels: cl,
		}, func() float64 { return float64(s.livePods()) }),
		shards: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_pod_shards", Help: "Coordinator shards this pod reports to (0 while it waits for the count in etcd).", ConstLabels: cl,
		}, func() float64 { return float64(s.view.shards()) }),
	}
	if reg == nil {
		m.lookUp()
		return m, nil
	}
	// Several services may share one registry (allot dev): the vectors
	// labelled by region are shared, the rest carry the region as a const
	// label.
	var err error
	for _, v := range []**prometheus.CounterVec{&m.envoyTotal, &m.envoyOver, &m.envoyWithin, &m.envoyShadow, &m.envoyErrors} {
		if *v, err = promreg.Register(reg, *v); err != nil {
			return nil, err
		}
	}
	if m.decisions, err = promreg.Register(reg, m.decisions); err != nil {
		return nil, err
	}
	if m.fallback, err = promreg.Register(reg, m.fallback); err != nil {
		return nil, err
	}
	for _, c := range []prometheus.Collector{m.storeDuration, m.storeErrors, m.grantAge, m.leaseValid, m.leaseLeft, m.reports, m.earlyReports, m.settles, m.charges, m.restates, m.pushes, m.dropped, m.policyVersion, m.livePods, m.shards, newLeaseUnits(m)} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.lookUp()
	return m, nil
}

// lookUp resolves the children the decide path uses, once the vectors are
// final (registration may have swapped in a shared one).
func (m *metrics) lookUp() {
	m.storeOK = m.storeDuration.WithLabelValues("ok")
	m.storeError = m.storeDuration.WithLabelValues("error")
}

// leaseUnits is allot_lease_units_total: per leased limit of this region,
// the units its keys' local leases took from the store (kind leased),
// served to decisions (served) and let expire unserved (stranded, the
// quota leasing costs). Leased − served − stranded is what the pods hold
// now, at most a lease per key. Read from the limits' lease.Class at
// scrape time; limits that never leased are left out.
type leaseUnits struct {
	m    *metrics
	desc *prometheus.Desc
}

func newLeaseUnits(m *metrics) leaseUnits {
	return leaseUnits{m: m, desc: prometheus.NewDesc("allot_lease_units_total",
		"Units of leased limits: taken from the store as local leases (kind leased), served from them (served), expired unserved (stranded).",
		[]string{"limit", "kind"}, prometheus.Labels{"region": m.region})}
}

func (c leaseUnits) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c leaseUnits) Collect(ch chan<- prometheus.Metric) {
	c.m.limits.Range(func(k, v any) bool {
		st := v.(*limitCounters).lease.Stats()
		if st == (lease.ClassStats{}) {
			return true
		}
		name := k.(string)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(st.Leased), name, "leased")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(st.Served), name, "served")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(st.Stranded), name, "stranded")
		return true
	})
}
