package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
)

func TestLinkMetricsExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.Links.KeepAliveTimeouts.WithLabelValues("far").Inc()
	m.Links.ConnectionsLost.WithLabelValues("far").Add(2)
	m.Links.Reconnects.WithLabelValues("far", "producer", "connection-lost").Inc()
	m.Links.StepDowns.WithLabelValues("far").Inc()
	m.Links.WatchUnconfirmed("far", func() time.Duration { return 90 * time.Second })
	m.Links.WatchUnconfirmed("west", func() time.Duration { return 0 })
	if got := metricstest.Gauges(t, reg, "geo_sidecar_link_unconfirmed_age_seconds"); got["/far"] != 90 || got["/west"] != 0 || len(got) != 2 {
		t.Errorf("link_unconfirmed_age_seconds %v", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, mf := range mfs {
		seen[mf.GetName()] = len(mf.GetMetric())
	}
	for _, name := range []string{"geo_sidecar_link_keepalive_timeouts_total", "geo_sidecar_link_connections_lost_total", "geo_sidecar_link_reconnects_total", "geo_sidecar_link_stepdowns_total"} {
		if seen[name] != 1 {
			t.Errorf("%s: %d series, want 1", name, seen[name])
		}
	}
}
