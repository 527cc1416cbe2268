package state

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/internal/promreg"
)

// decodeErrors returns kind's child of allot_state_decode_errors_total
// registered with reg (nil when reg is): the collector already registered
// there when another mirror of the process registered it first. Every kind
// is exported from the start, at 0.
func decodeErrors(reg prometheus.Registerer, kind string) (prometheus.Counter, error) {
	if reg == nil {
		return nil, nil
	}
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "allot_state_decode_errors_total",
		Help: "Records mirrored from etcd that failed to decode, by kind (budget: left out; policy: the last good one stays in force). The other records are mirrored as usual.",
	}, []string{"kind"})
	v, err := promreg.Register(reg, v)
	if err != nil {
		return nil, fmt.Errorf("mirror config: Registerer: %w", err)
	}
	for _, k := range []string{KindBudget, KindPolicy} {
		v.WithLabelValues(k)
	}
	return v.WithLabelValues(kind), nil
}
