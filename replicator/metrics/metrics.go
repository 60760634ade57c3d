// Package metrics is the sidecar's Prometheus metrics, one struct built
// from an injected Registerer (no globals: two sidecars run in one
// process in tests), in one namespace, with bounded labels. It sits below
// every other package of replicator/ so that each of them counts what it
// does without knowing who reads the numbers; it imports none of them.
//
// The collectors are prometheus', safe for concurrent use; so are the
// helpers here that combine series (SetLag, DropLag, WatchUnconfirmed).
package metrics

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the sidecar's Prometheus metrics. Labels are bounded: source
// and target are cluster names from the config, topic is a topic of a
// configured namespace as "tenant/namespace/topic" (never a partition,
// never a message id), subscription a tracked subscription, reason a fixed
// word.
type Metrics struct {
	Messages      *prometheus.CounterVec
	Bytes         *prometheus.CounterVec
	Latency       *prometheus.HistogramVec
	SendErrors    *prometheus.CounterVec
	Skipped       *prometheus.CounterVec
	DupsUnproven  *prometheus.CounterVec
	Backlog       *prometheus.GaugeVec
	OldestAge     *prometheus.GaugeVec
	Connected     *prometheus.GaugeVec
	Partitions    *prometheus.GaugeVec
	Topics        *prometheus.GaugeVec
	TopicsRefused *prometheus.GaugeVec
	// PairProblems is 1 while a pair cannot replicate at all (a missing
	// target namespace, credentials refused there): see pair.checkTarget.
	PairProblems *prometheus.GaugeVec
	// PartitionsStopped counts partitions stopped at a message their
	// target refuses for good (on_refused: stop, or a terminated target topic whatever on_refused says), by reason.
	PartitionsStopped *prometheus.GaugeVec
	// PartitionsAwaitingReadBack counts partitions that wait for a
	// read-back of the target before they send: it failed, and the
	// target's record says it may hold their next entries already.
	PartitionsAwaitingReadBack *prometheus.GaugeVec
	// InflightBytes is what the entry pipe holds in flight, process-wide
	// (bounded by its byte budget).
	InflightBytes prometheus.Gauge
	// ReceiveBytes and ReceiveWaiting are each target's receive pool:
	// what its pairs' cursors hold and may still be sent, and how many
	// wait for room (see receivePool).
	ReceiveBytes   *prometheus.GaugeVec
	ReceiveWaiting *prometheus.GaugeVec
	// ReadBackBytes and ReadBackWaiting are each target's read-back pool:
	// the room the read-backs of its pairs' partitions hold, and how many
	// wait for room (see ReadBackPool).
	ReadBackBytes   *prometheus.GaugeVec
	ReadBackWaiting *prometheus.GaugeVec

	// Replicated subscriptions.
	MarkersInvalid         *prometheus.CounterVec
	MarkersWritten         *prometheus.CounterVec
	SnapshotsStarted       *prometheus.CounterVec
	SnapshotsCompleted     *prometheus.CounterVec
	SnapshotsTimedOut      *prometheus.CounterVec
	SnapshotsUnanswered    *prometheus.CounterVec
	SnapshotRTT            *prometheus.HistogramVec
	UpdatesSent            *prometheus.CounterVec
	SubsCreatedRemote      *prometheus.CounterVec
	AdminRequests          *prometheus.CounterVec
	PositionsProven        *prometheus.CounterVec
	HistoryEntriesRead     *prometheus.CounterVec
	UpdatesApplied         *prometheus.CounterVec
	HolesReceived          *prometheus.CounterVec
	SubscriptionLag        *prometheus.GaugeVec
	SubscriptionLagSeconds *prometheus.GaugeVec
	AdminBudgetWaiting     *prometheus.GaugeVec
	PositionsBrokers       *prometheus.GaugeVec
	PositionsFromServlet   *prometheus.CounterVec
	PositionsAckRequests   *prometheus.CounterVec

	// lag combines the partitions' subscription lags into their topic's
	// series: every partition's sync reports its own.
	lag partLag

	// Links are the metrics of the links to the clusters.
	Links *LinkMetrics
	// Verify are the continuous verifier's.
	Verify *VerifyMetrics
}

