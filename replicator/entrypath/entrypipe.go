package entrypath

import (
	"context"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/entryrule"
	"github.com/geo-sidecar/geo-sidecar/replicator/wire"
)

// The entry pipe (data_path: entries) forwards each stored entry of a
// local partition whole: it reads only the entry's metadata, decides on
// it (entryrule.SkipReason), appends replicated_from and the origin
// position to it (PatchMetadata: the rest of the bytes are copied, never
// re-encoded) and sends metadata and payload as one SEND carrying the
// entry's message count. A batch stays one batch; compression,
// encryption, chunks, keys, event and publish times, producer name,
// delivery times and schema versions pass through untouched, as with
// Pulsar's own replicator. The rules that keep nothing lost: acknowledge
// in order after the remote confirmed, end the session at the first
// failure (the next one starts from the cursor: entrysessions.go), skip
// only what is read back from the remote (entryreadback.go).
//
// This file holds the rules a session applies to the entries it reads:
// what a copy carries (forwardMetadata), how long sessions go on without
// the read-back's proof (maxReadBackRetries), whether an entry follows
// the ones the sync saw (continues), where an active session starts
// (startAt) and what a skip does (skip).

// forwardMetadata is the metadata a copy of e carries to the remote: e's
// own bytes (minus the transaction fields when dropTxn), replicated_from,
// the remote's schema version when schema is set, and last the origin
// (entryrule.OriginProps), whose signature covers everything before it
// and the payload.
func (p *Partition) forwardMetadata(e wire.Entry, dropTxn bool, schema []byte) ([]byte, error) {
	patch := wire.Patch{ReplicatedFrom: p.local, DropTxn: dropTxn, SchemaVersion: schema}
	md, err := wire.PatchMetadata(make([]byte, 0, len(e.Metadata)+160), e.Metadata, patch)
	if err != nil {
		return nil, err
	}
	return wire.AppendProperties(md, entryrule.OriginProps(p.keys, p.topic, p.local, p.remote, e.ID, md, e.Payload)...), nil
}

// maxReadBackRetries is how many sessions in a row may end on a read-back
// of the remote that failed on a link error (a reset, a lost connection)
// before a session sends without it (a read-back refused for good, say
// a role that may not consume on the remote, is not retried so). A new
// session a backoff later almost always reads back whole.
//
// Without the proof a session sends each entry under its own packed
// sequence id (entrySeq) only: a remote with deduplication then drops
// the copies it holds and keeps the order. An entry that would need a
// counted id (the remote's record is at or past it, so it may hold the
// entry: sent under a counted id, it would be stored twice and after
// later ones) stops the session, and the partition waits for a
// read-back that goes through (session.awaitReadBack) rather than copy
// twice. A remote without deduplication has no record: there a session
// without the proof sends every entry in flight when the one before
// ended again (duplicates, never loss).
const maxReadBackRetries = 5

// continues reports whether pos, the next entry the sync sees, follows
// the entries it saw: the next entry of the same ledger, or one seen
// already (delivered again). For a sync that saw nothing yet and assumes
// it reads the partition from its start (snapshot.Config.Fresh), only the
// partition's first entry at start does. The first entry of another
// ledger does not: positions do not tell whether the ledger before ended
// where this sync stopped reading, and when another instance read on to
// its end and the topic was reloaded (a new ledger), a standby taking over
// there would answer requests with no watermark for the third origins the
// other instance had seen. A new ledger (at most one per 50,000 entries or 10
// minutes by default, and at each topic load) costs a bounded re-read.
func (p *Partition) continues(pos marker.Position) bool {
	if !p.hasSeen {
		return p.sync.StartsAt(pos)
	}
	last := p.lastSeen
	return pos.Compare(last) <= 0 || (pos.Ledger == last.Ledger && pos.Entry == last.Entry+1)
}

// What startAt makes of the first entry an active session receives.
const (
	startNext         = iota // the cursor's first unacknowledged entry
	startAcknowledged        // acknowledged already (our ack overtook its dispatch)
	startAhead               // a later entry, delivered before the first unacknowledged one
)

// maxStartAhead bounds how often in a row a session ends on the same
// entry with errStartAhead before that entry is taken as the start: an
// entry the broker never dispatches and never acknowledges (an entry
// filter's RESCHEDULE) must not stop the partition.
const maxStartAhead = 3

// startAt judges pos, the first entry an active session is to process,
// against the subscription's mark-delete position: the next entry is the
// one after it in the same ledger, or the first of a later ledger.
func (p *Partition) startAt(ctx context.Context, src entrySource, pos marker.Position) (int, error) {
	id, ok, err := src.MarkDelete(ctx)
	if err != nil || !ok {
		return startNext, err // a broker that does not say: as before
	}
	md := entryPos(id)
	next := (pos.Ledger == md.Ledger && pos.Entry == md.Entry+1) || (pos.Ledger > md.Ledger && pos.Entry == 0)
	switch {
	case pos.Compare(md) <= 0:
		return startAcknowledged, nil
	case next:
		p.aheadAt, p.aheadRuns = marker.Position{}, 0
		return startNext, nil
	}
	if pos != p.aheadAt {
		p.aheadAt, p.aheadRuns = pos, 0
	}
	if p.aheadRuns++; p.aheadRuns > maxStartAhead {
		p.log.Warn("the cursor keeps delivering an entry after its mark-delete position first; taking it as the start",
			zap.Stringer("entry", pos), zap.Stringer("mark_delete", md))
		return startNext, nil
	}
	p.log.Debug("a later entry came before the first unacknowledged one; starting again",
		zap.Stringer("entry", pos), zap.Stringer("mark_delete", md))
	return startAhead, nil
}

// skip acknowledges an entry that is not copied, by a rule docs/data-paths.md
// and docs/guarantees.md state (reason: a skip reason), and counts its
// messages.
func (p *Partition) skip(src entrySource, e wire.Entry, reason string) {
	p.m.Skipped.WithLabelValues(p.local, p.remote, reason).Add(float64(max(e.NumMessages, 1)))
	_ = src.Ack(e.ID)
	_ = src.Release(e)
}
