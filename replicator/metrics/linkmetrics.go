package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LinkMetrics tell an operator whether the network link to a cluster is
// the problem, rather than the sidecar or the broker: a half-open link
// shows as keep-alive timeouts, a cut or a flapping link as lost
// connections and reconnects, and either as an unconfirmed send that
// keeps growing older. Labelled by cluster (from the config), and for
// reconnects by kind and cause (fixed words).
type LinkMetrics struct {
	// KeepAliveTimeouts counts connections closed because nothing
	// arrived within the cluster's keep_alive.
	KeepAliveTimeouts *prometheus.CounterVec
	// ConnectionsLost counts binary-protocol connections lost, for any
	// reason (keep-alive timeouts included).
	ConnectionsLost *prometheus.CounterVec
	// ConnectFailures counts new connections that could not be set up
	// (dial, TLS or handshake failed on the network): a cut link, which
	// has no connection left to lose.
	ConnectFailures *prometheus.CounterVec
	// Reconnects counts producers and consumers that lost their session
	// and reconnect, by kind and cause (wire.Cause*).
	Reconnects *prometheus.CounterVec
	// StepDowns counts active cursors of the entry pipe closed because
	// the target cluster had no working link from this instance for
	// twice its keep_alive (stepDownAfter), so that another instance
	// takes the partition over. Labelled by the target cluster.
	StepDowns *prometheus.CounterVec

	unconfirmed *unconfirmedAges
}

func newLinkMetrics() *LinkMetrics {
	const ns = "geo_sidecar"
	l := &LinkMetrics{
		KeepAliveTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "link_keepalive_timeouts_total", Help: "Connections to a cluster closed because nothing arrived within its keep_alive: a half-open link (or a broker stalled that long)."},
			[]string{"cluster"}),
		ConnectionsLost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "link_connections_lost_total", Help: "Binary-protocol connections to a cluster lost (reset, refused, closed by the keep-alive)."},
			[]string{"cluster"}),
		ConnectFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "link_connect_failures_total", Help: "New binary-protocol connections to a cluster that could not be set up (dial, TLS or handshake failed on the network or timed out): a cut link."},
			[]string{"cluster"}),
		Reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "link_reconnects_total", Help: "Producers and consumers on a cluster that lost their session and reconnect, by kind (producer, consumer) and cause (connection-lost, broker-closed, send-timeout, restart)."},
			[]string{"cluster", "kind", "cause"}),
		StepDowns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "link_stepdowns_total", Help: "Partitions whose active cursor this instance closed because the target cluster had no working link from here for twice its keep_alive, so that another instance takes them over; each resubscribes once the cluster answers."},
			[]string{"cluster"}),
		unconfirmed: &unconfirmedAges{desc: prometheus.NewDesc(ns+"_link_unconfirmed_age_seconds",
			"How long the oldest entry sent to a cluster has waited for its confirmation (0 when none): grows while the link is cut or half-open, whatever reconnects happen meanwhile.",
			[]string{"cluster"}, nil)},
	}
	return l
}

// Describe and Collect make LinkMetrics one collector of its parts.
func (l *LinkMetrics) Describe(ch chan<- *prometheus.Desc) {
	l.KeepAliveTimeouts.Describe(ch)
	l.ConnectionsLost.Describe(ch)
	l.ConnectFailures.Describe(ch)
	l.Reconnects.Describe(ch)
	l.StepDowns.Describe(ch)
	l.unconfirmed.Describe(ch)
}

func (l *LinkMetrics) Collect(ch chan<- prometheus.Metric) {
	l.KeepAliveTimeouts.Collect(ch)
	l.ConnectionsLost.Collect(ch)
	l.ConnectFailures.Collect(ch)
	l.Reconnects.Collect(ch)
	l.StepDowns.Collect(ch)
	l.unconfirmed.Collect(ch)
}

// WatchUnconfirmed exports age (a cluster's oldest unconfirmed send) as
// link_unconfirmed_age_seconds{cluster}, read at each scrape.
func (l *LinkMetrics) WatchUnconfirmed(cluster string, age func() time.Duration) {
	u := l.unconfirmed
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ages == nil {
		u.ages = map[string]func() time.Duration{}
	}
	u.ages[cluster] = age
}

// unconfirmedAges is a collector: the ages are computed when scraped, so
// that sending costs nothing for them.
type unconfirmedAges struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	ages map[string]func() time.Duration
}

func (u *unconfirmedAges) Describe(ch chan<- *prometheus.Desc) { ch <- u.desc }

func (u *unconfirmedAges) Collect(ch chan<- prometheus.Metric) {
	u.mu.Lock()
	ages := make(map[string]func() time.Duration, len(u.ages))
	for k, v := range u.ages {
		ages[k] = v
	}
	u.mu.Unlock()
	for cluster, age := range ages {
		ch <- prometheus.MustNewConstMetric(u.desc, prometheus.GaugeValue, age().Seconds(), cluster)
	}
}
