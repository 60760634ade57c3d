package subsync

// The intake gate: the checks on the markers the entry path reads that a
// signature alone cannot make. A marker of ours is forwarded once, and
// only if this process wrote it (outbox); a copy of the remote's counts
// only after the last one taken; an update only after the last one taken
// for its subscription and not maxUpdateAge behind its writer's newest
// copy (gate). It knows nothing of the sync: the intake (intake.go) asks.

import (
	"fmt"
	"sync"
	"time"

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
