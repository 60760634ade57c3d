package subsync

// The follow, one round of it from reading to sending (Sync.follow, run
// when the pacer says: schedule.go): the tracked subscriptions'
// positions, from the brokers' positions servlet where it reports the
// partition (servlet.go), else from the admin path (adminpath.go: read
// only when the shared stats reading shows a move, or proven from it);
// then an update sent for each position past a newer snapshot, and the
// lag. The helpers it calls stand in the files below it: echo.go (a
// position an update put here is not sent back), confirm.go (a position
// waits for its confirming read), schedule.go (when the next follow
// runs), sync.go (send), backlogs.go (the lag) and create.go.

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/geo-sidecar/geo-sidecar/marker"
	"github.com/geo-sidecar/geo-sidecar/replicator/cluster/positions"
)

// follow reads the tracked subscriptions' mark-delete positions on the
// local partition and sends an update for each one that passed a newer
// snapshot; it also sets the lag gauges.
func (s *Sync) follow(ctx context.Context) error {
	f := &s.fl
	newest, hasNewest := s.Machine.Newest()
	hadData := s.pace.dataSeen.Swap(false)
	changed, prevAt := s.pace.begin(time.Now(), newest.ID)
	f.prio, f.maxAge = s.priority(), min(s.readingAge(changed, hadData), s.pace.at.Sub(prevAt))
	f.dataSinceRead = f.dataSinceRead || hadData
	f.readSent = s.pace.at
	mds, fromServlet := s.servletPositions(ctx, changed)
	s.pace.cheap = fromServlet
	if !fromServlet && s.resting(changed) {
		s.pace.rest()
		s.lagAged()
		return nil
	}
	prevMDs := f.mds
	if !fromServlet {
		var err error
		if mds, err = s.positions(ctx, f.prio); err != nil {
			s.pace.retry(s.Interval)
			return fmt.Errorf("local mark-delete positions: %w", err)
		}
	}
	s.pace.behind = false
	for name, md := range mds {
		if s.Tracked(name) {
			if last, ok := f.mds[name]; !ok || last != md {
				changed = true
			}
			// A subscription still where a remote's update put it has no
			// consumer moving it here (a standby region's copy): it is
			// followed like an idle one, not polled for a move.
			if hasNewest && md.Compare(newest.Local) < 0 && !s.movedByUpdate(name, md) {
				s.pace.behind = true
			}
		}
	}
	if len(f.mds) != len(mds) {
		changed = true
	}
	f.mds = mds
	s.pace.paced(changed, s.Interval)
	var slowest *marker.Position
	for name, md := range mds {
		if !s.Tracked(name) {
			continue
		}
		if s.movedByUpdate(name, md) {
			// The position came from a remote's update, not from consumers
			// here: echoing it back (or on to a third cluster) would chain
			// snapshots of different pairs, whose positions do not compose,
			// and could move a subscription past unconsumed messages.
			continue
		}
		if slowest == nil || md.Compare(*slowest) < 0 {
			slowest = &md
		}
		if s.passive.Load() {
			// Another instance's cursor is the active one: it sends (or
			// this one once active again: a follow then runs at once).
			// Writing the update here would take the marker producer
			// from it.
			continue
		}
		waiting := s.awaitingConfirmation(name)
		if _, would := s.Planner.Peek(name, md, s.Machine); would && (waiting || s.suspect(name, md, prevMDs)) {
			continue
		}
		snap, ok := s.Planner.Next(name, md, s.Machine)
		if !ok {
			if changed {
				// Why the remote does not follow: most often no snapshot
				// covers md (it lies before the partition's first one).
				_, covered := s.Machine.Covering(md)
				s.Log.Debug("no update for a subscription", zap.String("subscription", name), zap.Stringer("mark_delete", md),
					zap.Bool("covered", covered), zap.Stringer("newest_local", newest.Local), zap.Bool("has_newest", hasNewest))
			}
			continue
		}
		up := marker.Marker{Kind: marker.KindUpdate, From: s.Local, To: s.Remote, Topic: s.Topic,
			Subscription: name, Local: snap.Local, Remote: snap.Remote, Time: time.Now().UnixMilli()}
		if err := s.send(ctx, up); err != nil {
			s.Planner.Forget(name) // send it again next time
			return fmt.Errorf("write update: %w", err)
		}
		s.lags.sentUpdate(name, snap)
		s.Log.Debug("subscription update sent", zap.String("subscription", name), zap.Stringer("mark_delete", md),
			zap.Stringer("snapshot_local", snap.Local), zap.Stringer("snapshot_remote", snap.Remote))
		s.Metrics.UpdatesSent.WithLabelValues(s.Local, s.Remote).Inc()
		s.Metrics.MarkersWritten.WithLabelValues(s.Local, s.Remote, marker.KindUpdate.String()).Inc()
	}
	if fromServlet {
		s.sendAcked(ctx, mds, prevMDs) // the ack holes past each position (holes.go)
	}
	s.settleUnconfirmed(mds)
	if slowest != nil && len(f.unconfirmed) == 0 {
		// Not while a position waits: where it really is may be before
		// every one read (the end of a creation), and needs its snapshot.
		s.Machine.Prune(*slowest)
	}
	s.useless.Store(!s.snapshotUseful(mds))
	if fromServlet && s.lags.freshWithin(s.pace.at, servletLagRefresh) {
		s.lagAged() // the lag costs a stats request; positions cost none
		return nil
	}
	if !changed && !hadData && s.lags.fresh(s.pace.at) {
		s.lagAged() // the backlogs did not move here
		return nil
	}
	return s.lag(ctx)
}

