package subsync

// The echo rule, the follow's side of the echo fence (fence.go: Applied):
// a position an update from a remote put here is the remote's, not the
// consumers' here. Follow sends no update from it (movedByUpdate), and a
// partition whose tracked subscriptions all sit at such positions with
// nobody attached asks for no snapshots (snapshotUseful).

import (
	"github.com/geo-sidecar/geo-sidecar/marker"
)

// movedByUpdate reports whether sub's mark-delete position md is still
// where an update from the remote put it (not moved by consumers here):
// at or before the highest position the last update applied left it at.
// A protocol move leaves it at the update's target itself, a reset at the
// entry before the one it positions at (Applied).
func (s *Sync) movedByUpdate(sub string, md marker.Position) bool {
	upTo, ok := s.Applied.get(s.Local, s.Topic, sub)
	return ok && md.Compare(upTo) <= 0
}

// snapshotUseful reports whether a snapshot request could serve a tracked
// subscription of the partition, given its positions mds: not when every
// tracked subscription there sits where a remote's update put it with
// nobody attached (a standby region's copy, moved only by updates, has no
// use for snapshots of this direction: writing none there halves the
// markers of a one-sided load). A partition without a tracked
// subscription yet keeps its snapshots: one may be created at any moment
// and consume at once. Fewer snapshots only mean more redelivered after a
// failover, never a loss; the data waits in the machine, and the request
// goes out as soon as a follow finds a use.
func (s *Sync) snapshotUseful(mds map[string]marker.Position) bool {
	tracked := 0
	for name, md := range mds {
		if !s.Tracked(name) {
			continue
		}
		tracked++
		if !s.movedByUpdate(name, md) {
			return true
		}
		if st, ok := s.fl.reading[name]; ok && st.Consumers > 0 {
			return true
		}
	}
	return tracked == 0
}
