package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
)

// TestSecurityMetrics: the metrics follow the security logger's events,
// whatever the log level, and other loggers' lines do not touch them.
func TestSecurityMetrics(t *testing.T) {
	cfg := &config.Config{Clusters: []config.Cluster{
		{Name: "east"},
		{Name: "south", Auth: config.Auth{TokenFile: "/t"}},
	}}
	reg := prometheus.NewRegistry()
	m := newSecurityMetrics(reg, cfg)
	core, logs := observer.New(zapcore.ErrorLevel) // an operator running at --log-level error
	log := withSecurityMetrics(zap.New(core), m)
	sec := log.Named("security").With(zap.String("cluster", "south"))

	sec.Info(cluster.EventTokenLoaded, zap.Int64("expires_at", 1700000000))
	sec.Error(cluster.EventPermissionDenied, zap.String("permission", "produce"), zap.String("resource", "a"))
	sec.Error(cluster.EventPermissionDenied, zap.String("permission", "produce"), zap.String("resource", "b"))
	sec.Info(cluster.EventPermissionGranted, zap.String("permission", "produce"), zap.String("resource", "a"))
	sec.Error(cluster.EventTokenExpired)
	sec.Error(cluster.EventAuthRefused)
	sec.Error(cluster.EventTLSRefused, zap.String("reason", "unknown CA"))
	log.Named("replicator").With(zap.String("cluster", "south")).Error(cluster.EventPermissionDenied, zap.String("permission", "produce"))

	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"geo_sidecar_permission_denied", []string{"south", "produce"}, 1},
		{"geo_sidecar_permission_denials_total", []string{"south", "produce"}, 2},
		{"geo_sidecar_permission_denied", []string{"south", "consume"}, 0},
		{"geo_sidecar_auth_token_expiry_timestamp_seconds", []string{"south"}, 1700000000},
		{"geo_sidecar_auth_token_expired", []string{"south"}, 1},
		{"geo_sidecar_authentication_refused", []string{"south"}, 1},
		{"geo_sidecar_tls_refused_total", []string{"south"}, 1},
		{"geo_sidecar_permission_denials_total", []string{"east", "produce"}, 0},
	}
	for _, tt := range tests {
		if got := gathered(t, reg, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	// Only the Error lines pass the level; the Info ones fed the metrics
	// all the same.
	if n := logs.FilterMessage(cluster.EventTokenLoaded).Len(); n != 0 {
		t.Errorf("an Info line was written at --log-level error")
	}
	if n := logs.FilterMessage(cluster.EventPermissionDenied).Len(); n != 3 {
		t.Errorf("%d permission denied lines written, want 3", n)
	}
	// Series exist before any event, so alerts can be written on them.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "geo_sidecar_permission_denied" && len(mf.GetMetric()) != 6 {
			t.Errorf("%d permission_denied series, want 6 (2 clusters x 3 permissions)", len(mf.GetMetric()))
		}
	}
}

// gathered is the value of the series of name whose label values are
// labels, in order; -1 when there is none.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			lp := m.GetLabel()
			if len(lp) != len(labels) {
				continue
			}
			for i, l := range lp {
				if l.GetValue() != labels[i] {
					continue series
				}
			}
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return -1
}

// TestValidateWarnsAboutClearTextTokens: validate succeeds and warns, on
// stderr, naming the path.
func TestValidateWarnsAboutClearTextTokens(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "geo.yaml")
	yaml := `sidecar:
  marker_key_file: /etc/geo/marker.key
clusters:
  - name: east
    service_url: pulsar://east:6650
    admin_url: https://east:8443
    auth: {token_file: /etc/geo/east.token}
  - name: west
    service_url: pulsar+ssl://west:6651
    admin_url: https://west:8443
    auth: {token_file: /etc/geo/west.token}
replication:
  - {source: east, namespace: shop/orders, topics: [orders], targets: [west]}
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"validate", "--config", cfg}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `warning: clusters[0].service_url: "pulsar://east:6650" is not encrypted`) {
		t.Errorf("stderr:\n%s\nwant one warning about clusters[0].service_url", errb.String())
	}
}
