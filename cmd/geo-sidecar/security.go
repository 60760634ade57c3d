package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
)

// securityMetrics follow the replicator's security events (credentials,
// permissions, certificates; see cluster.SecurityEvents). Those events are
// detected deep inside the clients of each cluster, logged once when a
// condition starts and once when it ends, and told at the same moment to
// the callbacks of events, so the log line and the metric cannot
// disagree, whatever the log level. Labels: cluster (from the config) and
// permission (a fixed set).
type securityMetrics struct {
	denied       *prometheus.GaugeVec
	denials      *prometheus.CounterVec
	tokenExpiry  *prometheus.GaugeVec
	tokenExpired *prometheus.GaugeVec
	authRefused  *prometheus.GaugeVec
	tlsRefused   *prometheus.CounterVec
}

func newSecurityMetrics(reg prometheus.Registerer, cfg *config.Config) *securityMetrics {
	const ns = "geo_sidecar"
	m := &securityMetrics{
		denied: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "permission_denied",
			Help: "Operations (per topic or namespace) the cluster currently refuses for lack of this permission; 0 once granted."},
			[]string{"cluster", "permission"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "permission_denials_total",
			Help: "Times an operation started being refused for lack of this permission."},
			[]string{"cluster", "permission"}),
		tokenExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "auth_token_expiry_timestamp_seconds",
			Help: "Expiry (Unix seconds) of the token last read for the cluster; 0: the token does not expire."},
			[]string{"cluster"}),
		tokenExpired: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "auth_token_expired",
			Help: "1 while the cluster's token has expired and no new one was found in its file or variable."},
			[]string{"cluster"}),
		authRefused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "authentication_refused",
			Help: "1 while the cluster refuses geo-sidecar's credentials."},
			[]string{"cluster"}),
		tlsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tls_refused_total",
			Help: "Times the cluster's TLS certificate was refused (unknown CA or host name mismatch), counted when the reason changes."},
			[]string{"cluster"}),
	}
	if reg != nil {
		reg.MustRegister(m.denied, m.denials, m.tokenExpiry, m.tokenExpired, m.authRefused, m.tlsRefused)
	}
	for _, c := range cfg.Clusters {
		for _, p := range []string{cluster.PermissionProduce, cluster.PermissionConsume, cluster.PermissionTenantAdmin} {
			m.denied.WithLabelValues(c.Name, p)
			m.denials.WithLabelValues(c.Name, p)
		}
		m.authRefused.WithLabelValues(c.Name)
		m.tlsRefused.WithLabelValues(c.Name)
		if c.Auth.HasToken() {
			m.tokenExpired.WithLabelValues(c.Name)
		}
	}
	return m
}

// events are the cluster.SecurityEvents that keep the metrics, given to
// every cluster's clients (replicator.Options.Security).
func (m *securityMetrics) events() cluster.SecurityEvents {
	return cluster.SecurityEvents{
		PermissionDenied: func(c, perm string) {
			m.denied.WithLabelValues(c, perm).Inc()
			m.denials.WithLabelValues(c, perm).Inc()
		},
		PermissionGranted: func(c, perm string) { m.denied.WithLabelValues(c, perm).Dec() },
		TokenLoaded: func(c string, expiresAt int64) {
			m.tokenExpired.WithLabelValues(c).Set(0)
			m.tokenExpiry.WithLabelValues(c).Set(float64(expiresAt))
		},
		TokenExpired: func(c string) { m.tokenExpired.WithLabelValues(c).Set(1) },
		AuthRefused:  func(c string) { m.authRefused.WithLabelValues(c).Set(1) },
		AuthAccepted: func(c string) { m.authRefused.WithLabelValues(c).Set(0) },
		TLSRefused:   func(c string) { m.tlsRefused.WithLabelValues(c).Inc() },
	}
}
