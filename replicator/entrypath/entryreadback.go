package entrypath

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/google/uuid"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// The entry pipe's read-back of the remote partition (copiedSince): which
// entries are on the remote already, with proof, the only ground on which
// a session skips an entry instead of sending it (see copySet).
//
// Why not trust the newest copy alone: a copy on the remote proves that
// one entry is there, not that every earlier one is. A send that failed
// while a later one landed (a broker error that fails the pending queue,
// then a send made before the session noticed) leaves a gap, and "skip
// everything up to the newest copy" acknowledged the missing entry. Why
// not trust the remote's deduplication: a "duplicate" receipt says that
// the broker recorded a sequence id at or above the one sent, which a
// later entry of the same producer can have set.
//
// How it reads, and why: reading an entry at a time through the admin API
// would be, after a link cut with a full in-flight window, about a
// thousand calls per partition, one round trip each (26.6 s to resume at
// 20 ms RTT). Here a window of entries
// comes through one short-lived non-durable reader on the binary
// protocol, streamed; windows double going back from the end, so the
// whole read costs a handful of readers, at most one admin call (the
// ledger list, only when a window reaches past the newest ledger), and no
// more than twice the entries the proof needs.

// copySet holds the origin positions of the copies found on the remote
// partition: each one read back from an entry there and accepted as the
// pair's own (bySignature). A position not in the set is sent again (at
// worst a duplicate, never a loss).
type copySet map[marker.Position]struct{}

func (s copySet) has(p marker.Position) bool {
	_, ok := s[p]
	return ok
}

// entryCopy is what the remote holds in one entry, as far as the proof
// needs it: the origin of each message in it, in batch order (the entry
// pipe's copies carry one, for the whole entry).
type entryCopy struct {
	origins []origin
}

// origin is where a copy on the remote says it came from.
type origin struct {
	cluster string
	pos     marker.Position
	ok      bool // the origin id (marker.PropOriginID) is there and parses
	// sig is the entry pipe's signature of the origin (marker.PropOriginSig).
	sig string
	// digest is the entry's digest as the signature covers it
	// (entryrule.CopyDigest), computed from the bytes read; nil where
	// they are not at hand, and then the signature proves nothing.
	digest *[sha256.Size]byte
}

// tailReader reads a remote partition for the read-back.
type tailReader interface {
	// last is the partition's last entry; ok is false when it is empty.
	last(ctx context.Context) (pos marker.Position, ok bool, err error)
	// ledgers lists the partition's ledgers, oldest first, with how many
	// entries each holds.
	ledgers(ctx context.Context) ([]ledgerInfo, error)
	// read calls fn with each entry from from through through, in order
	// (entries the broker never dispatches, such as Pulsar's own markers,
	// are not seen).
	read(ctx context.Context, from, through marker.Position, fn func(marker.Position, entryCopy)) error
}

type ledgerInfo struct{ id, entries int64 }

// firstWindow is the read-back's first window, in entries; each next one
// is twice as large.
const firstWindow = 64

// scanTail collects the origin positions of local's messages in the
// entries ours accepts, from the remote partition's end back until a
// window holds a copy of a message before from (older copies are older
// still: the pair writes in origin order) or limit entries were read. The
// set is proof even when err is not nil.
func scanTail(ctx context.Context, r tailReader, ours func(entryCopy) bool, local string, from marker.Position, limit int) (copySet, error) {
	set := copySet{}
	end, ok, err := r.last(ctx)
	if err != nil || !ok {
		return set, err
	}
	l := tailLayout{r: r, end: end}
	through := end // the next window ends here
	window := firstWindow
	for read := 0; read < limit; window *= 2 {
		n := min(window, limit-read)
		// The first windows stay within the last ledger: the ledger list
		// is asked for only when the read must go on into an older one;
		// once listed, windows span ledgers.
		start := through
		if l.listed {
			if start, _, err = l.back(ctx, through, int64(n-1)); err != nil {
				return set, err
			}
		} else {
			start.Entry = max(through.Entry-int64(n-1), 0)
			n = int(through.Entry-start.Entry) + 1
		}
		reachedOlder := false
		err = r.read(ctx, start, through, func(pos marker.Position, e entryCopy) {
			if !ours(e) {
				return
			}
			for _, o := range e.origins {
				if !o.ok || o.cluster != local {
					continue
				}
				if from.Compare(o.pos) > 0 {
					reachedOlder = true
					continue
				}
				set[o.pos] = struct{}{}
			}
		})
		if err != nil || reachedOlder {
			return set, err
		}
		read += n
		prev, short, err := l.back(ctx, start, 1)
		if err != nil || short {
			return set, err // short: the partition's first entry was read
		}
		through = prev
	}
	return set, nil
}

// tailLayout moves back through a partition's entries; it lists the
// ledgers (one admin call) the first time a move leaves the last one.
type tailLayout struct {
	r      tailReader
	end    marker.Position
	older  []ledgerInfo // the ledgers before end's that hold entries, oldest first
	listed bool
}

