package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestSumCounters: the named counters' samples are added up per series
// over several expositions; other names, comments and names that only
// begin like one are left out.
func TestSumCounters(t *testing.T) {
	a := `# HELP geo_sidecar_subscription_updates_received_total x
# TYPE geo_sidecar_subscription_updates_received_total counter
geo_sidecar_subscription_updates_received_total{cluster="west",outcome="applied",route="admin"} 3
geo_sidecar_subscription_updates_received_total{cluster="west",outcome="applied",route="protocol"} 120
geo_sidecar_subscription_updates_sent_total 7
geo_sidecar_subscription_updates_sent_total_extra 99
geo_sidecar_markers_invalid_total{reason="replayed"} 1
`
	b := `geo_sidecar_subscription_updates_received_total{cluster="west",outcome="applied",route="admin"} 2
geo_sidecar_subscription_updates_sent_total 1e+00
`
	m := map[string]float64{}
	for _, s := range []string{a, b} {
		if err := sumCounters(strings.NewReader(s), updateMetrics, m); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{
		`geo_sidecar_subscription_updates_received_total{cluster="west",outcome="applied",route="admin"}`:    5,
		`geo_sidecar_subscription_updates_received_total{cluster="west",outcome="applied",route="protocol"}`: 120,
		`geo_sidecar_subscription_updates_sent_total`:                                                        8,
	}
	if len(m) != len(want) {
		t.Errorf("got %v, want %v", m, want)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s: %g, want %g", k, m[k], v)
		}
	}
	var out bytes.Buffer
	writeCounters(&out, m)
	if !strings.HasPrefix(out.String(), `  subscription_updates_received_total{cluster="west",outcome="applied",route="admin"} 5`+"\n") {
		t.Errorf("written:\n%s", out.String())
	}
}
