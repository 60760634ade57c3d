// Package subsync keeps replicated subscriptions in step for one (local
// partition, remote): the glue between the entry path, which reads the
// partition, and the pure protocol of snapshot/ and subscription/. It
// feeds what the entry path reads (DataAt, MarkerAt, BatchedMarker,
// Takeover: the entrypath.SyncFeed interface) to the snapshot machine, writes
// the markers the machine returns (MarkerSink), follows the tracked
// subscriptions' positions and sends updates when they pass a snapshot,
// applies the updates that arrive from the remote (over the binary
// protocol, MoveClient, or with reset-cursor, subscription.Admin: route.go),
// and at start re-reads a bounded part of the partition's history to
// rebuild the snapshot cache and the third origins' watermarks
// (rebuild.go, history.go).
//
// Its files stand in three layers. The parts own their state and know
// nothing of Sync (gate.go, pace.go, lag.go, apply.go, fence.go,
// count.go, followstate.go, target.go, mover.go, history.go, moved.go,
// adminrate.go); sync.go composes them; the glue above it has a file per
// job: run.go (Run), intake.go (what the entry path calls), follow.go
// (one follow round, with the helpers it calls in the files below it:
// servlet.go and adminpath.go for the positions),
// route.go (applying one update), rebuild.go (the start-up re-read).
//
// It exists apart from the entry path so that the data path does not
// depend on how subscriptions follow: the entry path knows only the
// interface it feeds, and this package can be rewritten behind it.
//
// A Sync is fed from one goroutine at a time while its Run goroutine
// runs; its Config is fixed after New. Applied is safe for concurrent
// use and shared by the syncs of one partition.
package subsync

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/metrics"
	"github.com/geo-sidecar/geo-sidecar/snapshot"
	"github.com/geo-sidecar/geo-sidecar/subscription"
)

// Config is what a Sync is built from: the partition and pair it keeps in
// step, the snapshot machine and planner it drives, and its I/O, each
// behind a small interface so that the sync is unit-tested with fakes.
type Config struct {
	Local, Remote string
	Topic         string // partition topic name, the same on both sides
	Keys          marker.Keys
	Interval      time.Duration
	// Active reports whether this instance's cursor is the partition's
	// active consumer (entrypath.Config.Active); nil: always. Only the
	// active instance sends updates and holds the marker producer.
	Active func() bool
	// Tracked reports whether a subscription of the partition is kept in
	// step.
	Tracked     func(sub string) bool
	Machine     *snapshot.Machine
	Planner     *subscription.Planner
	Writer      MarkerSink
	LocalAdmin  Admin              // local cluster, for follow and lag
	RemoteAdmin Admin              // remote cluster, for lag
	SubAdmin    subscription.Admin // local cluster, to apply updates (the admin route)
	// Moves moves subscriptions here over the binary protocol (the
	// protocol route), FollowName naming its consumer; nil: the admin
	// route alone.
	Moves      MoveClient
	FollowName string
	// SubStates reads the subscriptions' states here, RemoteStates on the
	// remote, for the route an update takes (route.go); nil: not read
	// (the admin route reads its own).
	SubStates, RemoteStates States
	// RemoteSubs creates, on the remote, tracked subscriptions it lacks
	// (createOnRemote); nil: never.
	RemoteSubs subscription.Admin
	History    HistorySource // local partition, for the start-up re-read
	// HistoryEntries bounds the re-read (sidecar.snapshot.history_entries).
	HistoryEntries int64
	// LayoutNow reads the partition's layout for a re-read after a
	// takeover; nil: unknown (the re-read starts at the oldest entry).
	LayoutNow func(ctx context.Context) (*cluster.Layout, error)
	Metrics   *metrics.Metrics
	Log       *zap.Logger
	// Applied records where received updates put subscriptions on this
	// cluster; it is shared by every remote's Sync of the partition.
	Applied *Applied
	// CursorsAtStart are the partition's cursors when the sync was built
	// (nil if unknown), for the start-up re-read; LayoutAtStart is where
	// its entries and cursors were then (nil if unknown).
	CursorsAtStart []string
	LayoutAtStart  *cluster.Layout
	// Stats is the shared stats reading of the partition's topic on this
	// cluster (moved.go): follow reads positions only for what moved, and
	// the lag gauges take the local backlogs from it; RemoteStats is the
	// same on the remote, for the remote half of the lag. Nil: every
	// follow reads positions (LocalAdmin.MarkDeletes) and the lag reads
	// both backlogs (LocalAdmin, RemoteAdmin).
	Stats, RemoteStats *Poller
	// Servlet, if set, is this cluster's positions servlet follower
	// (servlet.go, sidecar.positions: servlet): a follow takes the
	// partition's positions from it when a broker reports the partition,
	// with no admin request. Cursor is the pair's own replication cursor
	// on the partition, in the servlet's scope: a broker that lists it
	// has the partition. ServletNamesKnown: every tracked subscription's
	// name is in the servlet's scope (the entry names them, no patterns);
	// otherwise positions are also read from the admin API every
	// idleFollow, which puts new names in scope.
	Servlet *Servlet
	Cursor  string
	// RemoteServlet, if set, is the remote cluster's positions servlet
	// follower: the lag gauges take the remote's backlogs from it
	// (servletbacklogs.go).
	RemoteServlet     *Servlet
	ServletNamesKnown bool
	// AdminRate is this cluster's admin request rate (sidecar.admin_rate), shared by its syncs
	// (adminrate.go); nil: unbounded.
	AdminRate *AdminRate
	// Release, if set, is called when Run returns (gives back the
	// pollers).
	Release func()
}

