package coordinator

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	leader            prometheus.Gauge
	terms             prometheus.Counter
	rebalances        prometheus.Counter
	rebalanceDuration prometheus.Histogram
	grantWrites       prometheus.Counter
	earlyGrows        prometheus.Counter
	reports           *prometheus.CounterVec
	tenants           prometheus.Gauge
	adminRequests     *prometheus.CounterVec
	learning          prometheus.Gauge
	renewals          *prometheus.CounterVec
	rosterPods        prometheus.Gauge
	rosterWrites      *prometheus.CounterVec
	learnedSeconds    prometheus.Gauge
	tenantsDropped    prometheus.Counter
	tenantsForgotten  prometheus.Counter
	answerGrants      prometheus.Counter
	stepChanges       prometheus.Counter
	pushes            prometheus.Counter
	watchers          prometheus.Gauge
	shard             prometheus.Gauge
	otherShard        prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_coordinator_is_leader", Help: "1 while this coordinator leads, else 0.",
		}),
		terms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_coordinator_terms_total", Help: "Leadership terms this coordinator has begun.",
		}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_rebalances_total", Help: "Rebalances completed by this coordinator while leading.",
		}),
		rebalanceDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "allot_rebalance_duration_seconds", Help: "Time to compute and write one rebalance.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		grantWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_grant_changes_total",
			Help: "Grants the leader changed (each reaches its region's pods in answers to their reports and in pushes; none is written to etcd).",
		}),
		learning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_coordinator_learning",
			Help: "1 while the leader learns (for a lease length after a term starts it grants nothing and renews only what pods report holding), else 0.",
		}),
		tenantsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_coordinator_tenants_dropped_total",
			Help: "Reported usage of tenants beyond --max-tenants, not tracked (those tenants stay on cold floors).",
		}),
		tenantsForgotten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_coordinator_tenants_forgotten_total",
			Help: "Tenants without a budget record or policy entry forgotten after --tenant-idle-timeout without traffic (their grants dropped).",
		}),
		answerGrants: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_coordinator_answer_grants_total",
			Help: "Grants sent to pods in answers to their reports (changes since each pod's epoch, or full syncs).",
		}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_coordinator_learning_renewals_total",
			Help: "Learning answers that renewed the lease of the grants a pod of an older term reported holding, by region (none when a budget was lowered since they were made).",
		}, []string{"region"}),
		stepChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_coordinator_step_changes_total",
			Help: "Grant changes made rebalancing a tenant as a report said its rate stepped (also counted in allot_grant_changes_total).",
		}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_coordinator_pushes_total",
			Help: "Answers pushed to watching pods without a report (their region's grants changed).",
		}),
		shard: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_coordinator_shards",
			Help: "The cluster's coordinator shard count (this coordinator runs the one its shard label names; 0 until read from etcd).",
		}),
		otherShard: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_coordinator_report_tenants_other_shard_total",
			Help: "Tenants in reports that belong to another coordinator shard, ignored (a pod that places tenants differently: its shard count is not the cluster's).",
		}),
		rosterPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_coordinator_roster_pods",
			Help: "Pods on the roster (pods a leader may have leased), as this leader knows it.",
		}),
		rosterWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_coordinator_roster_writes_total",
			Help: "Roster writes, by op (add, drop) and result (ok, failed: a report so refused is retried by its pod).",
		}, []string{"op", "result"}),
		learnedSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_coordinator_learned_seconds",
			Help: "How long the current protocol term learned before granting (shorter than lease + session TTL when the roster ended it early).",
		}),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_coordinator_watchers", Help: "Pods watching their region's grants on this coordinator.",
		}),
		earlyGrows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "allot_early_grows_total",
			Help: "Grow passes made between rebalances because a report acknowledged a shrink that a deferred grow waited for.",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_coordinator_reports_total", Help: "Pod reports received, by region and result.",
		}, []string{"region", "result"}),
		tenants: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_coordinator_tenants", Help: "Tenants the leader tracks, as of the last rebalance (capped by --max-tenants).",
		}),
		adminRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_admin_requests_total", Help: "Admin API requests, by operation and result code.",
		}, []string{"op", "code"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.leader, m.terms, m.rebalances, m.rebalanceDuration, m.grantWrites, m.earlyGrows, m.reports, m.tenants, m.adminRequests, m.learning, m.tenantsDropped, m.tenantsForgotten, m.answerGrants, m.renewals, m.stepChanges, m.pushes, m.watchers, m.rosterPods, m.rosterWrites, m.learnedSeconds, m.shard, m.otherShard} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
		}
	}
	return m, nil
}
