package subsync

// The start-up re-read of a partition's history (Sync.rebuild): which
// entries it reads, and the Pulsar reader it reads them with.
//
// Snapshot markers are the snapshot cache's durable form, and the
// responses this sidecar wrote in the partition are the third origins'
// watermarks'; a restarted sidecar learns both again by reading the
// partition. Reading all of it costs a partition's whole retention, once
// per remote, at every start: with 1,000 partitions and days of retention
// that is the start. So the read is bounded by sidecar.snapshot.history_entries:
//
//   - the newest entries (the tail), where the newest snapshots and
//     responses are;
//   - around each tracked subscription's position at start, where the
//     snapshot it needs next is (the newest one at or before it) and the
//     ones it will need after;
//   - further back, in growing steps, only while a third origin's
//     watermark is still unknown: a watermark must be the newest one, so
//     it is learned only from a contiguous suffix of the partition, never
//     from a window with unread entries after it.
//
// A snapshot outside these windows is not cached again: a subscription
// between two windows follows the remote later (more redelivered after a
// failover), never past a message it has not consumed.

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
)

// entrySpan is a range of entries, both ends included.
type entrySpan struct{ from, through marker.Position }

// historyPlan is what the start-up re-read reads, in order: tail first
// (the suffix watermarks are learned from), then the windows around
// tracked subscriptions that lie before it.
type historyPlan struct {
	tail    entrySpan
	windows []entrySpan // before tail.from, oldest first, not overlapping
}

// planHistory bounds the re-read to about n entries before the newest and
// n entries either side of each position in at (the tracked
// subscriptions' mark-delete positions). Windows that touch are merged.
func planHistory(l *cluster.Layout, at []marker.Position, n int64) historyPlan {
	last := l.Last()
	plan := historyPlan{tail: entrySpan{from: l.Move(last, -(n - 1)), through: last}}
	var ws []entrySpan
	for _, p := range at {
		ws = append(ws, entrySpan{from: l.Move(p, -n), through: l.Move(p, n)})
	}
	slices.SortFunc(ws, func(a, b entrySpan) int { return a.from.Compare(b.from) })
	for _, w := range ws {
		if w.from.Compare(plan.tail.from) >= 0 {
			continue // inside the tail
		}
		if w.through.Compare(plan.tail.from) >= 0 {
			w.through = l.Move(plan.tail.from, -1)
		}
		if k := len(plan.windows) - 1; k >= 0 && w.from.Compare(l.Move(plan.windows[k].through, 1)) <= 0 {
			if w.through.Compare(plan.windows[k].through) > 0 {
				plan.windows[k].through = w.through
			}
			continue
		}
		plan.windows = append(plan.windows, w)
	}
	return plan
}

// HistorySource opens a reader of the local partition at an entry
// (Earliest: the oldest it still holds), for the start-up re-read.
type HistorySource interface {
	Open(from marker.Position) (HistoryReader, error)
}

// HistoryReader is what rebuild needs of a reader; pulsar.Reader is one.
// Used by one goroutine.
type HistoryReader interface {
	HasNext() bool
	Next(ctx context.Context) (pulsar.Message, error)
	Close()
}

// rebuild refills the snapshot cache after a start by re-reading this
// pair's snapshot markers, and teaches the machine the third origins'
// watermarks when the cursor did not start fresh
// (snapshot.Machine.Learn): from the responses this sidecar wrote for the
// remote before it stopped, which name every third origin (NoneSeen for
// one that never published), signed under the marker key. Without them a
// restarted sidecar could not answer requests until each third origin
// published again, and one that never publishes on a partition kept that
// pair's subscriptions out of step for good.
//
// What it reads is bounded (see the top of this file) when the
// partition's layout at start is known; otherwise it reads from the
// oldest entry. Partitions with neither a tracked subscription nor an
// unknown watermark are not read.
func (s *Sync) rebuild(ctx context.Context, layout *cluster.Layout) {
	var at []marker.Position
	if layout != nil {
		for name, md := range layout.MarkDeletes {
			if s.Tracked(name) {
				at = append(at, md)
			}
		}
	}
	tracked := len(at) > 0 || slices.ContainsFunc(s.CursorsAtStart, s.Tracked)
	unknown := s.Machine.Unknown()
	if !tracked && len(unknown) == 0 {
		return
	}
	r := historyRead{s: s, learn: len(unknown) > 0}
	if layout == nil || len(layout.Ledgers) == 0 {
		r.read(ctx, entrySpan{from: cluster.Earliest, through: marker.Position{Ledger: 1<<63 - 1}})
		r.done(unknown, "whole")
		return
	}
	n := max(s.HistoryEntries, 1)
	plan := planHistory(layout, at, n)
	suffix := plan.tail.from
	if !r.read(ctx, plan.tail) {
		r.done(unknown, "tail")
		return
	}
	// Further back while a watermark is unknown, doubling the step.
	for step := n; len(s.Machine.Unknown()) > 0 && suffix.Compare(layout.First()) > 0; step *= 2 {
		from := layout.Move(suffix, -step)
		if !r.read(ctx, entrySpan{from: from, through: layout.Move(suffix, -1)}) {
			r.done(unknown, "suffix")
			return
		}
		suffix = from
	}
	r.learn = false // not a suffix: a watermark here may not be the newest
	for _, w := range plan.windows {
		if w.from.Compare(suffix) >= 0 {
			continue
		}
		if w.through.Compare(suffix) >= 0 {
			w.through = layout.Move(suffix, -1)
		}
		if !r.read(ctx, w) {
			break
		}
	}
	r.done(unknown, "bounded")
}

