// Package promreg registers Prometheus collectors for allot's components,
// which may run several times in one process (allot dev, tests) against one
// prometheus.Registerer.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg and returns the collector to use: c, or,
// when reg already holds an equal collector of the same type (another
// component of the same kind in this process registered it first), that
// one, so that both count into the series the registry exports. A nil reg
// registers nothing and returns c. Any other error is returned with c.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
