package subsync

// The start-up re-read of a partition's history (Sync.rebuild): which
// entries it reads, the reader it reads them with, and the gate that
// bounds the re-reads of the whole process.
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
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
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
// (Earliest: the oldest it still holds), for the start-up re-read. Open
// ends when ctx does. Implementations must be safe for concurrent use.
type HistorySource interface {
	Open(ctx context.Context, from marker.Position) (HistoryReader, error)
}

// HistoryEntry is one entry read from the history: where it is and, when
// its metadata names a marker kind (marker.Property), that kind and the
// entry's payload (a marker is one plain message: the payload is the
// marker).
type HistoryEntry struct {
	Pos     marker.Position
	Kind    marker.Kind
	Marker  bool
	Payload []byte // markers only
}

// HistoryReader is what rebuild needs of a reader. Used by one goroutine.
type HistoryReader interface {
	// Next returns the next entry; ok is false when there is none after
	// the last one returned (the partition's last entry when the reader
	// opened was returned, or the partition was empty). It ends when ctx
	// does.
	Next(ctx context.Context) (e HistoryEntry, ok bool, err error)
	// Close releases the reader.
	Close()
}

// historyIdle bounds the wait for each next entry of a re-read: a broker
// that stopped answering must not hold the sync's start.
const historyIdle = 10 * time.Second

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
	rd, err := s.History.Open(ctx, w.from)
	if err != nil {
		if ctx.Err() == nil {
			s.Log.Warn("cannot re-read the partition's markers; subscriptions sync from new snapshots", zap.Error(err))
		}
		return false
	}
	defer rd.Close()
	lastEntry := marker.Position{Ledger: -2}
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, historyIdle)
		e, ok, err := rd.Next(rctx)
		cancel()
		if err != nil {
			return false
		}
		if !ok {
			break
		}
		entry := marker.Position{Ledger: e.Pos.Ledger, Entry: e.Pos.Entry, Batch: -1}
		if entry.Compare(w.through) > 0 {
			break
		}
		if entry != lastEntry {
			r.entries++
			lastEntry = entry
		}
		r.message(e)
	}
	return ctx.Err() == nil
}