// historyRead is one rebuild's reading state.
type historyRead struct {
	s       *Sync
	learn   bool // learn third-origin watermarks from what is read
	entries int  // entries read
	snaps   int  // snapshot markers cached
	resps   int  // own responses learned from
}

// read feeds the entries of w to the machine and reports whether the
// rebuild may go on (false: the reader failed or ctx ended).
func (r *historyRead) read(ctx context.Context, w entrySpan) bool {
	s := r.s
	rd, err := s.History.Open(w.from)
	if err != nil {
		s.Log.Warn("cannot re-read the partition's markers; subscriptions sync from new snapshots", zap.Error(err))
		return false
	}
	defer rd.Close()
	lastEntry := marker.Position{Ledger: -2}
	for rd.HasNext() && ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		msg, err := rd.Next(rctx)
		cancel()
		if err != nil {
			return false
		}
		pos := positionOf(msg.ID())
		entry := marker.Position{Ledger: pos.Ledger, Entry: pos.Entry, Batch: -1}
		if entry.Compare(w.through) > 0 {
			break
		}
		if entry != lastEntry {
			r.entries++
			lastEntry = entry
		}
		r.message(msg, pos)
	}
	return ctx.Err() == nil
}

// message feeds one message read from the history to the machine.
func (r *historyRead) message(msg pulsar.Message, pos marker.Position) {
	s := r.s
	k, isMarker := marker.KindOf(msg.Properties())
	if !isMarker {
		// Data teaches nothing here, copies neither: their origin
		// properties as pulsar-client-go shows them cannot be checked
		// against the signature (it covers the entry's bytes, which this
		// reader does not return), and anyone who can write here could
		// name a third origin's watermark far ahead, so that a snapshot
		// dated by it would move a remote subscription past messages not
		// copied there yet. Only this sidecar's own signed responses and,
		// live, signed copies teach watermarks; one learned too low dates
		// a snapshot early, which costs duplicates, not messages.
		return
	}
	if k != marker.KindSnapshot && (k != marker.KindSnapshotResponse || !r.learn) {
		return
	}
	mk, err := s.Keys.Decode(msg.Payload())
	if err != nil || mk.Topic != s.Topic || mk.From != s.Local || mk.To != s.Remote {
		return
	}
	if k == marker.KindSnapshot {
		s.Machine.Marker(pos, mk)
		r.snaps++
		return
	}
	for c, p := range mk.Watermarks {
		s.Machine.Learn(c, p)
	}
	r.resps++
}

func (r *historyRead) done(unknownBefore []string, how string) {
	s := r.s
	s.Metrics.HistoryEntriesRead.WithLabelValues(s.Local).Add(float64(r.entries))
	s.Log.Debug("partition history re-read", zap.String("read", how), zap.Int("entries", r.entries),
		zap.Int("snapshot_markers", r.snaps), zap.Int("own_responses", r.resps),
		zap.Strings("watermarks_unknown_before", unknownBefore),
		zap.Strings("watermarks_unknown_after", s.Machine.Unknown()))
}

// NewHistory is the HistorySource of topic, a partition of client's
// cluster; its readers' names start with cursorPrefix
// (sidecar.cursor_prefix; see pulsarHistory).
func NewHistory(client pulsar.Client, topic, cursorPrefix string) HistorySource {
	return pulsarHistory{client: client, topic: topic, cursorPrefix: cursorPrefix}
}

// pulsarHistory is HistorySource over the local cluster's client: a
// non-durable reader of the partition.
//
// The reader's subscription is named under the cursor prefix
// ("<prefix>.history-<random>"), like the sidecar's own cursors: a broker
// entry filter that hides markers from applications (deploy/entryfilter)
// lets it read them, and subscription sync does not take it for an
// application's subscription. Without a prefix the client picks the name.
type pulsarHistory struct {
	client       pulsar.Client
	topic        string
	cursorPrefix string // sidecar.cursor_prefix
}

func (h pulsarHistory) Open(from marker.Position) (HistoryReader, error) {
	start := pulsar.EarliestMessageID()
	if from.Ledger >= 0 {
		start = pulsar.NewMessageID(from.Ledger, from.Entry, -1, partitionIndex(h.topic))
	}
	return h.client.CreateReader(pulsar.ReaderOptions{
		Topic:                   h.topic,
		StartMessageID:          start,
		StartMessageIDInclusive: true,
		SubscriptionName:        h.subscriptionName(),
	})
}

// positionOf is where a message read by pulsar-client-go sits in its
// partition.
func positionOf(id pulsar.MessageID) marker.Position {
	return marker.Position{Ledger: id.LedgerID(), Entry: id.EntryID(), Batch: id.BatchIdx()}
}

// partitionIndex is a partition topic's index, -1 for a topic that is not
// a partition.
func partitionIndex(topic string) int32 {
	i := strings.LastIndex(topic, "-partition-")
	if i < 0 {
		return -1
	}
	n, err := strconv.ParseInt(topic[i+len("-partition-"):], 10, 32)
	if err != nil {
		return -1
	}
	return int32(n)
}

// subscriptionName is unique per reader: one partition has a reader per
// remote, and a non-durable subscription admits one reader.
func (h pulsarHistory) subscriptionName() string {
	if h.cursorPrefix == "" {
		return ""
	}
	return h.cursorPrefix + ".history-" + uuid.NewString()[:8]
}
