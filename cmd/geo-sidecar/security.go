package main

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/geo-sidecar/geo-sidecar/config"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
)

// securityMetrics follow the replicator's security events (credentials,
// permissions, certificates; see cluster.EventPermissionDenied). Those
// events are logged once when a condition starts and once when it ends,
// from deep inside the clients of each cluster; the metrics are kept from
// the same events, so the log line and the metric cannot disagree and the
// clients need no second reporting path. Labels: cluster (from the
// config) and permission (a fixed set).
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

// observe updates the metrics from one security event.
func (m *securityMetrics) observe(msg string, f map[string]any) {
	clusterName, _ := f["cluster"].(string)
	if clusterName == "" {
		return
	}
	perm, _ := f["permission"].(string)
	switch msg {
	case cluster.EventPermissionDenied:
		m.denied.WithLabelValues(clusterName, perm).Inc()
		m.denials.WithLabelValues(clusterName, perm).Inc()
	case cluster.EventPermissionGranted:
		g := m.denied.WithLabelValues(clusterName, perm)
		g.Dec()
	case cluster.EventTokenLoaded:
		m.tokenExpired.WithLabelValues(clusterName).Set(0)
		m.tokenExpiry.WithLabelValues(clusterName).Set(float64(asInt(f["expires_at"])))
	case cluster.EventTokenExpired:
		m.tokenExpired.WithLabelValues(clusterName).Set(1)
	case cluster.EventAuthRefused:
		m.authRefused.WithLabelValues(clusterName).Set(1)
	case cluster.EventAuthAccepted:
		m.authRefused.WithLabelValues(clusterName).Set(0)
	case cluster.EventTLSRefused:
		m.tlsRefused.WithLabelValues(clusterName).Inc()
	}
}

func asInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case float64:
		return int64(n)
	}
	return 0
}

// withSecurityMetrics returns log with m fed by its security events. The
// events reach m whatever the log level (an operator who runs at
// --log-level error still gets the metrics).
func withSecurityMetrics(log *zap.Logger, m *securityMetrics) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &securityCore{Core: c, m: m}
	}))
}

// securityCore passes everything to the wrapped core and copies the
// security logger's entries, with their fields, to the metrics.
type securityCore struct {
	zapcore.Core
	fields []zapcore.Field // from With, for the cluster label
	m      *securityMetrics
}

func isSecurity(ent zapcore.Entry) bool {
	return ent.LoggerName == "security" || strings.HasSuffix(ent.LoggerName, ".security")
}

// Enabled is true from Info up whatever the wrapped core's level: zap asks
// before building an entry, and the security events (Info and Error) must
// reach the metrics even at --log-level error. Debug stays as cheap as
// before.
func (c *securityCore) Enabled(l zapcore.Level) bool {
	return l >= zapcore.InfoLevel || c.Core.Enabled(l)
}

func (c *securityCore) With(fs []zapcore.Field) zapcore.Core {
	return &securityCore{Core: c.Core.With(fs), fields: append(c.fields[:len(c.fields):len(c.fields)], fs...), m: c.m}
}

func (c *securityCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if isSecurity(ent) {
		return ce.AddCore(ent, c)
	}
	return c.Core.Check(ent, ce)
}

func (c *securityCore) Write(ent zapcore.Entry, fs []zapcore.Field) error {
	if isSecurity(ent) {
		enc := zapcore.NewMapObjectEncoder()
		for _, f := range c.fields {
			f.AddTo(enc)
		}
		for _, f := range fs {
			f.AddTo(enc)
		}
		c.m.observe(ent.Message, enc.Fields)
	}
	if !c.Core.Enabled(ent.Level) {
		return nil
	}
	return c.Core.Write(ent, fs)
}