// New builds the metrics and registers them with reg (nil: not
// registered, for tests).
func New(reg prometheus.Registerer) *Metrics {
	const ns = "geo_sidecar"
	pair := []string{"source", "target"}
	topic := []string{"source", "target", "topic"}
	m := &Metrics{
		PartitionsStopped: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "partitions_stopped", Help: "Partitions stopped at a message the target refuses for good (on_refused: stop; a terminated target topic always), by reason; they resume after the operator acts and restarts the sidecar."},
			[]string{"source", "target", "reason"}),
		PartitionsAwaitingReadBack: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "partitions_awaiting_readback", Help: "Partitions that send nothing until a read-back of the target goes through: it failed, and the target's deduplication record says it may hold their next entries (sent again, they would be stored twice and out of order). They resume by themselves."},
			pair),
		InflightBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns,
			Name: "inflight_bytes", Help: "Bytes of entries sent and not yet confirmed by their target, all pairs of the entry data path together."}),
		ReceiveBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "receive_reserved_bytes", Help: "Bytes the cursors of the pairs to this target cluster hold (entries received, not yet confirmed) and have reserved for what their permits may bring, against the target's share of the receive budget."},
			[]string{"cluster"}),
		ReceiveWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "receive_waiting_cursors", Help: "Cursors of the pairs to this target cluster waiting for room in its share of the receive budget before they may be sent more."},
			[]string{"cluster"}),
		ReadBackBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "readback_reserved_bytes", Help: "Bytes the read-backs of the remote partitions of the pairs to this target cluster hold room for (one reader window each), against the target's share of the read-back budget."},
			[]string{"cluster"}),
		ReadBackWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "readback_waiting_partitions", Help: "Partitions of the pairs to this target cluster waiting for room in its share of the read-back budget before they read the remote back and send."},
			[]string{"cluster"}),
		Messages: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "replicated_messages_total", Help: "Messages copied to the target and confirmed by it."}, pair),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "replicated_bytes_total", Help: "Payload bytes copied to the target and confirmed by it."}, pair),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns,
			Name: "replication_latency_seconds", Help: "Origin publish time to target confirmation.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, pair),
		SendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "send_errors_total", Help: "Failed sends to the target; the partition rewinds and retries."}, pair),
		Skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "skipped_messages_total", Help: "Messages acknowledged without copying, by reason."},
			[]string{"source", "target", "reason"}),
		DupsUnproven: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "duplicates_unproven_total", Help: "Sends the target answered as duplicates. Not acknowledged on that word: the partition re-reads the target, skips what it finds there and sends the rest again."}, pair),
		Backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "backlog_messages", Help: "Messages on the source cursor not yet replicated."}, topic),
		OldestAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "oldest_unreplicated_age_seconds", Help: "Age of the oldest message not yet replicated (0 when none), true even while the target is down."}, topic),
		Connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "connected_partitions", Help: "Partitions whose cursor and target producer are both open."}, pair),
		Partitions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "partitions_managed", Help: "Topic partitions with a running replicator."}, pair),
		Topics: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "topics_managed", Help: "Topics with running replicators."}, pair),
		TopicsRefused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "topics_refused", Help: "Topics not replicated because the target disagrees (partition count mismatch)."}, pair),
		PairProblems: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "pair_setup_problem", Help: "1 while a pair cannot replicate at all: its namespace is missing on the target, or the credentials may not administer it there (the log says which)."}, pair),
	}
	sub := []string{"source", "target", "topic", "subscription"}
	m.MarkersInvalid = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "markers_invalid_total", Help: "Markers skipped because they did not decode or verify, by reason."},
		[]string{"cluster", "reason"})
	m.MarkersWritten = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "markers_written_total", Help: "Markers written into local partitions, by kind."},
		[]string{"source", "target", "kind"})
	m.SnapshotsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "snapshots_started_total", Help: "Snapshot requests written."}, pair)
	m.SnapshotsCompleted = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "snapshots_completed_total", Help: "Snapshots completed."}, pair)
	m.SnapshotsTimedOut = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "snapshots_timed_out_total", Help: "Snapshot requests that got no usable response in time."}, pair)
	m.SnapshotsUnanswered = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "snapshot_requests_unanswered_total", Help: "Requests from a remote left unanswered because a third origin's watermark is unknown since a restart (until the partition's history or a new message of that origin tells it)."}, pair)
	m.SnapshotRTT = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns,
		Name: "snapshot_round_trip_seconds", Help: "Snapshot request to completion.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, pair)
	m.UpdatesSent = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "subscription_updates_sent_total", Help: "Subscription updates written for a remote."}, pair)
	m.AdminRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "admin_requests_total", Help: "Calls to a cluster's admin API (discovery, stats, subscription sync, the read-back of copies), by kind (list-topics, topic-metadata, create-topic, grow-topic, stats, partitioned-stats, internal-stats, reset-cursor, create-subscription, list-subscriptions, last-message-id, read-message, namespace, brokers, positions: the positions servlet, positions-acknowledge: moves by it, positions-backlogs: backlogs from it, other)."}, []string{"cluster", "kind"})
	m.PositionsProven = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "positions_proven_total", Help: "Follows of a partition whose tracked subscriptions the topic's stats reading proved at or past the newest snapshot, so that their positions were not read (an internal-stats call saved)."}, []string{"cluster"})
	m.HistoryEntriesRead = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "history_entries_read_total", Help: "Entries of a cluster's partitions re-read at start or takeover to rebuild snapshot caches and third-origin watermarks (bounded by sidecar.snapshot.history_entries)."}, []string{"cluster"})
	m.SubsCreatedRemote = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "subscriptions_created_on_remote_total", Help: "Tracked subscriptions created on a remote that lacked them, at its earliest message (no snapshot covered them yet)."}, pair)
	m.UpdatesApplied = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "subscription_updates_received_total", Help: "Subscription updates received from a remote, by the route that moved the subscription (protocol: an acknowledgement over the binary protocol; servlet: a cumulative acknowledgement by the brokers' positions servlet; admin: reset-cursor or create; none: refused without a call) and outcome (applied, created, consumers-attached, refused-type, not-forward, error)."},
		[]string{"cluster", "route", "outcome"})
	m.HolesReceived = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "subscription_ack_holes_received_total", Help: "Acked markers received from a remote (a subscription's entries acknowledged past its mark-delete position there), by outcome: applied (their copies here acknowledged one by one), not-covered (a range reaches before the copies this process read: dropped), too-many (too many entries: dropped), no-copies (no copy here of any entry named), no-subscription, refused-type (not Shared or Key_Shared AUTO_SPLIT, or the broker refused the move's consumer), error."},
		[]string{"cluster", "outcome"})
	m.SubscriptionLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
		Name: "subscription_lag_entries", Help: "Backlog entries (batches) the remote copy of a subscription would deliver again after a failover now (remote backlog minus local), summed over the topic's partitions."}, sub)
	m.SubscriptionLagSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
		Name: "subscription_lag_seconds", Help: "Age of the snapshot behind the remote copy of a subscription, while it trails the local one; the oldest over the topic's partitions."}, sub)
	m.AdminBudgetWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
		Name: "admin_budget_waiting", Help: "Subscription-sync admin requests waiting for a token of the cluster's admin budget (sidecar.admin_rate); always above 0 means follows run late."}, []string{"cluster"})
	m.PositionsBrokers = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
		Name: "positions_brokers", Help: "With sidecar.positions: servlet, a cluster's brokers by where the follows of their topics learn positions (servlet: the positions servlet answered; admin: it answered 404, or its last request failed)."}, []string{"cluster", "source"})
	m.PositionsFromServlet = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "positions_from_servlet_total", Help: "Follows of a partition whose positions came from the brokers' positions servlet (no admin read)."}, []string{"cluster"})
	m.PositionsAckRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
		Name: "positions_acknowledge_requests_total", Help: "Requests of subscription moves to the brokers' positions servlet (each carries every move waiting for that broker; subscription_updates_received_total{route=\"servlet\"} counts the moves), by outcome (ok, error)."}, []string{"cluster", "outcome"})
	if reg != nil {
		reg.MustRegister(m.PositionsBrokers, m.PositionsFromServlet, m.PositionsAckRequests)
		reg.MustRegister(m.Messages, m.Bytes, m.Latency, m.SendErrors, m.Skipped, m.DupsUnproven,
			m.Backlog, m.OldestAge, m.Connected, m.Partitions, m.Topics, m.TopicsRefused, m.PairProblems,
			m.MarkersInvalid, m.MarkersWritten, m.SnapshotsStarted, m.SnapshotsCompleted, m.SnapshotsTimedOut,
			m.SnapshotsUnanswered, m.SnapshotRTT, m.UpdatesSent, m.SubsCreatedRemote, m.AdminRequests, m.PositionsProven, m.HistoryEntriesRead, m.UpdatesApplied, m.HolesReceived, m.SubscriptionLag, m.SubscriptionLagSeconds, m.AdminBudgetWaiting,
			m.InflightBytes, m.ReceiveBytes, m.ReceiveWaiting, m.ReadBackBytes, m.ReadBackWaiting, m.PartitionsStopped, m.PartitionsAwaitingReadBack)
	}
	m.Links = newLinkMetrics()
	m.Verify = newVerifyMetrics(ns)
	if reg != nil {
		reg.MustRegister(m.Links, m.Verify)
	}
	return m
}

