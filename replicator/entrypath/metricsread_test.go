package entrypath

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// counter, gauge and gauges read metrics. (prometheus/testutil would need
// a module go.mod does not list.)
func gauge(g *prometheus.GaugeVec, labels ...string) float64 {
	var m dto.Metric
	if err := g.WithLabelValues(labels...).Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}

func counter(c *prometheus.CounterVec, labels ...string) float64 {
	var m dto.Metric
	if err := c.WithLabelValues(labels...).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// gauges returns the value of every series of the named metric in reg,
// keyed by its label values joined with "/".
func gauges(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
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
