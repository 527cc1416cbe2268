package promreg_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/allot-dev/allot/internal/promreg"
)

func counter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_test_total", Help: "h"}, []string{"k"})
}

// A second registration of an equal collector gets the first, so both
// components count into the exported series; a conflicting one is an error.
func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := promreg.Register(reg, counter())
	if err != nil {
		t.Fatal(err)
	}
	b, err := promreg.Register(reg, counter())
	if err != nil {
		t.Fatal(err)
	}
	a.WithLabelValues("x").Inc()
	b.WithLabelValues("x").Inc()
	if got := testutil.ToFloat64(a.WithLabelValues("x")); got != 2 || a != b {
		t.Errorf("two registrations count %v into one series (same collector: %v), want 2 (true)", got, a == b)
	}
	// Same name, other labels: refused.
	other := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "allot_test_total", Help: "h"}, []string{"other"})
	if _, err := promreg.Register(reg, other); err == nil {
		t.Error("a conflicting collector registered without an error")
	}
	// Same descriptor, another type: refused, not a panic on the assertion.
	gv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "allot_test_total", Help: "h"}, []string{"k"})
	if _, err := promreg.Register(reg, gv); err == nil {
		t.Error("a collector of another type under an existing name registered without an error")
	}
	if c, err := promreg.Register[*prometheus.CounterVec](nil, counter()); err != nil || c == nil {
		t.Errorf("nil Registerer: %v, %v; want the collector back", c, err)
	}
}