// TopicLabel is the topic label of a topic or partition name:
// "tenant/namespace/topic", without the domain and the partition suffix,
// so that topics of different namespaces do not share a series.
func TopicLabel(name string) string {
	if _, rest, ok := strings.Cut(name, "://"); ok {
		name = rest
	}
	if i := strings.LastIndex(name, "-partition-"); i > 0 {
		name = name[:i]
	}
	return name
}

// partLag holds each partition's subscription lag and sets the topic's
// series to their sum (entries) and maximum (seconds). It is indexed
// both ways, by series and by partition: every partition's sync drops its
// lags when it stops, and at exit they all stop at once; a drop that
// walked every series under the lock made the stop quadratic in the
// partitions (8,000 syncs took seconds, 20,000 about 20 s).
type partLag struct {
	mu     sync.Mutex
	series map[[4]string]*lagSeries
	byPart map[string]map[[4]string]struct{} // partition -> the series it reports to
}

// lagSeries is one series' partitions and their total entries (kept as
// they change: entries are counts, exact in a float64).
type lagSeries struct {
	parts   map[string][2]float64 // partition -> entries, seconds
	entries float64
	oldest  float64 // the largest seconds among parts
}

// SetLag records partition's lag for the series labels (source, target,
// topic, subscription) and updates the series.
func (m *Metrics) SetLag(labels [4]string, partition string, entries, seconds float64) {
	l := &m.lag
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.series == nil {
		l.series = map[[4]string]*lagSeries{}
		l.byPart = map[string]map[[4]string]struct{}{}
	}
	s := l.series[labels]
	if s == nil {
		s = &lagSeries{parts: map[string][2]float64{}}
		l.series[labels] = s
	}
	mine := l.byPart[partition]
	if mine == nil {
		mine = map[[4]string]struct{}{}
		l.byPart[partition] = mine
	}
	mine[labels] = struct{}{}
	old, had := s.parts[partition]
	s.parts[partition] = [2]float64{entries, seconds}
	s.entries += entries - old[0]
	switch {
	case seconds >= s.oldest:
		s.oldest = seconds
	case had && old[1] == s.oldest:
		s.oldest = s.maxSeconds() // the oldest got younger
	}
	m.exportLag(labels, s)
}