// back returns the entry k entries before p, or the partition's first
// entry and short when there are fewer.
func (l *tailLayout) back(ctx context.Context, p marker.Position, k int64) (marker.Position, bool, error) {
	for k > 0 {
		if p.Entry >= k {
			p.Entry -= k
			return p, false, nil
		}
		k -= p.Entry + 1 // onto the previous ledger's last entry
		if !l.listed {
			ls, err := l.r.ledgers(ctx)
			if err != nil {
				return p, false, err
			}
			for _, x := range ls {
				if x.id < l.end.Ledger && x.entries > 0 {
					l.older = append(l.older, x)
				}
			}
			l.listed = true
		}
		i := len(l.older) - 1
		for i >= 0 && l.older[i].id >= p.Ledger {
			i--
		}
		if i < 0 {
			p.Entry = 0
			return p, true, nil
		}
		p = marker.Position{Ledger: l.older[i].id, Entry: l.older[i].entries - 1, Batch: -1}
	}
	return p, false, nil
}

// wireTail reads the remote partition over the remote cluster's wire
// client (short-lived non-durable readers; no cursor is left behind) and
// its admin API (the ledger list).
type wireTail struct {
	client *wire.Client
	admin  adminLedgers
	topic  string
	// subPrefix starts the readers' subscription names: the sidecar's own
	// cursor prefix (sidecar.cursor_prefix), which the marker entry filter
	// exempts, so a reader sees the markers on the remote (copies among
	// them) instead of waiting for entries the filter never dispatches.
	subPrefix string
	// window is what a reader holds at once: its read-back's room in the
	// target's ReadBackPool (0: readbackWindowBytes).
	window int64
}

// readbackWindowBytes bounds what a read-back reader holds at once, at
// most (ReadBackPool.Window).
const readbackWindowBytes = 8 << 20

// reader opens a non-durable reader at start (nil: a probe positioned at
// the end, which reads nothing).
func (w *wireTail) reader(ctx context.Context, start *wire.MessageID) (*wire.Consumer, error) {
	return wire.Subscribe(ctx, w.client, w.readerOptions(start))
}

// readerOptions are the settings of a reader at start (see reader). The
// probe has one permit: it brings at most one entry, written after it
// opened.
func (w *wireTail) readerOptions(start *wire.MessageID) wire.ConsumerOptions {
	window := w.window
	if window <= 0 {
		window = readbackWindowBytes
	}
	opts := wire.ConsumerOptions{
		Topic: w.topic, Subscription: w.subPrefix + ".readback-" + uuid.NewString()[:8], Name: newConsumerName(),
		NonDurable: true, StartMessageID: start, NoTopicCreation: true,
		Permits: 1000, MaxBytes: func() int64 { return window }, RecycleOnRelease: true,
	}
	if start == nil {
		opts.InitialPosition, opts.Permits, opts.MaxBytes = wire.Latest, 1, nil
	}
	return opts
}

func (w *wireTail) last(ctx context.Context) (marker.Position, bool, error) {
	probe, err := w.reader(ctx, nil)
	if err != nil {
		return marker.Position{}, false, fmt.Errorf("read back: %w", err)
	}
	defer probe.Close()
	id, ok, err := probe.LastMessageID(ctx)
	if err != nil || !ok {
		return marker.Position{}, false, err
	}
	return entryPos(id), true, nil
}

func (w *wireTail) ledgers(ctx context.Context) ([]ledgerInfo, error) { return w.admin.ledgers(ctx) }

// readbackIdleTimeout bounds the wait for each next entry of a window
// while the broker has not passed the window's end: a slow link that
// keeps delivering may take as long as it needs, a broker that stopped
// answering must not hold the session. What was read stays proof.
const readbackIdleTimeout = 30 * time.Second

// readbackQuiet is how long a window's read waits for the next entry
// before asking the broker how far its reader has got. The broker moves a
// non-durable reader's mark-delete position past what it dispatched and
// past what it never dispatches (Pulsar's own markers, entries an entry
// filter rejects); once that position reaches the window's end, nothing
// more is coming beyond what its connection already carried. The answer
// travels on the same connection behind those entries, so they are queued
// by the time it arrives.
const readbackQuiet = time.Second

func (w *wireTail) read(ctx context.Context, from, through marker.Position, fn func(marker.Position, entryCopy)) error {
	// A batch index makes the start inclusive of its entry.
	start := wire.EntryID(uint64(from.Ledger), uint64(from.Entry))
	start.BatchIndex = 0
	r, err := w.reader(ctx, &start)
	if err != nil {
		return fmt.Errorf("read back from %s: %w", from.String(), err)
	}
	defer r.Close()
	return readWindow(ctx, r, from, through, func(pos marker.Position, e wire.Entry) { fn(pos, readBackCopy(e)) })
}

