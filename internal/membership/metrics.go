package membership

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/internal/promreg"
)

// metrics are labelled by region only. The counters may be shared by
// several Memberships of one process (allot dev); nil metrics count nothing.
type metrics struct {
	events *prometheus.CounterVec
	joins  *prometheus.CounterVec
	region string
}

func newMetrics(reg prometheus.Registerer, region string) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	ev := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_membership_events_total",
		Help: "Changes seen in the region's pod membership: join, leave (graceful), fail (declared dead), update.",
	}, []string{"region", "event"})
	je := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_membership_join_attempts_total",
		Help: "Join and rejoin attempts by result: ok (a seed answered) or error (none did).",
	}, []string{"region", "result"})
	var err error
	if ev, err = register(reg, ev); err != nil {
		return nil, err
	}
	if je, err = register(reg, je); err != nil {
		return nil, err
	}
	m := &metrics{events: ev, joins: je, region: region}
	for _, e := range []string{"join", "leave", "fail", "update"} {
		ev.WithLabelValues(region, e)
	}
	for _, r := range []string{"ok", "error"} {
		je.WithLabelValues(region, r)
	}
	return m, nil
}

// register registers c with reg (see promreg.Register).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	c, err := promreg.Register(reg, c)
	if err != nil {
		return c, fmt.Errorf("membership config: Registerer: %w", err)
	}
	return c, nil
}

// registerHealth exports memberlist's awareness score of m. A second
// Membership of the same region in one registry (tests, allot dev) leaves
// the first one's gauge in place.
func (mt *metrics) registerHealth(reg prometheus.Registerer, m *Membership) error {
	if mt == nil {
		return nil
	}
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "allot_membership_health_score",
		Help:        "memberlist's awareness score of this pod: 0 is healthy; higher means it is missing probe deadlines and has stretched its probe interval.",
		ConstLabels: prometheus.Labels{"region": mt.region},
	}, func() float64 {
		if ml := m.ml.Load(); ml != nil {
			return float64(ml.GetHealthScore())
		}
		return 0
	})
	if err := reg.Register(g); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return fmt.Errorf("membership config: Registerer: %w", err)
		}
	}
	return nil
}

func (mt *metrics) event(e string) {
	if mt != nil {
		mt.events.WithLabelValues(mt.region, e).Inc()
	}
}

func (mt *metrics) join(ok bool) {
	if mt == nil {
		return
	}
	result := "error"
	if ok {
		result = "ok"
	}
	mt.joins.WithLabelValues(mt.region, result).Inc()
}
