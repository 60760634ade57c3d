// Package metricstest reads metric values for tests: one series of a
// counter or gauge vector by its label values, or every series of a
// gathered metric. It exists so that the tests of replicator and its
// sub-packages, which assert on the metrics.Metrics they drive, share one
// reader instead of each keeping a copy. Only tests import it.
// (prometheus/testutil would need a module go.mod does not list.)
package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Gauge returns the value of g's series with the given label values.
func Gauge(g *prometheus.GaugeVec, labels ...string) float64 {
	var m dto.Metric
	if err := g.WithLabelValues(labels...).Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}

// Counter returns the value of c's series with the given label values.
func Counter(c *prometheus.CounterVec, labels ...string) float64 {
	var m dto.Metric
	if err := c.WithLabelValues(labels...).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// Gauges returns the value of every series of the named gauge in reg,
// keyed by its label values (sorted by label name) joined with "/".
func Gauges(t testing.TB, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += "/" + l.GetValue()
			}
			out[key] = m.GetGauge().GetValue()
		}
	}
	return out
}
