package subsync

// The intake: what the entry path calls (entrypath.SyncFeed, but Run:
// run.go). What it reads from the local partition (DataAt, MarkerAt,
// BatchedMarker) goes to the snapshot machine and the apply queue only
// past the intake gate's checks (gate.go); Takeover and StartsAt tell the
// sync where the entry path's reading resumed.

import (
	"context"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// Takeover tells the sync that the replicator resumed past messages it
// did not read itself (another instance processed them): the third
// origins' watermarks it knows may be too low, and a response naming
// them could date a snapshot too early. They are dropped at once and
// learned again from the partition's history (run, off the data path);
// requests go unanswered meanwhile.
func (s *Sync) Takeover() {
	s.copies.reset() // the copies in between were not all read here
	s.Machine.Forget()
	if len(s.Machine.Unknown()) == 0 {
		return // no third origins: no watermark to learn
	}
	s.Log.Info("resuming past messages another instance processed: re-learning third-origin watermarks")
	select {
	case s.relearn <- struct{}{}:
	default:
	}
}

// StartsAt reports whether pos, the first entry the replicator reads, is
// where the sync assumes reading starts: any entry when the machine did
// not start fresh; otherwise only the partition's first entry at start
// (layoutAtStart), unknown without a layout.
func (s *Sync) StartsAt(pos marker.Position) bool {
	if !s.Machine.Fresh() {
		return true
	}
	l := s.LayoutAtStart
	return l != nil && pos.Ledger == l.Start().Ledger && pos.Entry == l.Start().Entry
}

// DataAt feeds data read from the local partition at pos: a copy of
// origin's message at opos, or local data when origin is "".
func (s *Sync) DataAt(ctx context.Context, pos marker.Position, origin string, opos marker.Position) {
	s.entries.read(pos)
	if origin == s.Remote {
		s.copies.add(pos, opos) // signed: origin is "" otherwise
	}
	s.pace.data()
	s.write(ctx, s.completions(s.Machine.Data(pos, origin, opos)))
	s.pace.poke()
}

// completions notes the snapshots among mks, what the machine returned
// for the entry just read: they completed at an entry counted (count.go).
func (s *Sync) completions(mks []marker.Marker) []marker.Marker {
	for _, mk := range mks {
		if mk.Kind == marker.KindSnapshot {
			s.entries.completed(mk.Local)
		}
	}
	return mks
}

// MarkerAt handles a marker read from the local partition at pos, copied
// from another cluster or not, and reports whether the replicator
// forwards it to the remote: only markers this process wrote for that
// remote, of the kinds that travel (request, response, update).
//
// A valid signature proves who wrote a marker, not that this is the
// first time it is read: a marker published again by someone who can
// read it (a replay), or a copy published early on this side (an
// injected response), carries the same signature. So a marker of ours
// is forwarded only if this process wrote it and has not forwarded it
// yet; a copy of the remote's counts only with a signed origin naming
// the remote, at a position after the last copy taken; and an update
// only when its origin is after the last one taken for its subscription and its
// write time not maxUpdateAge behind the newest copy from its writer. What fails these checks is counted as an invalid
// marker and has no effect: at worst a snapshot or an update comes again
// later.
//
// producer is the name the marker was written under: one of ours that
// this process did not write came from another instance of the sidecar
// (HA, or before a restart) and is dropped without being counted.
func (s *Sync) MarkerAt(ctx context.Context, pos marker.Position, payload []byte, from marker.Origin, producer string) (forward bool) {
	defer s.pace.poke()
	s.entries.read(pos)
	s.markerPos.note(pos) // an acknowledgement of it is no news (holes.go)
	mk, err := s.Keys.Decode(payload)
	if err != nil {
		s.invalidMarker(pos, marker.Reason(err))
		return false
	}
	if mk.Topic != s.Topic {
		s.Metrics.MarkersInvalid.WithLabelValues(s.Local, "wrong-topic").Inc()
		return false
	}
	if ce := s.Log.Check(zap.DebugLevel, "marker read"); ce != nil {
		ce.Write(zap.Stringer("at", pos), zap.Stringer("kind", mk.Kind), zap.String("from", mk.From), zap.String("copied_from", from.Cluster),
			zap.String("snapshot_id", mk.SnapshotID), zap.String("subscription", mk.Subscription))
	}
	switch {
	case from.Cluster == "" && mk.From == s.Local && mk.To == s.Remote:
		// Ours, towards this remote. Snapshot markers stay here and feed
		// the cache (also when re-read after a restart).
		if mk.Kind == marker.KindSnapshot {
			s.write(ctx, s.Machine.Marker(pos, mk))
			return false
		}
		if !s.gate.outbox.take(mk, pos) {
			if !strings.HasPrefix(producer, marker.MarkerProducers) {
				s.invalidMarker(pos, "not-written-here")
			}
			return false
		}
		return true
	case from.Cluster != "" && mk.From == s.Remote && mk.To == s.Local:
		if !from.Signed || from.Cluster != s.Remote {
			s.invalidMarker(pos, "unsigned-copy")
			return false
		}
		again, reason := s.gate.copied(pos, from.At, mk.Time)
		if again {
			// Delivered again (a new session reads from the cursor): it
			// was judged, and acted on if valid, the first time.
			return false
		}
		if reason != "" {
			s.invalidMarker(pos, reason)
			return false
		}
		if mk.Kind == marker.KindUpdate {
			if reason := s.enqueueApply(mk, from.At); reason != "" {
				s.invalidMarker(pos, reason)
			}
			return false
		}
		if mk.Kind == marker.KindAcked {
			if reason := s.takeAcked(mk, from.At); reason != "" {
				s.invalidMarker(pos, reason)
			}
			return false
		}
		s.write(ctx, s.completions(s.Machine.Marker(pos, mk)))
	}
	return false
}

// BatchedMarker counts a marker read at pos in an entry that cannot hold
// one marker as written (a batch, compressed, encrypted): the writer sends
// each marker alone and plain.
func (s *Sync) BatchedMarker(pos marker.Position) {
	s.entries.read(pos)
	s.invalidMarker(pos, "batched")
}

// invalidMarker counts a marker that does not decode or verify, and logs
// it at most every 10 s.
func (s *Sync) invalidMarker(pos marker.Position, reason string) {
	s.Metrics.MarkersInvalid.WithLabelValues(s.Local, reason).Inc()
	if s.gate.logDue(time.Now()) {
		s.Log.Warn("skipping a marker that does not decode or verify (logged at most every 10 s)",
			zap.String("reason", reason), zap.Stringer("position", pos))
	}
}

// enqueueApply queues a received update copied from origin (its position
// in the writer's partition), unless an update from at or after that
// origin was taken for its subscription already (replayed), or its write
// time lies more than maxUpdateAge behind the newest copy taken from its
// writer (stale-update); it returns the reason when it does not. Origins
// grow with every marker the writer's partition holds, so the order needs
// no clock; the age compares the writer's clock only with itself.
func (s *Sync) enqueueApply(up marker.Marker, origin marker.Position) (refused string) {
	if reason := s.gate.update(up.Subscription, origin, up.Time); reason != "" {
		return reason
	}
	s.queue.put(up.Subscription, up.Remote)
	return ""
}
