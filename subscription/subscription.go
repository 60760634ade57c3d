// Package subscription keeps subscriptions in step across clusters: it
// decides which update to send when a local subscription has moved past a
// snapshot (Planner), and how to apply an update received from a remote
// (Decide, Apply: apply.go): forward only, over the binary protocol where
// the subscription's type allows it with consumers attached, with the
// admin API's reset-cursor only where nobody is attached, never
// disconnecting a consumer. The two movers sit behind the small Mover and
// Admin interfaces; replicator/subsync supplies the Pulsar ones.
package subscription

import (
	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/snapshot"
)

// Covering is what the Planner needs of a snapshot.Machine.
type Covering interface {
	Covering(md marker.Position) (snapshot.Snapshot, bool)
}

// Planner decides the updates for one (partition, remote): for each tracked
// subscription, the newest snapshot its local mark-delete position covers,
// sent once. Not safe for concurrent use: the replicator of the pair owns
// it and calls it from one goroutine.
type Planner struct {
	// sent is, per subscription, the Remote position of the last snapshot
	// Next returned for it.
	sent map[string]marker.Position
}

// NewPlanner returns a Planner with nothing sent yet.
func NewPlanner() *Planner {
	return &Planner{sent: make(map[string]marker.Position)}
}

// Next returns the snapshot whose Remote position sub should be moved to
// on the remote, given its local mark-delete position md, if that snapshot
// is newer than the last one returned for sub.
//
// "Newer" compares Remote positions (marker.Position.Compare): a snapshot
// whose Remote is at or before the last one returned would at best repeat
// an update already sent, so nothing is returned when md does not move, nor
// when it moves backwards (after a reset of the local subscription): the
// remote is never asked to go back. A returned snapshot counts as sent; a
// caller that fails to write the update calls Forget to send it again.
func (p *Planner) Next(sub string, md marker.Position, snaps Covering) (snapshot.Snapshot, bool) {
	s, ok := p.Peek(sub, md, snaps)
	if !ok {
		return snapshot.Snapshot{}, false
	}
	if p.sent == nil {
		p.sent = make(map[string]marker.Position)
	}
	p.sent[sub] = s.Remote
	return s, true
}

// Peek is Next without counting the snapshot as sent: whether md would
// send an update now.
func (p *Planner) Peek(sub string, md marker.Position, snaps Covering) (snapshot.Snapshot, bool) {
	s, ok := snaps.Covering(md)
	if !ok {
		return snapshot.Snapshot{}, false
	}
	if last, sent := p.sent[sub]; sent && s.Remote.Compare(last) <= 0 {
		return snapshot.Snapshot{}, false
	}
	return s, true
}

// Forget drops what was sent for sub (the subscription was deleted).
func (p *Planner) Forget(sub string) { delete(p.sent, sub) }

// entryOf returns the entry holding p, as a whole (Batch -1): the
// granularity of the admin API. Positioning a subscription at that entry,
// rather than after it, re-reads the entry: p and the messages before it
// in the batch (consumed on the remote) come again, and those after p
// (maybe not consumed) are not skipped. Re-reading is the safe side: a
// duplicate is tolerated by at-least-once consumers, a skipped message is
// lost.
func entryOf(p marker.Position) marker.Position {
	p.Batch = -1
	return p
}

// Lag is how far the remote copy of a subscription trails the local one:
// the remote subscription's backlog minus the local one's (the messages a
// failover right now would deliver again), floored at 0: a remote that
// looks ahead (the two backlogs are read at different moments) is no lag.
func Lag(localBacklog, remoteBacklog int64) int64 {
	if remoteBacklog <= localBacklog {
		return 0
	}
	return remoteBacklog - localBacklog
}
