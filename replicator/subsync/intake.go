package subsync

// The intake gate: what the entry path reads from the local partition
// (DataAt, MarkerAt, BatchedMarker) goes to the snapshot machine and the
// apply queue only past the checks that a signature alone cannot make: a
// marker of ours is forwarded once, and only if this process wrote it
// (outbox); a copy of the remote's counts only after the last one taken,
// and an update only after the last one taken for its subscription and
// not maxUpdateAge behind its writer's newest copy (gate).

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// gate is what the intake knows of the markers it read. outbox is safe
// for concurrent use (the sync writes, the entry path reads back); the
// copies' positions and badLogAt are used by the entry path alone; mu
// guards the updates' origins and the writer's clock.
type gate struct {
	// outbox holds the markers this process wrote and has not forwarded
	// yet: only those are forwarded (a marker of ours published again by
	// someone else is not).
	outbox outbox
	// lastCopy is the origin position of the newest copy of a remote
	// marker taken, and lastCopyAt where it was read here: a copy read
	// after it with an origin not after it is a replay; one read at or
	// before it is the cursor delivering again what was judged already.
	lastCopy, lastCopyAt marker.Position
	hasLastCopy          bool
	badLogAt             time.Time // last time an invalid marker was logged

	mu sync.Mutex
	// updateFrom is the origin position of the newest update taken per
	// subscription, and writerTime the newest write time (the writer's
	// clock) of any copy taken from the remote.
	updateFrom map[string]marker.Position
	writerTime int64
}

// copied judges a copy of the remote's marker read here at pos, from
// origin (its position in the writer's partition), written at t (the
// writer's clock, milliseconds): again when the cursor delivers again
// what was judged already, refused "replayed" when its origin is not
// after the last copy taken; else it is taken, and its write time is the
// writer's clock now (every kind).
func (g *gate) copied(pos, origin marker.Position, t int64) (again bool, refused string) {
	if g.hasLastCopy && pos.Compare(g.lastCopyAt) <= 0 {
		return true, ""
	}
	if g.hasLastCopy && origin.Compare(g.lastCopy) <= 0 {
		return false, "replayed"
	}
	g.lastCopy, g.lastCopyAt, g.hasLastCopy = origin, pos, true
	g.mu.Lock()
	g.writerTime = max(g.writerTime, t)
	g.mu.Unlock()
	return false, ""
}

// update judges an update of sub copied from origin and written at t,
// and returns why it is refused: "stale-update" when t lies more than
// maxUpdateAge behind the newest copy taken from its writer, "replayed"
// when an update from at or after origin was taken for sub already; ""
// when it is taken. Origins grow with every marker the writer's partition
// holds, so the order needs no clock; the age compares the writer's clock
// only with itself.
func (g *gate) update(sub string, origin marker.Position, t int64) (refused string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writerTime = max(g.writerTime, t)
	if time.Duration(g.writerTime-t)*time.Millisecond > maxUpdateAge {
		return "stale-update"
	}
	if g.updateFrom == nil {
		g.updateFrom = map[string]marker.Position{}
	}
	if last, ok := g.updateFrom[sub]; ok && origin.Compare(last) <= 0 {
		return "replayed"
	}
	g.updateFrom[sub] = origin
	return ""
}

// logDue reports whether an invalid marker is logged at now: at most
// every 10 s.
func (g *gate) logDue(now time.Time) bool {
	if now.Sub(g.badLogAt) > 10*time.Second {
		g.badLogAt = now
		return true
	}
	return false
}

// Wrote records mk as a marker this process wrote, as the sync does for
// each marker it sends (before the write returns, since the replicator
// may read it back first): read back from the partition, it is forwarded
// once (MarkerAt).
func (s *Sync) Wrote(mk marker.Marker) { s.gate.outbox.put(mk) }

// maxUpdateAge bounds how far an update's write time may lie behind the
// newest write time of any copy taken from the same writer: an update that
// much older than what the writer has sent since waited out a long outage
// in a backlog (or is a replay), and skipping it only delays the sync
// until the next update. Both times are the writer's clock, so a writer
// whose clock is behind or ahead of this host's is judged the same as one
// in step: compared with this host's clock, a writer 10 minutes behind had
// every update refused as stale, and one briefly ahead (an NTP step back)
// every later update as replayed until real time caught up.
const maxUpdateAge = 10 * time.Minute

// outbox is a bounded set of the markers this process wrote, each with
// the position where the replicator first read it back.
type outbox struct {
	mu    sync.Mutex
	keys  map[string]*marker.Position // nil until read back
	order []string
}

const outboxSize = 4096

func outboxKey(mk marker.Marker) string {
	return fmt.Sprintf("%d\x00%s\x00%s\x00%d", mk.Kind, mk.SnapshotID, mk.Subscription, mk.Time)
}

func (o *outbox) put(mk marker.Marker) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.keys == nil {
		o.keys = map[string]*marker.Position{}
	}
	k := outboxKey(mk)
	if len(o.order) >= outboxSize {
		delete(o.keys, o.order[0])
		o.order = o.order[1:]
	}
	o.keys[k] = nil
	o.order = append(o.order, k)
}

// take reports whether mk, read at pos, is a marker this process wrote:
// read back for the first time, or delivered again at the same position
// (a new session of the replicator). A copy of it anywhere else is not.
func (o *outbox) take(mk marker.Marker, pos marker.Position) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.keys[outboxKey(mk)]
	switch {
	case !ok:
		return false
	case at == nil:
		o.keys[outboxKey(mk)] = &pos
		return true
	}
	return *at == pos
}

// DataAt feeds data read from the local partition at pos: a copy of
// origin's message at opos, or local data when origin is "".
func (s *Sync) DataAt(ctx context.Context, pos marker.Position, origin string, opos marker.Position) {
	s.entries.read(pos)
	s.pace.data()
	s.write(ctx, s.completions(s.Machine.Data(pos, origin, opos)))
	s.pace.poke()
}

// completions notes the snapshots among mks, what the machine returned
// for the entry just read: they completed at an entry counted (reached.go).
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
	mk, err := s.Keys.Decode(payload)
	if err != nil {
		s.invalidMarker(pos, marker.Reason(err))
		return false
	}
	if mk.Topic != s.Topic {
		s.Metrics.MarkersInvalid.WithLabelValues(s.Local, "wrong-topic").Inc()
		return false
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
