package entrypath

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geo-sidecar/geo-sidecar/replicator/metrics/metricstest"
)

// TestLinkHealth: the entry pipe counts a partition in
// connected_partitions from its producer's open to its close (+1 and -1
// below); linkHealth takes it off while the producer's or the cursor's
// link is down or silent, and gives it back when both are up again or the
// producer closes. The gauge never counts a partition twice or below 0.
func TestLinkHealth(t *testing.T) {
	type step struct {
		what string
		want float64
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"healthy", []step{{"open", 1}, {"close", 0}}},
		{"producer link lost and back", []step{{"open", 1}, {"prod-down", 0}, {"prod-up", 1}, {"close", 0}}},
		{"cursor link silent and back", []step{{"open", 1}, {"cons-down", 0}, {"cons-up", 1}, {"close", 0}}},
		{"both down, one back", []step{{"open", 1}, {"prod-down", 0}, {"cons-down", 0}, {"prod-up", 0}, {"cons-up", 1}, {"close", 0}}},
		{"closed while down", []step{{"open", 1}, {"prod-down", 0}, {"close", 0}, {"open", 1}, {"close", 0}}},
		{"cursor down before the producer opens", []step{{"cons-down", 0}, {"open", 0}, {"cons-up", 1}, {"close", 0}}},
		{"producer lost between open and count", []step{{"prod-down-early", 0}, {"count", 0}, {"prod-up", 1}, {"close", 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "connected_partitions"}, []string{"source"})
			g := gv.WithLabelValues("east")
			h := &linkHealth{gauge: g}
			for i, s := range tt.steps {
				switch s.what {
				case "open": // openProducer, then the entry pipe counts it
					h.update(func(h *linkHealth) { h.open = true })
					g.Inc()
				case "prod-down-early": // during CreateProducer's return
					h.update(func(h *linkHealth) { h.prodDown = true })
				case "count":
					h.update(func(h *linkHealth) { h.open = true })
					g.Inc()
				case "close": // the entry pipe's Dec, then Close
					g.Dec()
					h.update(func(h *linkHealth) { h.open, h.prodDown = false, false })
				case "prod-down", "prod-up":
					h.update(func(h *linkHealth) { h.prodDown = s.what == "prod-down" })
				case "cons-down", "cons-up":
					h.update(func(h *linkHealth) { h.consDown = s.what == "cons-down" })
				}
				if got := metricstest.Gauge(gv, "east"); got != s.want {
					t.Fatalf("step %d (%s): gauge %v, want %v", i, s.what, got, s.want)
				}
			}
		})
	}
}
