package subsync

// The start-up re-read of a partition's history (Sync.rebuild,
// rebuild.go): which entries it reads, the reader it reads them with, and
// the gate that bounds the re-reads of the whole process.
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
		// (entryrule.Marker judges the same).
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