// Sync keeps the configured subscriptions of one (local partition,
// remote) in step: it feeds what the partition's replicator reads to the
// snapshot machine, writes the markers the machine returns, sends updates
// when a local subscription passes a snapshot, and applies updates that
// arrive from the remote. It outlives the replicator's sessions. The
// entry path feeds it from one goroutine at a time (DataAt, MarkerAt,
// BatchedMarker, Takeover, StartsAt) while Run runs on another; the
// Config is not changed after New.
type Sync struct {
	Config

	// queue holds the received updates not applied yet and runs the
	// worker that applies them (apply.go).
	queue applyQueue
	// gate judges the markers the entry path reads (intake.go).
	gate gate
	// last are the snapshot machine's counts at the last countStats.
	last snapshot.Stats

	// linkUp is Run's: whether the pipe has a producer to the remote
	// open (nil before Run).
	linkUp func() bool
	// useless is set when no snapshot request could serve a tracked
	// subscription here (snapshotUseful, at the last follow): requests
	// wait until one could. Unset until the first follow.
	useless atomic.Bool
	// passive is Config.Active's opposite as Run last saw it (false
	// before Run: a follow called before it sends): an update is sent
	// only while this instance is active (follow.go), and the marker
	// producer is let go when it stops being (run.go).
	passive atomic.Bool
	// relearn asks run to re-read the partition's history (takeover).
	relearn chan struct{}
	// pace is when follow runs and run sleeps (pace.go).
	pace pacer
	// lags is what the lag gauges were last set to (lag.go); used by run
	// alone.
	lags lagReport
	// fl is what follow knows of the positions and readings it used
	// (followstate.go); used by run alone.
	fl followState
	// targets are what the apply loop knows of the subscriptions it moves,
	// wm its protocol mover (target.go, mover.go); used by the apply loop
	// alone.
	targets targets
	wm      *wireMover
	// entries counts what the entry path feeds, for the proof that a
	// stats reading shows positions past a snapshot (count.go).
	entries entryCount
	// copies are where the remote's entries were copied to here, as the
	// entry path read them, for the remote's ack holes (copymap.go); used
	// by the feeding goroutine alone. markerPos are where the last markers
	// stand in the local partition, for follow's sendAcked (holes.go).
	copies    copyMap
	markerPos markerSet
}

