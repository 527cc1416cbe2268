package envoyxds

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/internal/promreg"
)

// metrics of one Subscriber; nil counts nothing. Two Subscribers in one
// registry share the collectors.
type metrics struct {
	applied, rejected prometheus.Counter
	connected         prometheus.Gauge
	retries           prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	updates, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_envoy_xds_updates_total",
		Help: "Configurations received from the xDS management server, by result: applied (ACKed) or rejected (NACKed; the last applied one stays).",
	}, []string{"result"}))
	if err != nil {
		return nil, err
	}
	connected, err := register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "allot_envoy_xds_connected",
		Help: "1 while a stream to the xDS management server is open, else 0 (the last applied configuration stays in force).",
	}))
	if err != nil {
		return nil, err
	}
	retries, err := register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "allot_envoy_xds_retries_total",
		Help: "Streams to the xDS management server that could not be opened or ended (refused, TLS failures, the server gone); each is retried after a backoff, and the last applied configuration stays in force meanwhile.",
	}))
	if err != nil {
		return nil, err
	}
	return &metrics{
		applied:   updates.WithLabelValues("applied"),
		rejected:  updates.WithLabelValues("rejected"),
		connected: connected,
		retries:   retries,
	}, nil
}

func (m *metrics) retry() {
	if m != nil {
		m.retries.Inc()
	}
}

func (m *metrics) update(applied bool) {
	switch {
	case m == nil:
	case applied:
		m.applied.Inc()
	default:
		m.rejected.Inc()
	}
}

func (m *metrics) setConnected(up bool) {
	if m == nil {
		return
	}
	if up {
		m.connected.Set(1)
	} else {
		m.connected.Set(0)
	}
}

// register registers c with reg (see promreg.Register).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	c, err := promreg.Register(reg, c)
	if err != nil {
		return c, fmt.Errorf("envoy xds config: Registerer: %w", err)
	}
	return c, nil
}
