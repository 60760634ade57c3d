package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
)

// TestSecurityMetrics: the metrics follow the security events told to
// their callbacks, each metric from its own event; a cluster's events
// leave the other cluster's series alone, and every series exists (at 0)
// before any event, so alerts can be written on them.
func TestSecurityMetrics(t *testing.T) {
	type want struct {
		name   string
		labels []string
		value  float64
	}
	tests := []struct {
		name   string
		events func(ev cluster.SecurityEvents)
		want   []want
	}{
		{"none", func(cluster.SecurityEvents) {}, []want{
			{"geo_sidecar_permission_denied", []string{"south", "produce"}, 0},
			{"geo_sidecar_permission_denials_total", []string{"east", "tenant-admin"}, 0},
			{"geo_sidecar_auth_token_expired", []string{"south"}, 0},
			{"geo_sidecar_auth_token_expired", []string{"east"}, -1}, // no token: no series
			{"geo_sidecar_authentication_refused", []string{"east"}, 0},
			{"geo_sidecar_tls_refused_total", []string{"east"}, 0},
		}},
		{"denied twice, one granted", func(ev cluster.SecurityEvents) {
			ev.PermissionDenied("south", cluster.PermissionProduce)
			ev.PermissionDenied("south", cluster.PermissionProduce)
			ev.PermissionGranted("south", cluster.PermissionProduce)
		}, []want{
			{"geo_sidecar_permission_denied", []string{"south", "produce"}, 1},
			{"geo_sidecar_permission_denials_total", []string{"south", "produce"}, 2},
			{"geo_sidecar_permission_denied", []string{"south", "consume"}, 0},
			{"geo_sidecar_permission_denials_total", []string{"east", "produce"}, 0},
		}},
		{"token loaded", func(ev cluster.SecurityEvents) {
			ev.TokenLoaded("south", 1700000000)
		}, []want{
			{"geo_sidecar_auth_token_expiry_timestamp_seconds", []string{"south"}, 1700000000},
			{"geo_sidecar_auth_token_expired", []string{"south"}, 0},
		}},
		{"token expired", func(ev cluster.SecurityEvents) {
			ev.TokenLoaded("south", 1700000000)
			ev.TokenExpired("south")
		}, []want{
			{"geo_sidecar_auth_token_expired", []string{"south"}, 1},
		}},
		{"expired, then a new token", func(ev cluster.SecurityEvents) {
			ev.TokenExpired("south")
			ev.TokenLoaded("south", 0)
		}, []want{
			{"geo_sidecar_auth_token_expired", []string{"south"}, 0},
			{"geo_sidecar_auth_token_expiry_timestamp_seconds", []string{"south"}, 0},
		}},
		{"authentication refused", func(ev cluster.SecurityEvents) {
			ev.AuthRefused("east")
		}, []want{
			{"geo_sidecar_authentication_refused", []string{"east"}, 1},
			{"geo_sidecar_authentication_refused", []string{"south"}, 0},
		}},
		{"authentication accepted again", func(ev cluster.SecurityEvents) {
			ev.AuthRefused("east")
			ev.AuthAccepted("east")
		}, []want{
			{"geo_sidecar_authentication_refused", []string{"east"}, 0},
		}},
		{"TLS refused", func(ev cluster.SecurityEvents) {
			ev.TLSRefused("south")
			ev.TLSRefused("south")
		}, []want{
			{"geo_sidecar_tls_refused_total", []string{"south"}, 2},
			{"geo_sidecar_tls_refused_total", []string{"east"}, 0},
		}},
	}
	cfg := &config.Config{Clusters: []config.Cluster{
		{Name: "east"},
		{Name: "south", Auth: config.Auth{TokenFile: "/t"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			tt.events(newSecurityMetrics(reg, cfg).events())
			for _, w := range tt.want {
				if got := gathered(t, reg, w.name, w.labels...); got != w.value {
					t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.value)
				}
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() == "geo_sidecar_permission_denied" && len(mf.GetMetric()) != 6 {
					t.Errorf("%d permission_denied series, want 6 (2 clusters x 3 permissions)", len(mf.GetMetric()))
				}
			}
		})
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

// TestLogWarningsDeprecated: `run` logs a deprecated key's warning with
// the old and the new name in fields of their own.
func TestLogWarningsDeprecated(t *testing.T) {
	cfg, err := config.Parse([]byte(`sidecar:
  marker_key_env: K
  admin_budget: {burst: 5}
clusters:
  - {name: a, service_url: "pulsar+ssl://a:6651", admin_url: "https://a:8443"}
  - {name: b, service_url: "pulsar+ssl://b:6651", admin_url: "https://b:8443"}
replication:
  - {source: a, namespace: t/ns, topics: [o], targets: [b], data_path: auto}
`))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	logWarnings(zap.New(core), cfg.Warnings())
	var got []string
	for _, e := range logs.FilterMessage(config.WarnDeprecated).All() {
		f := e.ContextMap()
		got = append(got, fmt.Sprintf("%v -> %v", f["old"], f["new"]))
	}
	want := []string{"sidecar.admin_budget -> sidecar.admin_rate", "replication[0].data_path=auto -> replication[0].data_path=entries"}
	if !slices.Equal(got, want) {
		t.Errorf("deprecation warnings logged: %q, want %q", got, want)
	}
}
