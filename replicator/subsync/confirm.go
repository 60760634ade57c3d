package subsync

// A position is acted on only once a second read confirms it.
//
// Follow takes a tracked subscription's mark-delete position as what the
// applications here consumed, and moves the remote's copy to match. A
// position that nobody consumed to must never be taken so: the remote
// would skip messages that were not consumed anywhere. The admin API
// makes such positions for a moment. Creating a subscription there
// (PUT .../subscription/{name}, as the sidecar does on the remote, and as
// operators do) first makes it at the partition's newest entry and only
// then resets it to the position asked for (PersistentTopicsBase,
// internalCreateSubscription, read in the 4.0.7 broker): a read in between
// shows it consumed to the end. A run of TestDrillThreeClustersNorthDown
// caught exactly that: the west→east sync read west's copy of the drill's
// subscription while east→west was creating it at the earliest message,
// sent an update from the end position, and east's subscription skipped
// the first 44 messages east published (no consumer there had read them).
//
// The sidecar's own creations are fenced exactly (Applied, creating); an
// operator's, or another instance's, are not known to this process. So a
// position that would send an update is trusted only when the
// subscription held it, or one before it, at the previous read: one that
// is new (the subscription was not there) or behind the previous read (it
// went back: a reset, or the end of a creation) waits for a read sent at
// least one snapshot interval later. If that read shows it at the same
// place or further, the update goes out; further back, the new position
// waits in turn. The creation's moment at the end lasts two metadata
// writes, milliseconds, well inside the interval. The cost is one more
// position read, a second later, per new subscription that a snapshot
// already covers (and per partition whose subscriptions passed a snapshot
// when the sidecar starts).
//
// Here: whether a position waits (awaitingConfirmation, suspect). The
// waiting positions are the follow's state (followstate.go:
// unconfirmedPos); when the confirming read is due, the pacer's
// (schedule.go: settleUnconfirmed).

import (
	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
)

// awaitingConfirmation reports whether sub's unconfirmed position still
// waits: no read was sent an interval after it. Once one was, it is
// settled; md, this follow's position, is then judged against the
// previous read like any other (suspect): further back, it waits in turn.
func (s *Sync) awaitingConfirmation(sub string) bool {
	f := &s.fl
	p, ok := f.unconfirmed[sub]
	switch {
	case !ok:
		return false
	case !f.freshRead || f.readSent.Sub(p.at) < s.Interval:
		return true
	}
	delete(f.unconfirmed, sub)
	return false
}

// suspect reports whether md, a position that would send an update, is
// not to be trusted yet: sub was not at the previous read (prev), or was
// further on. It then waits for its confirming read.
func (s *Sync) suspect(sub string, md marker.Position, prev map[string]marker.Position) bool {
	f := &s.fl
	if last, ok := prev[sub]; ok && md.Compare(last) >= 0 {
		return false
	}
	if f.unconfirmed == nil {
		f.unconfirmed = map[string]unconfirmedPos{}
	}
	f.unconfirmed[sub] = unconfirmedPos{md: md, at: f.readSent}
	s.Log.Debug("a subscription's new position waits for a confirming read before an update",
		zap.String("subscription", sub), zap.Stringer("mark_delete", md))
	return true
}