// servletLagRefresh is how often a follow whose positions come from the
// positions servlet reads the lag (a shared stats reading of the topic):
// under traffic every follow read it, and at 1,000 busy topics those
// readings alone would fill the cluster's admin rate the servlet frees.
// The lag gauges and the follow's priority in the budget lag by as
// much; no position depends on them.
const servletLagRefresh = 30 * time.Second

// servletPositions returns the partition's positions from the cluster's
// positions servlet (servlet.go) when a broker reports the partition
// (ok), from a poll shared with the other partitions, as old as the
// shared stats reading may be on the admin path (maxAge, readingAge:
// half an interval while snapshots complete or data comes, half of
// idleFollow at rest, so that idle partitions' follows cost the brokers
// about a request each idleFollow/2). The poll began after the newest
// snapshot completed: after this follow began when that snapshot is new
// since the last one (newSnapshot) or the last one did not use the
// servlet (a follow that did saw every newer snapshot so), so that a
// position from before an operator's rewind never plans the update of a
// snapshot that completed after it (what keptMaySend guards on the
// admin path). No admin request, and none of the admin path's
// stats-reading heuristics (resting, keptMaySend, reached, ourMove). A
// state there is the broker's in-memory cursor, as internalStats reads
// it (docs/design/subscription-follow.md §12.3), so it is used as a
// position read is: the echo rule and the confirming read (its poll an
// interval later) apply. Without ServletNamesKnown, positions are read
// from the admin API every idleFollow (readPositionsNow puts the names
// found in the servlet's scope). ok is false without a Servlet, or when
// no broker reports the partition: the admin path follows it.
func (s *Sync) servletPositions(ctx context.Context, newSnapshot bool) (map[string]marker.Position, bool) {
	f := &s.fl
	last := f.servlet
	f.servlet = false
	if s.Servlet == nil || (!s.ServletNamesKnown && (f.mds == nil || s.pace.at.Sub(f.readAt) >= idleFollow)) {
		return nil, false
	}
	var after time.Time
	if newSnapshot || !last {
		after = s.pace.at
	}
	states, at, ok := s.Servlet.Positions(ctx, s.Topic, s.Cursor, f.maxAge, after)
	if !ok {
		return nil, false
	}
	mds := make(map[string]marker.Position, len(states))
	acked := make(map[string][]positions.Range, len(states))
	for name, st := range states {
		mds[name] = st.MarkDelete
		if len(st.Acked) > 0 && !st.Truncated {
			acked[name] = st.Acked
		}
	}
	// What the admin path's heuristics keep is void: a later follow by
	// the admin path (the broker lost its servlet) reads first.
	f.reading, f.seen, f.seenAt = nil, nil, time.Time{}
	f.freshRead, f.readSent, f.waitingSince = true, at, time.Time{}
	f.servlet, f.acked = true, acked
	f.dataSinceRead = false
	f.readNewest = ""
	if newest, ok := s.Machine.Newest(); ok {
		f.readNewest = newest.ID
	}
	s.Metrics.PositionsFromServlet.WithLabelValues(s.Local).Inc()
	return mds, true
}

// readingAge is how old a shared stats reading a follow may use (never
// older than the previous follow: a reading from before it shows no move
// since, and the next follow may come 30 s later): half a
// snapshot interval when a snapshot completed, data came or a
// subscription behind the newest snapshot is polled (an update may be
// due), else half of idleFollow (idle, or behind and stale: nobody
// consumes it). The partitions of an idle topic are followed at
// different moments: each asking for a fresh reading made one request per
// partition, not per topic. Data where no snapshot could serve a tracked
// subscription (useless: a standby copy, moved by updates alone) only
// needs a consumer attaching or acknowledging seen, within half of
// behindFollow: asking every half interval made the standby cluster's
// stats its largest read cost.
func (s *Sync) readingAge(newSnapshot, hadData bool) time.Duration {
	switch {
	case newSnapshot || (s.pace.behind && s.pace.every <= behindFollow):
		return s.Interval / 2
	case hadData && s.useless.Load():
		return behindFollow / 2
	case hadData:
		return s.Interval / 2
	}
	return idleFollow / 2
}
