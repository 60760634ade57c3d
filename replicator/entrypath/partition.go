package entrypath

// A partition's replicator, and how the pair builds it (its sessions run
// in entrysessions.go).

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// Partition replicates one local partition to one remote, entry by
// entry: the unit of work. It owns its cursor and producer; one partition
// failing never stops another.
type Partition struct {
	local, remote string
	topic         string      // the partition, the same on both sides
	keys          marker.Keys // sign the copies' origins; zero: none
	ends          entryEndpoints
	budget        *ByteBudget
	maxPending    int              // the producer's window: entries sent and not confirmed
	skipRefused   bool             // on_refused: skip (an entry the remote refuses for good), not stop
	msgRate       *cluster.Limiter // shared by the pair's partitions; nil = unlimited
	byteRate      *cluster.Limiter
	m             *metrics.Metrics
	log           *zap.Logger
	// drainTimeout bounds how long a stopping session waits for in-flight
	// sends, so that SIGTERM exits within 10 s even when the remote is down.
	drainTimeout time.Duration
	// stepDownAfter is how long an active session may go without a
	// working link to the remote before it steps down (see
	// stepDownAfter); 0: never.
	stepDownAfter time.Duration

	// closing is closed when the last producer has finished closing. A new
	// producer waits for it: an abandoned producer that reconnected later
	// could otherwise write old entries after the new one's (closeWithin).
	closing chan struct{}

	// sync keeps subscriptions in step; nil when none are configured. It
	// sees every entry this pipe reads (entryrule.Marker, entryrule.Origin).
	sync SyncFeed
	// linkUp is true while a producer to the remote is open.
	linkUp atomic.Bool
	// received, when set, is set on each entry read: the pair refreshes
	// the stats of a quiet topic early once it has traffic.
	received *atomic.Bool
	// activeOut, when set, mirrors the open session's active (see
	// Config.Active); false between sessions.
	activeOut *atomic.Bool
	// lastSeen is the last entry the sync saw (hasSeen): an entry that
	// does not follow it was resumed past entries another instance
	// processed (continues).
	lastSeen marker.Position
	hasSeen  bool
	// steppedDown is when the last session stepped down (zero: it did
	// not): the next one waits until the remote answers (awaitTarget).
	steppedDown time.Time
	// aheadAt is the entry the last sessions ended on with errStartAhead,
	// aheadRuns how many in a row (see maxStartAhead).
	aheadAt   marker.Position
	aheadRuns int
	// readBackFails counts the sessions in a row whose read-back of the
	// remote failed on a link error (see maxReadBackRetries).
	readBackFails int
	// awaitingReadBack is set while the partition waits for a read-back
	// that goes through (session.awaitReadBack).
	awaitingReadBack bool
}

// Config is what a Partition is built from: the pair's two clusters and
// cursor, its windows and budgets, and the subscription sync it feeds.
type Config struct {
	Local, Remote *cluster.Clients
	Topic         string // the partition, the same on both sides
	// Subscription is the replication cursor's name; Start where a new
	// one starts.
	Subscription string
	Start        wire.InitialPosition
	// MaxPending is the producer's window: entries sent and not confirmed
	// (the target's max_pending_messages). The cursor's window is
	// cursorPermitsPerPending times that, in messages.
	MaxPending int
	Keys       marker.Keys // sign the copies' origins; zero: none
	// ReaderPrefix starts the read-back's reader names:
	// sidecar.cursor_prefix.
	ReaderPrefix string
	// Budget is the target's share of the in-flight budget, Pool its
	// share of the receive budget, ReadBack its share of the read-back
	// budget.
	Budget   *ByteBudget
	Pool     *ReceivePool
	ReadBack *ReadBackPool
	// SkipRefused: on_refused: skip (an entry the remote refuses for
	// good), not stop.
	SkipRefused bool
	// MsgRate and ByteRate are shared by the pair's partitions; nil:
	// unlimited.
	MsgRate, ByteRate *cluster.Limiter
	Metrics           *metrics.Metrics
	Log               *zap.Logger
	// Sync keeps subscriptions in step; nil when none are configured.
	Sync SyncFeed
	// Received, when set, is set on each entry read.
	Received *atomic.Bool
	// Active, when set, is kept true while this instance's cursor is the
	// partition's active consumer (a session is open and the broker has
	// not made another instance's active): the continuous verifier runs
	// where the copy is made.
	Active *atomic.Bool
}

// New builds the replicator of c's partition over the clusters' wire
// clients; nothing connects until Run. Its producer sends under the pair's
// producer name (marker.ProducerName, of the entries' epoch), and it steps
// down after the remote's keep_alive allows (stepDownAfter).
func New(c Config) *Partition {
	return &Partition{
		local: c.Local.Name, remote: c.Remote.Name,
		ends: &wireEndpoints{
			local: c.Local, remote: c.Remote, topic: c.Topic,
			subscription: c.Subscription,
			producerName: marker.ProducerName(c.Local.Name, c.Remote.Name),
			start:        c.Start, permits: cursorPermitsPerPending * c.MaxPending, maxPending: c.MaxPending,
			pool: c.Pool, readBackPool: c.ReadBack,
			keys: c.Keys, log: c.Log,
			readerPrefix: c.ReaderPrefix,
		},
		topic: c.Topic, keys: c.Keys,
		budget: c.Budget, maxPending: c.MaxPending, skipRefused: c.SkipRefused,
		msgRate: c.MsgRate, byteRate: c.ByteRate,
		m: c.Metrics, log: c.Log, drainTimeout: entryDrainTimeout,
		stepDownAfter: stepDownAfter(c.Remote.Config.KeepAlive.Duration),
		sync:          c.Sync, received: c.Received, activeOut: c.Active,
	}
}

// stepDownAfter is how long an active cursor may go without a working
// link to the remote (its producer cannot be opened, or stays
// reconnecting or silent) before the session steps down: twice the
// remote's keep_alive. The wire client already takes up to 1.125
// keep_alive to notice a half-open link and then reconnects within
// seconds (backoff up to 5 s, a 10 s handshake timeout), so a link that
// blips, a broker restart or a topic moving between brokers is over well
// inside the bound and never moves the partition (a takeover costs a
// read-back and the broker's failover delay); a link that stays cut is
// handed to another instance within about one more keep_alive.
func stepDownAfter(keepAlive time.Duration) time.Duration { return 2 * keepAlive }