// New builds the sync of c; nothing runs until Run.
func New(c Config) *Sync {
	return &Sync{Config: c, relearn: make(chan struct{}, 1), pace: pacer{wake: make(chan struct{}, 1)}}
}

// Admin is what follow and lag need of one cluster's admin API, for
// one partition. Implementations must be safe for concurrent use.
type Admin interface {
	// MarkDeletes returns the mark-delete position (entry granular, Batch
	// -1) of each subscription of topic, leaving out any reported without
	// a readable one.
	MarkDeletes(ctx context.Context, topic string) (map[string]marker.Position, error)
	// Backlogs returns the precise backlog, in entries, of each
	// subscription of topic.
	Backlogs(ctx context.Context, topic string) (map[string]int64, error)
}

// MarkerSink writes markers into the local partition. write may return
// before the marker is stored; a marker lost after that is only a snapshot
// or update that comes again later. Implementations must be safe for
// concurrent use: the replicator's reader and the sync's ticker both write.
type MarkerSink interface {
	Write(ctx context.Context, mk marker.Marker) error
	// close flushes and releases what write opened; write may open it
	// again.
	Close()
}

// Wrote records mk as a marker this process wrote, as the sync does for
// each marker it sends (before the write returns, since the replicator
// may read it back first): read back from the partition, it is forwarded
// once (MarkerAt).
func (s *Sync) Wrote(mk marker.Marker) { s.gate.outbox.put(mk) }

// write puts markers into the local partition.
func (s *Sync) write(ctx context.Context, mks []marker.Marker) {
	for _, mk := range mks {
		if err := s.send(ctx, mk); err != nil {
			if mk.Kind == marker.KindSnapshotRequest {
				// Not written: no response will come. Its place among
				// the requests in flight is free at once.
				s.Machine.Abandon(mk.SnapshotID)
			}
			if errors.Is(err, errStandby) {
				s.Log.Debug("marker not written: a standby", zap.Stringer("kind", mk.Kind))
			} else {
				s.Log.Warn("writing a marker failed", zap.Stringer("kind", mk.Kind), zap.Error(err))
			}
			continue
		}
		s.Metrics.MarkersWritten.WithLabelValues(s.Local, s.Remote, mk.Kind.String()).Inc()
		if ce := s.Log.Check(zap.DebugLevel, "marker written"); ce != nil {
			ce.Write(zap.Stringer("kind", mk.Kind), zap.String("snapshot_id", mk.SnapshotID), zap.String("subscription", mk.Subscription))
		}
	}
}

// send writes one marker, remembering it for forwarding (outbox) first:
// the replicator may read it back before the write returns.
//
// A standby writes nothing: the active instance reads the same partition
// and writes what is due, and a producer opened here would take the
// partition's one marker producer name from it. One made a standby
// during the write lets the producer go at once (Run's loop, which
// does it too, may have looked already).
func (s *Sync) send(ctx context.Context, mk marker.Marker) error {
	if !s.active() {
		return errStandby
	}
	if mk.Kind != marker.KindSnapshot {
		s.Wrote(mk)
	}
	err := s.Writer.Write(ctx, mk)
	if !s.active() {
		s.Writer.Close()
	}
	return err
}

// errStandby is send's refusal while another instance's cursor is the
// partition's active consumer.
var errStandby = errors.New("a standby writes no marker: another instance's cursor is the partition's active consumer")

// gauges are this sync's lag series.
func (s *Sync) gauges() lagGauges {
	return lagGauges{m: s.Metrics, local: s.Local, remote: s.Remote, topic: s.Topic}
}

// lagKey names this sync among the reporters of subscription lag.
func (s *Sync) lagKey() string { return s.gauges().key() }

// Pending returns the updates received and not applied yet, the newest
// per subscription.
func (s *Sync) Pending() map[string]marker.Position { return s.queue.waiting() }