// DropLag forgets partition's lags (its replicator stopped); a series left
// with no partition is deleted. It visits the partition's own series
// only.
func (m *Metrics) DropLag(partition string) {
	l := &m.lag
	l.mu.Lock()
	defer l.mu.Unlock()
	for labels := range l.byPart[partition] {
		m.forgetLag(labels, partition)
	}
	delete(l.byPart, partition)
}

// DropSubLag forgets one subscription's lag on partition (it is gone
// there): a drill's subscription has a random name, and its series would
// otherwise stay until the partition's replicator stops.
func (m *Metrics) DropSubLag(labels [4]string, partition string) {
	l := &m.lag
	l.mu.Lock()
	defer l.mu.Unlock()
	m.forgetLag(labels, partition)
	if mine := l.byPart[partition]; mine != nil {
		delete(mine, labels)
		if len(mine) == 0 {
			delete(l.byPart, partition)
		}
	}
}

// forgetLag removes partition from one series (l.mu held), deleting the
// series when no partition is left. The caller updates byPart.
func (m *Metrics) forgetLag(labels [4]string, partition string) {
	s := m.lag.series[labels]
	if s == nil {
		return
	}
	old, ok := s.parts[partition]
	if !ok {
		return
	}
	delete(s.parts, partition)
	if len(s.parts) == 0 {
		delete(m.lag.series, labels)
		m.SubscriptionLag.DeleteLabelValues(labels[:]...)
		m.SubscriptionLagSeconds.DeleteLabelValues(labels[:]...)
		return
	}
	s.entries -= old[0]
	if old[1] == s.oldest && old[1] > 0 {
		s.oldest = s.maxSeconds()
	}
	m.exportLag(labels, s)
}

// maxSeconds is the largest seconds among s's partitions.
func (s *lagSeries) maxSeconds() float64 {
	var oldest float64
	for _, v := range s.parts {
		oldest = max(oldest, v[1])
	}
	return oldest
}

func (m *Metrics) exportLag(labels [4]string, s *lagSeries) {
	m.SubscriptionLag.WithLabelValues(labels[:]...).Set(s.entries)
	m.SubscriptionLagSeconds.WithLabelValues(labels[:]...).Set(s.oldest)
}