// message feeds one entry read from the history to the machine.
func (r *historyRead) message(e HistoryEntry) {
	s := r.s
	k, isMarker := e.Kind, e.Marker
	if !isMarker {
		// Data teaches nothing here, copies neither: anyone who can
		// write here could name a third origin's watermark far ahead in
		// an entry's origin properties, so that a snapshot dated by it
		// would move a remote subscription past messages not copied
		// there yet. Only this sidecar's own signed responses and, live,
		// signed copies teach watermarks; one learned too low dates a
		// snapshot early, which costs duplicates, not messages.
		return
	}
	if k != marker.KindSnapshot && (k != marker.KindSnapshotResponse || !r.learn) {
		return
	}
	mk, err := s.Keys.Decode(e.Payload)
	if err != nil || mk.Topic != s.Topic || mk.From != s.Local || mk.To != s.Remote {
		return
	}
	pos := e.Pos
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

// HistoryGate bounds the start-up re-reads of the whole process (at
// start and after takeovers): at most readers at once, the others waiting
// for a place or for their context to end, each holding at most window
// bytes of entries received and not handled yet (the wire consumer's
// MaxBytes; one entry larger than that still passes alone). Before it,
// every sync opened its pulsar-client-go reader at once at start, each
// with a 1,000-message receive queue, outside every budget, and a stop
// could not end them. Safe for concurrent use.
type HistoryGate struct {
	slots  chan struct{}
	window int64
}

// historyReaders is how many re-reads run at once in a process: each
// reads at the speed of its broker; more mostly add memory.
const historyReaders = 4

// NewHistoryGate lets readers re-reads run at once, sharing bytes: each
// holds at most bytes/readers (at least 64 KiB).
func NewHistoryGate(readers int, bytes int64) *HistoryGate {
	readers = max(readers, 1)
	return &HistoryGate{slots: make(chan struct{}, readers), window: max(bytes/int64(readers), 64<<10)}
}

// HistoryGateOf is the process's gate for its receive budget
// (sidecar.receive_budget, what the replication cursors hold): the
// re-reads hold at most a sixteenth of it more, and no more than 32 MiB,
// historyReaders at once (at the default 512 MiB: 32 MiB, 8 MiB a
// reader).
func HistoryGateOf(receiveBudget int64) *HistoryGate {
	return NewHistoryGate(historyReaders, min(receiveBudget/16, 32<<20))
}

// acquire waits for a place, or for ctx to end.
func (g *HistoryGate) acquire(ctx context.Context) error {
	select {
	case g.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *HistoryGate) release() { <-g.slots }

// readerWindow is what one re-read holds at most (nil gate: 8 MiB).
func (g *HistoryGate) readerWindow() int64 {
	if g == nil {
		return 8 << 20
	}
	return g.window
}

// source bounds src's readers by g: Open waits for a place (or for ctx),
// Close gives it back. A nil gate bounds nothing.
func (g *HistoryGate) source(src HistorySource) HistorySource {
	if g == nil {
		return src
	}
	return gatedHistory{src: src, g: g}
}

type gatedHistory struct {
	src HistorySource
	g   *HistoryGate
}

func (h gatedHistory) Open(ctx context.Context, from marker.Position) (HistoryReader, error) {
	if err := h.g.acquire(ctx); err != nil {
		return nil, err
	}
	rd, err := h.src.Open(ctx, from)
	if err != nil {
		h.g.release()
		return nil, err
	}
	return &gatedReader{HistoryReader: rd, g: h.g}, nil
}

// gatedReader gives its place in the gate back at the first Close.
type gatedReader struct {
	HistoryReader
	g      *HistoryGate
	closed bool
}

func (r *gatedReader) Close() {
	r.HistoryReader.Close()
	if !r.closed {
		r.closed = true
		r.g.release()
	}
}

// historyPermits bounds a re-read's receive window in messages, beside
// the gate's bytes.
const historyPermits = 1000

// NewHistory is the HistorySource of topic, a partition of the local
// cluster, read over its wire client (the entry pipe's: client is asked
// for it at each Open), within gate; its readers' names start with
// cursorPrefix (sidecar.cursor_prefix; see wireHistory).
func NewHistory(client func() (*wire.Client, error), topic, cursorPrefix string, gate *HistoryGate) HistorySource {
	return gate.source(wireHistory{client: client, topic: topic, cursorPrefix: cursorPrefix, window: gate.readerWindow()})
}

// wireHistory is HistorySource over the local cluster's wire client: a
// non-durable reader of the partition, which reads the entries whole
// (markers are single plain messages), asks the broker for the
// partition's last entry when it opens, and leaves no cursor behind.
//
// The reader's subscription is named under the cursor prefix
// ("<prefix>.history-<random>"), like the sidecar's own cursors: a broker
// entry filter that hides markers from applications (deploy/entryfilter)
// lets it read them, and subscription sync does not take it for an
// application's subscription.
type wireHistory struct {
	client       func() (*wire.Client, error)
	topic        string
	cursorPrefix string // sidecar.cursor_prefix
	window       int64  // bytes a reader holds at most (its MaxBytes)
}

func (h wireHistory) Open(ctx context.Context, from marker.Position) (HistoryReader, error) {
	client, err := h.client()
	if err != nil {
		return nil, err
	}
	window := h.window
	opts := wire.ConsumerOptions{
		Topic: h.topic, Subscription: h.subscriptionName(), Name: "geo-sidecar-history-" + uuid.NewString()[:8],
		NonDurable: true, NoTopicCreation: true, InitialPosition: wire.Earliest,
		Permits: historyPermits, MaxBytes: func() int64 { return window },
	}
	if from.Ledger >= 0 {
		// A batch index makes the start inclusive of its entry.
		opts.StartMessageID = &wire.MessageID{Ledger: uint64(from.Ledger), Entry: uint64(from.Entry), Partition: -1, BatchIndex: 0}
	}
	c, err := wire.Subscribe(ctx, client, opts)
	if err != nil {
		return nil, err
	}
	last, has, err := c.LastMessageID(ctx)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &wireHistoryReader{c: c, last: entryOf(last), done: !has}, nil
}

// subscriptionName is unique per reader: one partition has a reader per
// remote, and a non-durable subscription admits one reader.
func (h wireHistory) subscriptionName() string {
	prefix := h.cursorPrefix
	if prefix == "" {
		prefix = "geo-sidecar"
	}
	return prefix + ".history-" + uuid.NewString()[:8]
}

// wireHistoryReader reads up to last, the partition's last entry when it
// opened.
type wireHistoryReader struct {
	c    *wire.Consumer
	last marker.Position
	done bool
}

func (r *wireHistoryReader) Next(ctx context.Context) (HistoryEntry, bool, error) {
	if r.done {
		return HistoryEntry{}, false, nil
	}
	e, err := r.c.Receive(ctx)
	if err != nil {
		return HistoryEntry{}, false, err
	}
	defer func() { _ = r.c.Release(e) }() // RecycleOnRelease is off: Payload stays ours
	out := HistoryEntry{Pos: entryOf(e.ID)}
	r.done = out.Pos.Compare(r.last) >= 0
	md, err := wire.ParseMetadata(e.Metadata)
	if err != nil || md.HasNumMessagesInBatch || md.Compression != 0 || md.Encrypted || md.HasChunk {
		// Not one plain message: not a marker as the writer sends it
		// (the entry pipe's markerEntry judges the same).
		return out, true, nil
	}
	if v, ok := md.Property(marker.Property); ok {
		out.Kind, out.Marker = marker.KindOf(map[string]string{marker.Property: v})
		if out.Marker {
			out.Payload = e.Payload
		}
	}
	return out, true, nil
}

func (r *wireHistoryReader) Close() { _ = r.c.Close() }

// entryOf is where an entry read over the wire client sits in its
// partition, entry granular.
func entryOf(id wire.MessageID) marker.Position {
	return marker.Position{Ledger: int64(id.Ledger), Entry: int64(id.Entry), Batch: -1}
}