// windowReader is the read-back's non-durable reader (a wire.Consumer).
type windowReader interface {
	// Receive returns an entry already queued even when ctx is done.
	Receive(ctx context.Context) (wire.Entry, error)
	Ack(wire.MessageID) error
	Release(wire.Entry) error
	MarkDelete(ctx context.Context) (wire.MessageID, bool, error)
}

// readWindow calls fn with each entry r delivers from from through
// through, until it delivered through or the broker says it passed it
// (see readbackQuiet).
func readWindow(ctx context.Context, r windowReader, from, through marker.Position, fn func(marker.Position, wire.Entry)) error {
	// take handles one entry and reports whether the window is read.
	take := func(e wire.Entry) bool {
		pos := entryPos(e.ID)
		if pos.Compare(from) >= 0 && pos.Compare(through) <= 0 {
			fn(pos, e)
		}
		_ = r.Ack(e.ID) // for brokers that move the position only on acknowledgements
		_ = r.Release(e)
		return pos.Compare(through) >= 0
	}
	lastEntry := time.Now()
	for {
		rctx, cancel := context.WithTimeout(ctx, readbackQuiet)
		e, err := r.Receive(rctx)
		cancel()
		if err == nil {
			lastEntry = time.Now()
			if take(e) {
				return nil
			}
			continue
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("read back %s..%s: %w", from.String(), through.String(), err)
		}
		md, ok, err := r.MarkDelete(ctx)
		switch {
		case err == nil && ok && entryPos(md).Compare(through) >= 0:
			// The rest of the window is queued or never dispatched.
			done, cancel := context.WithCancel(ctx)
			cancel()
			for {
				e, err := r.Receive(done)
				if err != nil || take(e) {
					return nil
				}
			}
		case time.Since(lastEntry) >= readbackIdleTimeout:
			return fmt.Errorf("read back %s..%s: no entry for %v: %w", from.String(), through.String(), readbackIdleTimeout, context.DeadlineExceeded)
		}
	}
}

// readBackCopy is what an entry read back holds for the proof: the signed
// origin the entry pipe put in the entry-level properties (the producer
// name is the origin's, so it proves nothing here and is not kept), with
// the digest of the bytes read that its signature must cover
// (entryrule.CopyDigest).
func readBackCopy(e wire.Entry) entryCopy {
	md, err := wire.ParseMetadata(e.Metadata)
	if err != nil {
		return entryCopy{origins: []origin{{}}}
	}
	o := origin{}
	o.cluster, _ = md.Property(marker.PropOriginCluster)
	id, _ := md.Property(marker.PropOriginID)
	o.pos, o.ok = marker.ParsePosition(id)
	o.sig, _ = md.Property(marker.PropOriginSig)
	if o.ok && strings.HasPrefix(o.sig, marker.OriginSigV2) {
		if d, ok := entryrule.CopyDigest(e.Metadata, e.Payload); ok {
			o.digest = &d
		}
	}
	return entryCopy{origins: []origin{o}}
}

// adminLedgers lists one remote partition's ledgers through the admin API
// (internal stats): the one thing the binary protocol does not tell.
type adminLedgers struct {
	admin pulsaradmin.Client
	topic *utils.TopicName
}

func (a adminLedgers) ledgers(ctx context.Context) ([]ledgerInfo, error) {
	st, err := a.admin.Topics().GetInternalStatsWithContext(ctx, *a.topic)
	if err != nil {
		return nil, fmt.Errorf("internal stats: %w", err)
	}
	out := make([]ledgerInfo, 0, len(st.Ledgers))
	for _, l := range st.Ledgers {
		out = append(out, ledgerInfo{id: l.LedgerID, entries: l.Entries})
	}
	return out, nil
}

// bySignature accepts the entries whose one origin carries a valid
// version 2 signature for this partition and target under keys, checked
// against the digest of the bytes read (the entry pipe's copies, read
// back over the binary protocol). Without a key, or for an origin read
// where the bytes are not at hand (the admin API), nothing is accepted:
// such an entry is sent again (duplicates, never loss).
func bySignature(keys marker.Keys, topic, target string) func(entryCopy) bool {
	return func(e entryCopy) bool {
		if keys.IsZero() || len(e.origins) != 1 || !e.origins[0].ok {
			return false
		}
		o := e.origins[0]
		return marker.VerifyOrigin(keys, topic, o.cluster, target, o.pos.String(), o.sig, o.digest)
	}
}

func entryPos(id wire.MessageID) marker.Position {
	return marker.Position{Ledger: int64(id.Ledger), Entry: int64(id.Entry), Batch: -1}
}

// newConsumerName is a consumer name of its own: each read-back reader
// has one, and the process one for its cursors (instanceConsumerName).
func newConsumerName() string { return "geo-sidecar-" + uuid.NewString()[:8] }
