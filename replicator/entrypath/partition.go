package entrypath

// A partition's replicator as the pair builds and runs it.

import (
	"context"
	"sync/atomic"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
	"go.uber.org/zap"
)

// Config is what a Partition is built from: the pair's two clusters and
// cursor, its windows and budgets, and the subscription sync it feeds.
type Config struct {
	Local, Remote *cluster.Conn
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
	Sync Sync
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

// Run replicates until ctx is done; see runSessions.
func (p *Partition) Run(ctx context.Context) error {
	defer runSync(ctx, p.sync, p.linkUp.Load)()
	defer p.readBackWorks()
	return runSessions(ctx, p.log, p.m, p.local, p.remote, p.session)
}
